"""Dagster resources: the configured edges of the world (hosts, paths, keys). Only this package knows them;
secrets come from env vars (dg.EnvVar) and are never logged or stored."""

import contextlib
import os
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

import dagster as dg

from clawgym import lake


class LakeResource(dg.ConfigurableResource):
    """Where the lake lives. data_dir "" = $CLAWGYM_DATA or <repo>/data."""

    data_dir: str = ""

    def root(self) -> Path:
        return Path(self.data_dir).resolve() if self.data_dir else lake.data_root()

    @property
    def lake_dir(self) -> Path:
        return self.root() / "lake"

    @property
    def db_path(self) -> Path:
        return self.root() / "clawgym.duckdb"

    def path(self, *parts: str) -> Path:
        return self.root().joinpath(*parts)

    def write(self, table: str, rows, partitions=None, mode: str = "overwrite") -> Path:
        return lake.write_table(table, rows, partitions, mode=mode, root=self.lake_dir)

    def append(self, table: str, rows, partitions=None) -> Path:
        return lake.append_rows(table, rows, partitions, root=self.lake_dir)

    def read(self, table: str, partitions=None):
        return lake.read_table(table, partitions, root=self.lake_dir)

    def values(self, table: str, column: str, partitions=None) -> set:
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
    fields, e.g. from dg.EnvVar("CLAWGYM_ENDPOINTS")), local checkpoints under data/checkpoints/, and the
    embedded base model (`base_policy_name`)."""

    endpoints_json: str = ""
    checkpoints_dir: str = ""  # "" = <data>/checkpoints
    base_model_dir: str = ""  # "" = <data>/models/smollm2-135m-instruct
    base_policy_name: str = "smollm2-base"
    server_device: str = "cpu"

    def _data(self) -> Path:
        return lake.data_root()

    def checkpoints_path(self) -> Path:
        return Path(self.checkpoints_dir).resolve() if self.checkpoints_dir else self._data() / "checkpoints"

    def base_model_path(self) -> Path:
        return Path(self.base_model_dir).resolve() if self.base_model_dir else \
            self._data() / "models" / "smollm2-135m-instruct"

    def policy(self, name: str):
        from clawgym.bench.runner import resolve_policy

        return resolve_policy(name, endpoints_json=self.endpoints_json or None,
                              checkpoints_dir=self.checkpoints_path(), base_model_dir=self.base_model_path(),
                              base_policy_name=self.base_policy_name, extra={"device": self.server_device})


class JudgeResource(dg.ConfigurableResource):
    """Rubric judge: kind offline (deterministic proxies) or openai (any OpenAI-compatible endpoint)."""

    kind: str = "offline"
    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"  # the NAME of the env var holding the key

    def judge(self):
        from clawgym.verify import make_judge

        if self.kind == "openai":
            return make_judge({"base_url": self.base_url, "model": self.model, "api_key_env": self.api_key_env})
        return make_judge(self.kind or "offline")


class LocalModelServerResource(dg.ConfigurableResource):
    """How local checkpoints are served (transformers serve via clawgym.train.serve.ModelServer)."""

    device: str = "cpu"
    port: int = 0  # 0 = pick a free port
    max_new_tokens: int = 256


class OpenClawResource(dg.ConfigurableResource):
    """The real OpenClaw runtime (off by default: the builtin loop is used)."""

    enabled: bool = False
    tools_dir: str = ""  # where scripts/install_openclaw.sh put node + openclaw ("" = <repo>/tools)
    timeout_s: int = 600

    def runtime(self) -> str:
        return "openclaw" if self.enabled else "builtin"

    def opts(self) -> Optional[dict]:
        if not self.enabled:
            return None
        return {"tools_dir": self.tools_dir or str(lake.REPO_ROOT / "tools"), "timeout_s": self.timeout_s}


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
    """The resources of the default Definitions; env vars override (CLAWGYM_SANDBOX, CLAWGYM_ENDPOINTS, …)."""
    return {
        "lake": LakeResource(data_dir=os.environ.get("CLAWGYM_DATA", "")),
        "sandbox": SandboxResource(backend=os.environ.get("CLAWGYM_SANDBOX", "auto"),
                                   bwrap_server=os.environ.get("CLAWGYM_BWRAP_SERVER", "1") != "0"),
        "endpoints": ModelEndpointsResource(endpoints_json=dg.EnvVar("CLAWGYM_ENDPOINTS")
                                            if os.environ.get("CLAWGYM_ENDPOINTS") else ""),
        "judge": JudgeResource(kind=os.environ.get("CLAWGYM_JUDGE", "offline")),
        "model_server": LocalModelServerResource(),
        "openclaw": OpenClawResource(enabled=os.environ.get("CLAWGYM_OPENCLAW", "") == "1"),
        "trainer": TrainerResource(max_steps=int(os.environ.get("CLAWGYM_SFT_STEPS", "4"))),
        "pipes_subprocess_client": dg.PipesSubprocessClient(),
    }
