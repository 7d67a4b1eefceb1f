"""What a rollout runs on: the sandbox backend and its limits, the policies reachable by name, the judge, how local
checkpoints are served and the OpenClaw runtime. Each resource reads its own environment variables in its
`from_env`; `rollout_resources` gives the set the default definitions bind."""

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import dagster as dg

from clawgym_assets.defs.lake.resources import LakeResource


class SandboxResource(dg.ConfigurableResource):
    """Which sandbox backend and which limits. backend: auto | docker | bwrap | local ($CLAWGYM_SANDBOX in
    from_env); bwrap_server: False = a bwrap per exec ($CLAWGYM_BWRAP_SERVER=0). The host facts (where this host keeps
    things: SandboxConfig's fields of those names) come from $CLAWGYM_ROOTFS, $CLAWGYM_SANDBOX_TMP,
    $CLAWGYM_SANDBOX_NO_TMPFS, $CLAWGYM_SANDBOX_NO_CGROUP and $CLAWGYM_EXECD_STAGE in from_env
    (clawgym.sandbox.host_settings)."""

    backend: str = "auto"
    memory_mb: int = 1024
    pids: int = 256
    cpus: float = 1.0
    disk_mb: int = 512
    default_timeout_s: float = 60.0
    image: str = "clawgym-sandbox:latest"
    bwrap_server: bool = True
    default_rootfs: str = "/var/lib/clawgym/rootfs"  # the built root, used when built ($CLAWGYM_ROOTFS)
    state_root: str = ""  # the sandboxes' state dirs go here ("" = the system temp dir; $CLAWGYM_SANDBOX_TMP)
    tmpfs: bool = True  # state dirs as tmpfs mounts where root ($CLAWGYM_SANDBOX_NO_TMPFS=1: False)
    cgroups: bool = True  # bwrap limits by cgroup where root ($CLAWGYM_SANDBOX_NO_CGROUP=1: False, rlimits)
    stage_execd: bool = False  # docker: execd.py staged into state_root ($CLAWGYM_EXECD_STAGE=1)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "SandboxResource":
        """$CLAWGYM_SANDBOX (the backend, default auto), $CLAWGYM_BWRAP_SERVER (0 = a bwrap per exec) and the host
        facts (clawgym.sandbox.host_settings)."""
        from clawgym.sandbox import host_settings

        env = os.environ if env is None else env
        return cls(backend=env.get("CLAWGYM_SANDBOX", "auto"), bwrap_server=env.get("CLAWGYM_BWRAP_SERVER", "1") != "0",
                   **host_settings(env))

    def config(self):
        from clawgym.sandbox import SandboxConfig

        return SandboxConfig(memory_mb=self.memory_mb, pids=self.pids, cpus=self.cpus, disk_mb=self.disk_mb,
                             image=self.image, default_timeout_s=self.default_timeout_s,
                             bwrap_server=self.bwrap_server, default_rootfs=self.default_rootfs,
                             state_root=self.state_root, tmpfs=self.tmpfs, cgroups=self.cgroups,
                             stage_execd=self.stage_execd)

    @contextlib.contextmanager
    def factory(self) -> Iterator:
        from clawgym.sandbox import get_factory

        f = get_factory(self.backend, self.config())
        try:
            yield f
        finally:
            f.close()


class ModelEndpointsResource(dg.ConfigurableResource):
    """Policies reachable by name: built-ins (oracle, noop), endpoints JSON (a list/object of PolicySpec
    fields, e.g. from dg.EnvVar("CLAWGYM_ENDPOINTS")), local checkpoints under <data>/checkpoints/, and the
    embedded base model (`base_policy_name`). <data> is the nested LakeResource's data root."""

    lake: LakeResource
    endpoints_json: str = ""
    checkpoints_dir: str = ""  # "" = <data>/checkpoints
    base_model_dir: str = ""  # "" = <data>/models/smollm2-135m-instruct
    base_policy_name: str = "smollm2-base"
    server_device: str = "cpu"

    @classmethod
    def from_env(cls, lake: LakeResource, env: Mapping[str, str] | None = None) -> "ModelEndpointsResource":
        """The endpoints JSON bound as dg.EnvVar("CLAWGYM_ENDPOINTS") when that is set (it may hold keys: resolved
        in the run, never stored), on the given lake."""
        env = os.environ if env is None else env
        return cls(lake=lake, endpoints_json=dg.EnvVar("CLAWGYM_ENDPOINTS") if env.get("CLAWGYM_ENDPOINTS") else "")

    def _data(self) -> Path:
        return self.lake.root()

    def checkpoints_path(self) -> Path:
        return Path(self.checkpoints_dir).resolve() if self.checkpoints_dir else self._data() / "checkpoints"

    def base_model_path(self) -> Path:
        return Path(self.base_model_dir).resolve() if self.base_model_dir else \
            self._data() / "models" / "smollm2-135m-instruct"

    def policy(self, name: str):
        from clawgym.bench.runner import resolve_policy

        return resolve_policy(name, endpoints_json=self.endpoints_json,
                              checkpoints_dir=self.checkpoints_path(), base_model_dir=self.base_model_path(),
                              base_policy_name=self.base_policy_name, extra={"device": self.server_device})


