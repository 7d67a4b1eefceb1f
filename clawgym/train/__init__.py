"""clawgym.train: base-model preparation, SFT (TRL SFTTrainer), GRPO (TRL GRPOTrainer with sandbox rewards),
and OpenAI-compatible serving of checkpoints (`transformers serve`).

Out-of-process SFT for Dagster Pipes: ``python -m clawgym.train.pipes_sft`` (not imported here: it needs dagster_pipes).
"""

from clawgym.train.base_model import (
    DEFAULT_BASE_DIR, apply_tool_chat_template, load_base_tokenizer, make_tiny_model, prepare_base_model,
)
from clawgym.train.grpo import GRPORunConfig, run_grpo
from clawgym.train.serve import ModelServer
from clawgym.train.sft import SFTRunConfig, read_registry_row, run_sft

__all__ = [
    "DEFAULT_BASE_DIR", "apply_tool_chat_template", "load_base_tokenizer", "make_tiny_model", "prepare_base_model",
    "GRPORunConfig", "run_grpo", "ModelServer", "SFTRunConfig", "read_registry_row", "run_sft",
]
