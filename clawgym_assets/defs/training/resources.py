"""How checkpoints are trained: the trainer settings (TRL / peft fields) and the Pipes client that runs the trainer
as a subprocess. `training_resources` gives the set the default definitions bind, from the environment."""

import os
import sys
from collections.abc import Mapping
from typing import Any

import dagster as dg


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
    sft_config: dict[str, Any] = {}  # further trl.SFTConfig fields, by TRL's names
    # LoRA (peft) instead of full fine-tuning
    lora: bool = False
    lora_config: dict[str, Any] = {}  # peft.LoraConfig fields over clawgym.train.config.LORA_DEFAULTS

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "TrainerResource":
        """$CLAWGYM_SFT_STEPS sets max_steps (default 4)."""
        env = os.environ if env is None else env
        return cls(max_steps=int(env.get("CLAWGYM_SFT_STEPS", "4")))

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


def training_resources(env: Mapping[str, str] | None = None) -> dict:
    """The training domain's resources from the environment."""
    return {"trainer": TrainerResource.from_env(env), "pipes_subprocess_client": dg.PipesSubprocessClient()}
