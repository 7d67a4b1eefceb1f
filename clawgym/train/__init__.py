"""clawgym.train: base-model preparation, SFT (TRL SFTTrainer), GRPO (TRL GRPOTrainer with sandbox rewards),
the checkpoint registry record, and OpenAI-compatible serving of checkpoints (the vLLM engine, clawgym.serve).

Trainer settings use TRL's own field names (`trl.SFTConfig` / `trl.GRPOConfig`), LoRA settings peft's
(`peft.LoraConfig`): see clawgym.train.config.

Out-of-process SFT for Dagster Pipes: ``python -m clawgym.train.pipes_sft`` (not imported here: it needs dagster_pipes).
"""

from clawgym.serve import ModelServer
from clawgym.train.base_model import (
    DEFAULT_BASE_DIR,
    apply_tool_chat_template,
    load_base_tokenizer,
    make_tiny_model,
    prepare_base_model,
)
from clawgym.train.config import GRPO_DEFAULTS, LORA_DEFAULTS, SFT_DEFAULTS, TrainConfigError
from clawgym.train.grpo import GRPORunConfig, run_grpo
from clawgym.train.record import CheckpointRecord, read_registry_row
from clawgym.train.sft import SFTRunConfig, run_sft

__all__ = [
    "DEFAULT_BASE_DIR", "apply_tool_chat_template", "load_base_tokenizer", "make_tiny_model", "prepare_base_model",
    "GRPO_DEFAULTS", "LORA_DEFAULTS", "SFT_DEFAULTS", "TrainConfigError", "CheckpointRecord", "read_registry_row",
    "GRPORunConfig", "run_grpo", "ModelServer", "SFTRunConfig", "run_sft",
]
