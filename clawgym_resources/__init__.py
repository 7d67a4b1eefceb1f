"""Dagster resources: the configured edges of the world (hosts, paths, keys). Only this package knows them;
secrets come from env vars (dg.EnvVar) and are never logged or stored."""

import contextlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Optional

import dagster as dg

from clawgym import lake
from clawgym.lake.tables import Lake, LakeTables


class LakeResource(LakeTables, dg.ConfigurableResource):
    """Where the lake lives (data_dir "" = <repo>/data; default_resources() sets it from $CLAWGYM_DATA), with
    typed readers of every table (LakeTables: lake.tasks(source), lake.trajectories(policy, shard), …).
    Resources that need data paths nest this one, so data_dir is set once."""

    data_dir: str = ""

    def root(self) -> Path:
        return lake.data_root(self.data_dir or None)

    def tables(self) -> Lake:
        """A Dagster-free handle on the same lake (for library code)."""
        return Lake(self.lake_dir)

    @property
    def lake_dir(self) -> Path:
        return self.root() / "lake"

    @property
    def db_path(self) -> Path:
        return self.root() / "clawgym.duckdb"

    def path(self, *parts: str) -> Path:
        return self.root().joinpath(*parts)

    def write(self, table: lake.Table, rows, partitions=None, mode: str = "overwrite") -> Path:
        return lake.write_table(table, rows, partitions, mode=mode, root=self.lake_dir)

    def append(self, table: lake.Table, rows, partitions=None) -> Path:
        return lake.append_rows(table, rows, partitions, root=self.lake_dir)

    def read(self, table: lake.Table, partitions=None):
        return lake.read_table(table, partitions, root=self.lake_dir)

    def values(self, table: lake.Table, column: str, partitions=None) -> set:
        return lake.column_values(table, column, partitions, root=self.lake_dir)

    def refresh_catalog(self) -> Path:
        return lake.refresh_catalog(self.db_path, root=self.lake_dir)


class SandboxResource(dg.ConfigurableResource):
    """Which sandbox backend and which limits. backend: auto | docker | bwrap | local ($CLAWGYM_SANDBOX in
    default_resources); bwrap_server: False = a bwrap per exec ($CLAWGYM_BWRAP_SERVER=0)."""

    backend: str = "auto"
    memory_mb: int = 1024
    pids: int = 256
    cpus: float = 1.0
    disk_mb: int = 512
    default_timeout_s: float = 60.0
    image: str = "clawgym-sandbox:latest"
    bwrap_server: bool = True

    def config(self):
        from clawgym.sandbox import SandboxConfig

        return SandboxConfig(memory_mb=self.memory_mb, pids=self.pids, cpus=self.cpus, disk_mb=self.disk_mb,
                             image=self.image, default_timeout_s=self.default_timeout_s,
                             bwrap_server=self.bwrap_server)

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
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "JudgeResource":
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
    """How local checkpoints are served (transformers serve via clawgym.train.serve.ModelServer)."""

    device: str = "cpu"
    port: int = 0  # 0 = pick a free port
    max_new_tokens: int = 256


class OpenClawResource(dg.ConfigurableResource):
    """The real OpenClaw runtime (off by default: the builtin loop is used)."""

    enabled: bool = False
    # where scripts/install_openclaw.sh put node + openclaw ("" = clawgym.agent.openclaw.DEFAULT_OPENCLAW_DIR;
    # default_resources() takes $CLAWGYM_OPENCLAW_DIR)
    install_dir: str = ""
    tools_dir: str = ""  # a further candidate install, used first when it holds one ("" = none)
    proxy_sock_dir: str = ""  # parent of the per-rollout proxy sockets ("" = /tmp/clawgym-proxy-<uid>)
    proxy_log_dir: str = ""  # where proxy logs go ("" = a fresh temp dir per rollout)
    skill_dirs: str = ""  # further SKILL.md folders for the `skills` asset (os.pathsep-separated)
    timeout_s: int = 600

    def extra_skill_dirs(self) -> list[str]:
        return [p for p in self.skill_dirs.split(os.pathsep) if p]

    def runtime(self) -> str:
        return "openclaw" if self.enabled else "builtin"

    def resolved_install_dir(self) -> str:
        from clawgym.agent.openclaw import resolve_openclaw_dir

        return resolve_openclaw_dir(self.tools_dir or None, self.install_dir or None,
                                    default=self.install_dir or None)

    def opts(self) -> Optional[dict]:
        if not self.enabled:
            return None
        o = {"install_dir": self.resolved_install_dir(), "timeout_s": self.timeout_s}
        if self.proxy_sock_dir:
            o["sock_dir"] = self.proxy_sock_dir
        if self.proxy_log_dir:
            o["log_dir"] = self.proxy_log_dir
        return o