class JudgeResource(dg.ConfigurableResource):
    """Rubric judge: kind offline (deterministic proxies), openai (any OpenAI-compatible endpoint) or auto
    (openai when base_url and model are set, else offline). `from_env` fills them from CLAWGYM_JUDGE,
    CLAWGYM_JUDGE_BASE_URL, CLAWGYM_JUDGE_MODEL, CLAWGYM_JUDGE_API_KEY_ENV; the key itself is read from the
    env var NAMED api_key_env only when the judge calls the endpoint."""

    kind: str = "offline"
    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"  # the NAME of the env var holding the key

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "JudgeResource":
        from clawgym.verify.judge import JUDGE_SETTINGS

        env = os.environ if env is None else env
        st = {k: env.get(v, "") for k, v in JUDGE_SETTINGS.items()}
        return cls(kind=env.get("CLAWGYM_JUDGE", "offline") or "offline", base_url=st["base_url"],
                   model=st["model"], api_key_env=st["api_key_env"] or "OPENAI_API_KEY")

    def judge(self):
        from clawgym.verify import make_judge

        if self.kind == "openai":
            return make_judge({"base_url": self.base_url, "model": self.model, "api_key_env": self.api_key_env})
        return make_judge(self.kind or "offline", {"base_url": self.base_url, "model": self.model,
                                                   "api_key_env": self.api_key_env})


class LocalModelServerResource(dg.ConfigurableResource):
    """How local checkpoints are served (the vLLM engine via clawgym.serve.ModelServer)."""

    device: str = "cpu"
    port: int = 0  # 0 = pick a free port
    max_new_tokens: int = 256


class OpenClawResource(dg.ConfigurableResource):
    """The real OpenClaw runtime (off by default: the builtin loop is used)."""

    enabled: bool = False
    # where scripts/install_openclaw.sh put node + openclaw ("" = clawgym.agent.openclaw.DEFAULT_OPENCLAW_DIR;
    # from_env takes $CLAWGYM_OPENCLAW_DIR)
    install_dir: str = ""
    tools_dir: str = ""  # a further candidate install, used first when it holds one ("" = none)
    proxy_sock_dir: str = ""  # parent of the per-rollout proxy sockets ("" = /tmp/clawgym-proxy-<uid>)
    proxy_log_dir: str = ""  # where proxy logs go ("" = a fresh temp dir per rollout)
    skill_dirs: str = ""  # further SKILL.md folders for the `skills` asset (os.pathsep-separated)
    timeout_s: int = 600

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "OpenClawResource":
        """$CLAWGYM_OPENCLAW=1 turns it on; $CLAWGYM_OPENCLAW_DIR, $CLAWGYM_PROXY_SOCK_DIR, $CLAWGYM_PROXY_LOG_DIR and
        $CLAWGYM_SKILL_DIRS fill the fields of those names."""
        env = os.environ if env is None else env
        return cls(enabled=env.get("CLAWGYM_OPENCLAW", "") == "1", install_dir=env.get("CLAWGYM_OPENCLAW_DIR", ""),
                   proxy_sock_dir=env.get("CLAWGYM_PROXY_SOCK_DIR", ""),
                   proxy_log_dir=env.get("CLAWGYM_PROXY_LOG_DIR", ""), skill_dirs=env.get("CLAWGYM_SKILL_DIRS", ""))

    def extra_skill_dirs(self) -> list[str]:
        return [p for p in self.skill_dirs.split(os.pathsep) if p]

    def runtime(self) -> str:
        return "openclaw" if self.enabled else "builtin"

    def resolved_install_dir(self) -> str:
        from clawgym.agent.openclaw import resolve_openclaw_dir

        return resolve_openclaw_dir(self.tools_dir or None, self.install_dir or None,
                                    default=self.install_dir or None)

    def opts(self) -> dict | None:
        if not self.enabled:
            return None
        o = {"install_dir": self.resolved_install_dir(), "timeout_s": self.timeout_s}
        if self.proxy_sock_dir:
            o["sock_dir"] = self.proxy_sock_dir
        if self.proxy_log_dir:
            o["log_dir"] = self.proxy_log_dir
        return o


def rollout_resources(lake: LakeResource, env: Mapping[str, str] | None = None) -> dict:
    """The rollout domain's resources from the environment, the endpoints nested on `lake`."""
    return {
        "sandbox": SandboxResource.from_env(env),
        "endpoints": ModelEndpointsResource.from_env(lake, env),
        "judge": JudgeResource.from_env(env),
        "model_server": LocalModelServerResource(),
        "openclaw": OpenClawResource.from_env(env),
    }
