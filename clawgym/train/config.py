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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# clawgym's defaults for trl.SFTConfig (TRL's own differ: lr 2e-5, batch 8, max_length 1024, seed 42, …)
SFT_DEFAULTS: dict[str, Any] = {
    "max_steps": 100, "num_train_epochs": 3.0, "learning_rate": 1e-5, "max_length": 4096,
    "per_device_train_batch_size": 1, "gradient_accumulation_steps": 1, "warmup_steps": 0,
    "lr_scheduler_type": "constant", "weight_decay": 0.0, "save_steps": 50,
    "save_total_limit": 1,  # Trainer checkpoints kept in <output_dir>/_trainer (for resume)
    "logging_steps": 1, "seed": 0, "activation_checkpointing": False, "assistant_only_loss": True,
    "packing": False, "report_to": [], "disable_tqdm": True, "include_num_input_tokens_seen": "non_padding",
    "dataloader_num_workers": 0, "save_only_model": False,
    # unset use_cpu: on when no GPU is visible; bf16 None (or unset): on where the hardware computes in bfloat16
    # (a GPU that supports it, a CPU with AVX512-BF16 / AMX: `bf16_supported`); data_seed unset: the seed
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


_CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of native bfloat16 arithmetic


def cpu_bf16_flags(cpuinfo: str | None = None) -> list[str]:
    """The native-bfloat16 flags this CPU reports (AVX512-BF16, AMX-BF16), from `cpuinfo` (the text of
    /proc/cpuinfo; read when None). Empty where there are none or no /proc/cpuinfo (then `cpu_bf16_supported`
    asks oneDNN)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return []
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, val = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(val.split())
    return [f for f in _CPU_BF16_FLAGS if f in flags]


def cpu_bf16_supported(cpuinfo: str | None = None) -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX512-BF16 or AMX-BF16). Without them torch's CPU
    bfloat16 matmul is emulated and slower than float32 (on an AVX2 EPYC here: 3-50x slower), so bf16 stays off.
    Linux: the /proc/cpuinfo flags; elsewhere oneDNN's own check (``torch.ops.mkldnn._is_mkldnn_bf16_supported``)."""
    if cpuinfo is not None or Path("/proc/cpuinfo").exists():
        return bool(cpu_bf16_flags(cpuinfo))
    import torch

    try:  # pragma: no cover - non-Linux
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover
        return False


def bf16_supported(use_cpu: bool) -> bool:
    """Whether training where `use_cpu` says computes in bfloat16 natively: the visible GPU (CUDA bf16) or this
    CPU (`cpu_bf16_supported`)."""
    import torch

    if not use_cpu and torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    return cpu_bf16_supported()


def resolve_device(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with the device settings made explicit: ``use_cpu`` unset -> on when no GPU is visible;
    ``bf16`` None / unset -> on where training computes in bfloat16 natively (`bf16_supported`: a GPU that
    supports it, a CPU with AVX512-BF16 / AMX). An explicit ``bf16`` (True or False) is kept as given."""
    import torch

    f = dict(fields)
    if f.get("use_cpu") is None:
        f["use_cpu"] = not torch.cuda.is_available()
    if f.get("bf16") is None:
        f["bf16"] = bf16_supported(bool(f["use_cpu"]))
    return f


def weights_dtype(fields: Mapping[str, Any]):
    """The dtype the model's weights are loaded in: ``model_init_kwargs["dtype"]`` (TRL's own field for how the
    model is loaded) when given; else bfloat16 when ``bf16`` is on (pure-bf16 training: bf16 matmuls forward and
    backward, kept learning by `bf16_optimizer`), float32 otherwise. ``bf16`` on with float32 weights is
    autocast (float32 master weights, bf16 matmuls: slower, the Trainer's own mixed precision)."""
    import torch

    mik = fields.get("model_init_kwargs") or {}
    if not isinstance(mik, Mapping):
        raise TrainConfigError(f"model_init_kwargs: expected a mapping, got {type(mik).__name__}")
    dt = mik.get("dtype", mik.get("torch_dtype"))
    if dt is None or dt == "auto":
        return torch.bfloat16 if fields.get("bf16") else torch.float32
    if isinstance(dt, torch.dtype):
        return dt
    got = getattr(torch, str(dt), None)
    if not isinstance(got, torch.dtype):
        raise TrainConfigError(f"model_init_kwargs: field 'dtype': {dt!r} is not a torch dtype "
                               "(e.g. 'bfloat16', 'float32')")
    return got


def bf16_optimizer(fields: Mapping[str, Any], dtype) -> tuple[type, dict[str, Any]] | None:
    """The optimizer that keeps bfloat16 weights learning, as the Trainer's ``optimizer_cls_and_kwargs``:
    optimi's AdamW with Kahan summation (torch-optimi: the rounding error of each bf16 weight update is carried
    in a bf16 compensation buffer, so small updates accumulate instead of rounding away), with the Trainer's
    AdamW settings (learning_rate, adam_beta1/2, adam_epsilon, weight_decay). None (the Trainer's own ``optim``)
    for float32 weights, or when ``optim`` is set explicitly."""
    import torch

    if dtype != torch.bfloat16 or "optim" in fields:
        return None
    from optimi import AdamW

    kw = {"lr": float(fields.get("learning_rate", 5e-5)),
          "betas": (float(fields.get("adam_beta1", 0.9)), float(fields.get("adam_beta2", 0.999))),
          "eps": float(fields.get("adam_epsilon", 1e-8)), "weight_decay": float(fields.get("weight_decay", 0.0)),
          "kahan_sum": True}
    return AdamW, kw


def precision(fields: Mapping[str, Any]) -> dict[str, Any]:
    """What a run computes in (for its record): bf16 on/off, the weights' dtype, the optimizer, the CPU's flags."""
    dt = weights_dtype(fields)
    opt = bf16_optimizer(fields, dt)
    return {"bf16": bool(fields.get("bf16")), "weights": str(dt).removeprefix("torch."),
            "optimizer": "optimi.AdamW(kahan_sum=True)" if opt else str(fields.get("optim", "trainer default")),
            "cpu_bf16_flags": cpu_bf16_flags()}


__all__ = ["SFT_DEFAULTS", "GRPO_DEFAULTS", "LORA_DEFAULTS", "TrainConfigError", "field_names", "check_fields",
           "sft_config_class", "grpo_config_class", "lora_config_class", "resolve_device", "cpu_bf16_flags",
           "cpu_bf16_supported", "bf16_supported", "weights_dtype", "bf16_optimizer", "precision"]
