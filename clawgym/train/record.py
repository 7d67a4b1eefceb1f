"""The checkpoint registry record: one type for every place that writes a checkpoint's registry row.

`run_sft` / `run_grpo` build one and save it next to the model (``<model folder>/clawgym_checkpoint.json``,
`CheckpointRecord.to_dict`); the `checkpoints` asset loads it and writes `CheckpointRecord.to_row` (the lake's
``checkpoints`` schema, clawgym/lake/schemas.py) into the registry table.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

RECORD_FILE = "clawgym_checkpoint.json"


def _now() -> str:
    return datetime.now(UTC).isoformat()


class CheckpointRecord(BaseModel):
    """A trained checkpoint's registry record: where it is, what it started from, data and
    hyperparameters, loss/reward curves and throughput. Made with keywords (values are validated), saved as
    JSON beside the model (`save` / `load`)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    checkpoint: str
    """The checkpoint's name (the `checkpoint` partition / model name)."""
    path: str
    """The servable HF model folder."""
    base: str
    """The model training started from."""
    parent: str | None = None
    """The model it is compared against ("" / None: the base)."""
    algorithm: str = "sft"
    """sft | grpo."""
    data_version: str = ""
    """The data version of the SFT set / task set it trained on."""
    dataset_path: str | None = None
    """The SFT set's folder (SFT)."""
    n_samples: int | None = None
    """SFT rows trained on."""
    n_tasks: int | None = None
    """GRPO tasks."""
    hyperparams: dict[str, Any] = Field(default_factory=dict)
    """TRL's config fields as run, LoRA, precision, token statistics, resume."""
    loss_curve: list[dict] = Field(default_factory=list)
    """[{"step", "loss"}], in step order."""
    final_loss: float | None = None
    """The last logged loss."""
    train_loss: float | None = None
    """The trainer's mean training loss (its `train_loss` metric)."""
    reward_curve: list[dict] = Field(default_factory=list)
    """GRPO: [{"step", "reward", "loss"}]."""
    rewards: list[dict] = Field(default_factory=list)
    """GRPO: one {"task_id", "reward"} per sample."""
    n_sandboxes: int | None = None
    """GRPO: sandboxes opened (one per sample)."""
    steps: int = 0
    """Optimizer steps taken."""
    resumed_from: str | None = None
    """The trainer checkpoint the run resumed from, if any."""
    tokens_seen: int | None = None
    """Input tokens the trainer saw."""
    train_runtime_s: float | None = None
    """The trainer's own runtime, in seconds."""
    tokens_per_s: float | None = None
    """tokens_seen / train_runtime_s."""
    wall_s: float | None = None
    """Wall time of the whole run (loading and saving included), in seconds."""
    loss_plot: str | None = None
    """The loss (or reward) plot beside the model, if one was drawn."""
    run_id: str | None = None
    """The Dagster run that registered it."""
    created_at: str = Field(default_factory=_now)
    """ISO 8601, UTC."""

    def to_dict(self) -> dict[str, Any]:
        """Every field, plus ``hyperparams_json`` / ``loss_curve_json`` (the record file's layout)."""
        d = self.model_dump()
        d["hyperparams_json"] = json.dumps(self.hyperparams, default=str)
        d["loss_curve_json"] = json.dumps(self.loss_curve)
        d["reward_curve_json"] = json.dumps(self.reward_curve)
        return d

    def to_row(self) -> dict[str, Any]:
        """The lake's ``checkpoints`` row (exactly the schema's columns)."""
        return {"checkpoint": self.checkpoint, "path": self.path, "base": self.base, "parent": self.parent,
                "data_version": self.data_version, "n_samples": self.n_samples,
                "hyperparams_json": json.dumps(self.hyperparams, default=str),
                "loss_curve_json": json.dumps(self.loss_curve), "final_loss": self.final_loss, "run_id": self.run_id,
                "created_at": datetime.fromisoformat(self.created_at) if self.created_at else None,
                "algorithm": self.algorithm, "reward_curve_json": json.dumps(self.reward_curve),
                "final_reward": self.reward_curve[-1]["reward"] if self.reward_curve else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckpointRecord:
        """From `to_dict`'s layout (derived ``*_json`` keys are ignored; an unknown key is an error)."""
        known = set(cls.model_fields)
        unknown = sorted(set(d) - known - {"hyperparams_json", "loss_curve_json", "reward_curve_json"})
        if unknown:
            raise ValueError(f"CheckpointRecord: unknown field(s) {', '.join(unknown)}")
        return cls(**{k: v for k, v in d.items() if k in known})

    def save(self, folder: str | os.PathLike | None = None) -> Path:
        """Write the record file into `folder` (default: the model folder) atomically."""
        out = Path(folder if folder is not None else self.path) / RECORD_FILE
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1, default=str))
        os.replace(tmp, out)
        return out

    @classmethod
    def load(cls, folder: str | os.PathLike) -> CheckpointRecord | None:
        """The record saved in a model folder, or None when it has none."""
        p = Path(folder) / RECORD_FILE
        if not p.exists():
            return None
        try:
            return cls.from_dict(json.loads(p.read_text()))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{p}: {e}") from e


def read_registry_row(checkpoint_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The record file of a model folder as a dict (`CheckpointRecord.to_dict`), or None."""
    rec = CheckpointRecord.load(checkpoint_dir)
    return rec.to_dict() if rec else None


__all__ = ["CheckpointRecord", "RECORD_FILE", "read_registry_row"]
