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
    Resources that need data paths nest this one, so data_dir is set once.

    lake_uri "" keeps the lake in <data_dir>/lake; ``s3://bucket/prefix`` puts the tables on an S3-compatible
    object store (pyarrow.fs) while caches, checkpoints and the DuckDB file stay under data_dir. The s3_* fields
    say how to reach it; `from_env` fills them from $CLAWGYM_LAKE_URI, $CLAWGYM_S3_ENDPOINT_URL,
    $CLAWGYM_S3_REGION (else $AWS_REGION / $AWS_DEFAULT_REGION) and, as dg.EnvVar (resolved when used, never
    stored or logged), $AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY / $AWS_SESSION_TOKEN."""

    data_dir: str = ""
    lake_uri: str = ""  # "" = <data_dir>/lake; a folder; or s3://bucket/prefix
    s3_endpoint_url: str = ""  # "" = AWS S3; e.g. http://127.0.0.1:9000 for MinIO / moto
    s3_region: str = ""
    s3_access_key_id: str = ""  # "" = the AWS SDK's own credential chain
    s3_secret_access_key: str = ""
    s3_session_token: str = ""
    # False: the lake, catalog, caches, checkpoints and logs are owner-only (0700 / 0600); True: readable by the
    # owning group too (0750 / 0640), for a team sharing one data root ($CLAWGYM_SHARED_GROUP=1)
    shared_group: bool = False

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "LakeResource":
        """The lake of the environment: CLAWGYM_DATA, CLAWGYM_LAKE_URI, CLAWGYM_S3_ENDPOINT_URL, CLAWGYM_S3_REGION
        (else AWS_REGION / AWS_DEFAULT_REGION); the AWS_* credentials as dg.EnvVar when set and the lake is on
        object storage (a local lake never depends on them)."""
        env = os.environ if env is None else env
        remote = lake.is_remote(env.get("CLAWGYM_LAKE_URI", ""))
        secret = {f: dg.EnvVar(v) for f, v in (("s3_access_key_id", "AWS_ACCESS_KEY_ID"),
                                                ("s3_secret_access_key", "AWS_SECRET_ACCESS_KEY"),
                                                ("s3_session_token", "AWS_SESSION_TOKEN")) if remote and env.get(v)}
        return cls(data_dir=env.get("CLAWGYM_DATA", ""), lake_uri=env.get("CLAWGYM_LAKE_URI", ""),
                   s3_endpoint_url=env.get("CLAWGYM_S3_ENDPOINT_URL", ""),
                   s3_region=env.get("CLAWGYM_S3_REGION") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
                   or "", shared_group=lake.modes.shared_from_env(env), **secret)

    def setup_for_execution(self, context) -> None:
        # the definitions' entry point in every run process: the data root and what the run writes in it (lake,
        # catalog, caches, checkpoints, logs) are owner-only, or group-readable with shared_group (lake.modes)
        lake.modes.push(self.shared_group)
        lake.modes.protect(self.root(), self.shared_group)

    def teardown_after_execution(self, context) -> None:
        lake.modes.pop()

    def root(self) -> Path:
        return lake.data_root(self.data_dir or None)

    def _value(self, v: str) -> str:
        # a dg.EnvVar left unresolved (the resource used outside a run, e.g. by the CLI): its value now
        return v.get_value() or "" if isinstance(v, dg.EnvVar) else v

    def s3_options(self) -> lake.S3Options:
        """How to reach the object store (credentials resolved here, in memory only)."""
        return lake.S3Options(endpoint_url=self._value(self.s3_endpoint_url), region=self._value(self.s3_region),
                              access_key_id=self._value(self.s3_access_key_id),
                              secret_access_key=self._value(self.s3_secret_access_key),
                              session_token=self._value(self.s3_session_token))

    @property
    def remote(self) -> bool:
        """True when the lake is on object storage (lake_uri s3://…)."""
        return lake.is_remote(self._value(self.lake_uri))

    def tables(self) -> Lake:
        """A Dagster-free handle on the same lake (for library code)."""
        return Lake(self.lake_dir)

    @property
    def lake_dir(self):
        """The lake folder (a Path), or the checked clawgym.lake.RemoteLake when lake_uri is s3://… — both are
        what the clawgym.lake functions take as `root`."""
        uri = self._value(self.lake_uri)
        if lake.is_remote(uri):
            return lake.open_lake(uri, self.s3_options())
        return Path(uri).resolve() if uri else self.root() / "lake"

    @property
    def db_path(self) -> Path:
        return self.root() / "clawgym.duckdb"

    def path(self, *parts: str) -> Path:
        return self.root().joinpath(*parts)

    def write(self, table: lake.Table, rows, partitions=None, mode: str = "overwrite"):
        return lake.write_table(table, rows, partitions, mode=mode, root=self.lake_dir)

    def append(self, table: lake.Table, rows, partitions=None):
        return lake.append_rows(table, rows, partitions, root=self.lake_dir)

    def read(self, table: lake.Table, partitions=None):
        return lake.read_table(table, partitions, root=self.lake_dir)

    def values(self, table: lake.Table, column: str, partitions=None) -> set:
        return lake.column_values(table, column, partitions, root=self.lake_dir)

    def refresh_catalog(self) -> Path:
        return lake.refresh_catalog(self.db_path, root=self.lake_dir)

    def query(self, sql: str):
        """(column names, rows) of `sql` over the lake's views (DuckDB; object storage read through pyarrow)."""
        return lake.query(sql, self.db_path, root=self.lake_dir)


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
    """How local checkpoints are served (the vLLM engine via clawgym.serve.ModelServer)."""

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
    max_length: int = 4096  # the demo's rows reach ~4K tokens: shorter cuts their final answer and stop token
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
    CLAWGYM_ENDPOINTS, CLAWGYM_JUDGE*, CLAWGYM_OPENCLAW*, CLAWGYM_SHARED_GROUP, …). The one LakeResource is nested
    in the resources that need data paths; every run makes its data root owner-only (group-readable with
    CLAWGYM_SHARED_GROUP=1: clawgym.lake.modes)."""
    lake_res = LakeResource.from_env()
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
    executor: str = "in_process"  # in_process | multiprocess | docker (dagster-docker's step-per-container)

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "GraphSettings":
        """CLAWGYM_SHARDS (default 4) and CLAWGYM_EXECUTOR (in_process (default) | multiprocess | docker)."""
        env = os.environ if env is None else env
        n = env.get("CLAWGYM_SHARDS", "") or str(cls.n_shards)
        try:
            n_shards = int(n)
        except ValueError:
            raise ValueError(f"CLAWGYM_SHARDS: {n!r} is not an integer") from None
        if n_shards < 1:
            raise ValueError(f"CLAWGYM_SHARDS: must be at least 1, got {n_shards}")
        executor = env.get("CLAWGYM_EXECUTOR", "") or cls.executor
        if executor not in ("in_process", "multiprocess", "docker"):
            raise ValueError(f"CLAWGYM_EXECUTOR: {executor!r} is not one of in_process, multiprocess, docker")
        return cls(n_shards=n_shards, executor=executor)
