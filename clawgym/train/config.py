"""Training settings by TRL's and peft's own names: no renaming layer.

A run's trainer arguments are a plain dict of `trl.SFTConfig` / `trl.GRPOConfig` fields (``learning_rate``,
``max_steps``, ``per_device_train_batch_size``, ``gradient_accumulation_steps``, ``max_length``, …) laid over
clawgym's defaults (`SFT_DEFAULTS`, `GRPO_DEFAULTS`) and handed to ``trl.SFTConfig(**fields)`` /
``trl.GRPOConfig(**fields)``. LoRA settings are `peft.LoraConfig` fields over `LORA_DEFAULTS`. Keys are checked
against the dataclass's own fields (`check_fields`): an unknown one is one `TrainConfigError` naming it.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Mapping

# clawgym's defaults for trl.SFTConfig (TRL's own differ: lr 2e-5, batch 8, max_length 1024, seed 42, …)
SFT_DEFAULTS: dict[str, Any] = {
    "max_steps": 100, "num_train_epochs": 3.0, "learning_rate": 1e-5, "max_length": 4096,
    "per_device_train_batch_size": 1, "gradient_accumulation_steps": 1, "warmup_steps": 0,
    "lr_scheduler_type": "constant", "weight_decay": 0.0, "save_steps": 50,
    "save_total_limit": 1,  # Trainer checkpoints kept in <output_dir>/_trainer (for resume)
    "logging_steps": 1, "seed": 0, "activation_checkpointing": False, "assistant_only_loss": True,
    "packing": False, "report_to": [], "disable_tqdm": True, "include_num_input_tokens_seen": "non_padding",
    "dataloader_num_workers": 0, "save_only_model": False,
    # unset use_cpu: on when no GPU is visible; bf16 None (or unset): on a GPU that supports it;
    # data_seed unset: the seed
}

# clawgym's defaults for trl.GRPOConfig
GRPO_DEFAULTS: dict[str, Any] = {
    "num_generations": 8,  # N samples per prompt
    "per_device_train_batch_size": 8,  # completions per device step (a multiple of num_generations)
    "gradient_accumulation_steps": 1, "max_steps": 50, "learning_rate": 1e-6,
    "beta": 0.0,  # KL coefficient (0: no reference model)
    "temperature": 1.0, "max_completion_length": 512, "max_tool_calling_iterations": 8, "seed": 0,
    "logging_steps": 1, "save_steps": 500, "report_to": [], "disable_tqdm": True,
}

# clawgym's defaults for peft.LoraConfig (when LoRA is on)
LORA_DEFAULTS: dict[str, Any] = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.05, "target_modules": "all-linear",
                                 "task_type": "CAUSAL_LM"}


class TrainConfigError(ValueError):
    """A training setting that does not exist (or is set by clawgym itself): names the field."""


def field_names(cls) -> frozenset[str]:
    """The field names of a config dataclass (e.g. trl.SFTConfig, peft.LoraConfig)."""
    return frozenset(f.name for f in dataclasses.fields(cls))


def check_fields(cls, values: Mapping[str, Any] | None, where: str, reserved: Mapping[str, str] | None = None
                 ) -> dict[str, Any]:
    """`values` as a dict after checking every key is a field of the dataclass `cls`.

    `reserved`: fields clawgym sets itself (name -> where to set it instead). Raises `TrainConfigError`."""
    values = dict(values or {})
    names = field_names(cls)
    for k in sorted(values):
        if reserved and k in reserved:
            raise TrainConfigError(f"{where}: field {k!r} is set by clawgym ({reserved[k]})")
        if k not in names:
            near = difflib.get_close_matches(str(k), names, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise TrainConfigError(f"{where}: unknown field {k!r}: not a field of "
                                   f"{cls.__module__.split('.')[0]}.{cls.__name__}{hint}")
    return values


def sft_config_class():
    """trl.SFTConfig (imported on first use)."""
    from trl import SFTConfig

    return SFTConfig


def grpo_config_class():
    """trl.GRPOConfig (imported on first use)."""
    from trl import GRPOConfig

    return GRPOConfig


def lora_config_class():
    """peft.LoraConfig (imported on first use)."""
    from peft import LoraConfig

    return LoraConfig


def resolve_device(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with the device settings made explicit: ``use_cpu`` unset -> on when no GPU is visible;
    ``bf16`` None / unset -> on when training runs on a GPU that supports it."""
    import torch

    f = dict(fields)
    if f.get("use_cpu") is None:
        f["use_cpu"] = not torch.cuda.is_available()
    if f.get("bf16") is None:
        f["bf16"] = bool(not f["use_cpu"] and torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return f


__all__ = ["SFT_DEFAULTS", "GRPO_DEFAULTS", "LORA_DEFAULTS", "TrainConfigError", "field_names", "check_fields",
           "sft_config_class", "grpo_config_class", "lora_config_class", "resolve_device"]