class TrainerResource(dg.ConfigurableResource):
    """How `checkpoints` are trained (SFT, as a Pipes subprocess: `python -m clawgym.train.pipes_sft`).

    Trainer settings are trl.SFTConfig fields under TRL's own names: the common ones as fields here, any other
    in `sft_config` (checked against trl.SFTConfig). LoRA settings are peft.LoraConfig fields (`lora_config`).
    Unset trl.SFTConfig fields take clawgym's defaults (clawgym.train.config.SFT_DEFAULTS)."""

    python: str = ""  # "" = this interpreter
    # trl.SFTConfig fields
    max_steps: int = 4
    num_train_epochs: float = 3.0
    learning_rate: float = 1e-5
    per_device_train_batch_size: int = 1
    gradient_accumulation_steps: int = 1
    max_length: int = 2048
    use_cpu: bool = True
    sft_config: Dict[str, Any] = {}  # further trl.SFTConfig fields, by TRL's names
    # LoRA (peft) instead of full fine-tuning
    lora: bool = False
    lora_config: Dict[str, Any] = {}  # peft.LoraConfig fields over clawgym.train.config.LORA_DEFAULTS

    def command(self) -> list[str]:
        return [self.python or sys.executable, "-m", "clawgym.train.pipes_sft"]

    def trl_fields(self) -> dict:
        """The trl.SFTConfig fields this resource sets (the named ones, then `sft_config`)."""
        named = {"max_steps": self.max_steps, "num_train_epochs": self.num_train_epochs,
                 "learning_rate": self.learning_rate, "per_device_train_batch_size": self.per_device_train_batch_size,
                 "gradient_accumulation_steps": self.gradient_accumulation_steps, "max_length": self.max_length,
                 "use_cpu": self.use_cpu}
        twice = sorted(set(named) & set(self.sft_config))
        if twice:
            from clawgym.train.config import TrainConfigError

            raise TrainConfigError(f"TrainerResource.sft_config: field {twice[0]!r} is set by the resource's own "
                                   f"field {twice[0]!r}: set it there")
        return {**named, **self.sft_config}

    def sft_run(self, **run):
        """A validated clawgym.train.sft.SFTRunConfig: `run` (base_model, dataset_path, output_dir, name, …) plus
        this resource's trainer and LoRA settings. An unknown TRL / peft field raises TrainConfigError naming it."""
        from clawgym.train.config import TrainConfigError
        from clawgym.train.sft import SFTRunConfig

        try:
            return SFTRunConfig(**run, lora=self.lora, lora_config=dict(self.lora_config),
                                sft_config=self.trl_fields())
        except TrainConfigError as e:
            raise TrainConfigError(f"TrainerResource: {e}") from e


def default_resources() -> dict:
    """The resources of the default Definitions; env vars override (CLAWGYM_DATA, CLAWGYM_SANDBOX,
    CLAWGYM_ENDPOINTS, CLAWGYM_JUDGE*, CLAWGYM_OPENCLAW*, …). The one LakeResource is nested in the resources
    that need data paths."""
    lake_res = LakeResource(data_dir=os.environ.get("CLAWGYM_DATA", ""))
    return {
        "lake": lake_res,
        "sandbox": SandboxResource(backend=os.environ.get("CLAWGYM_SANDBOX", "auto"),
                                   bwrap_server=os.environ.get("CLAWGYM_BWRAP_SERVER", "1") != "0"),
        "endpoints": ModelEndpointsResource(lake=lake_res, endpoints_json=dg.EnvVar("CLAWGYM_ENDPOINTS")
                                            if os.environ.get("CLAWGYM_ENDPOINTS") else ""),
        "judge": JudgeResource.from_env(),
        "model_server": LocalModelServerResource(),
        "openclaw": OpenClawResource(enabled=os.environ.get("CLAWGYM_OPENCLAW", "") == "1",
                                     install_dir=os.environ.get("CLAWGYM_OPENCLAW_DIR", ""),
                                     proxy_sock_dir=os.environ.get("CLAWGYM_PROXY_SOCK_DIR", ""),
                                     proxy_log_dir=os.environ.get("CLAWGYM_PROXY_LOG_DIR", ""),
                                     skill_dirs=os.environ.get("CLAWGYM_SKILL_DIRS", "")),
        "trainer": TrainerResource(max_steps=int(os.environ.get("CLAWGYM_SFT_STEPS", "4"))),
        "pipes_subprocess_client": dg.PipesSubprocessClient(),
    }


@dataclass(frozen=True)
class GraphSettings:
    """How the graph itself is shaped, read once when the definitions load (never at import): the number of
    trajectory shards (partition keys "0".."n_shards-1" of the `shard` dimension) and the executor."""

    n_shards: int = 4
    executor: str = "in_process"  # in_process | multiprocess

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "GraphSettings":
        """CLAWGYM_SHARDS (default 4) and CLAWGYM_EXECUTOR (multiprocess, else in-process)."""
        env = os.environ if env is None else env
        n = env.get("CLAWGYM_SHARDS", "") or str(cls.n_shards)
        try:
            n_shards = int(n)
        except ValueError:
            raise ValueError(f"CLAWGYM_SHARDS: {n!r} is not an integer") from None
        if n_shards < 1:
            raise ValueError(f"CLAWGYM_SHARDS: must be at least 1, got {n_shards}")
        return cls(n_shards=n_shards,
                   executor="multiprocess" if env.get("CLAWGYM_EXECUTOR") == "multiprocess" else "in_process")
