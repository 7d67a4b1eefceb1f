"""Supervised fine-tuning with TRL's SFTTrainer (DESIGN §2 `checkpoints`).

    run_sft(SFTRunConfig(base_model=..., dataset_path=..., output_dir=...)) -> registry row (dict)

Multi-turn conversational rows (`messages` + `tools`), loss on assistant tokens only (the chat template's
``{% generation %}`` markers), full fine-tuning or LoRA (peft, merged into the saved model), CPU or GPU.
Resumable: intermediate Trainer checkpoints live in ``<output_dir>/_trainer``; with ``resume=True`` the run
continues from the last saved step. The final model folder (weights + tokenizer with the tool-calling chat
template) is written to ``output_dir`` with ``clawgym_checkpoint.json`` (the registry row) and ``loss.png``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


@dataclass
class SFTRunConfig:
    base_model: str = "data/models/smollm2-135m-instruct"  # any HF causal-LM folder or (cached) id
    dataset_path: str = "data/sft/hf"  # a load_from_disk folder, or parquet file/folder of the lake's sft table
    output_dir: str = "data/checkpoints/sft"
    name: str | None = None  # checkpoint name (default: the output folder's name)
    dataset_version: str = ""
    max_steps: int = 100  # -1: use num_train_epochs
    num_train_epochs: float = 3.0
    lr: float = 1e-5
    lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    max_length: int = 4096
    batch_size: int = 1
    grad_accum: int = 1
    warmup_steps: int = 0
    lr_scheduler: str = "constant"
    weight_decay: float = 0.0
    save_steps: int = 50
    save_total_limit: int = 1  # Trainer checkpoints kept in <output_dir>/_trainer (for resume)
    logging_steps: int = 1
    resume: bool = True
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    bf16: bool | None = None  # None: bf16 on GPUs that support it
    gradient_checkpointing: bool = False
    assistant_only_loss: bool = True
    packing: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # any other SFTConfig fields

    @classmethod
    def from_dict(cls, d: dict) -> "SFTRunConfig":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise ValueError(f"SFTRunConfig: unknown field(s) {', '.join(unknown)}")
        return cls(**known)


def load_sft_dataset(path: str | os.PathLike):
    """A `datasets.Dataset` with `messages` and `tools` from a load_from_disk folder or sft parquet."""
    import datasets

    p = Path(path)
    if p.is_dir() and ((p / "dataset_info.json").exists() or (p / "state.json").exists()):
        ds = datasets.load_from_disk(str(p))
    else:
        import pyarrow.parquet as pq

        files = [p] if p.is_file() else sorted(p.rglob("*.parquet"))
        if not files:
            raise FileNotFoundError(f"{p}: no dataset (neither a load_from_disk folder nor parquet files)")
        rows = []
        for f in files:
            for r in pq.read_table(f).to_pylist():
                rows.append({**r, "messages": json.loads(r["messages_json"]), "tools": json.loads(r["tools_json"] or "[]"),
                             "n_tokens": r.get("n_tokens") or 0})
        from clawgym.trajectories.sft import to_hf_dataset

        ds = to_hf_dataset(rows)
    missing = {"messages", "tools"} - set(ds.column_names)
    if missing:
        raise ValueError(f"{p}: dataset lacks column(s) {sorted(missing)}")
    return ds.select_columns(["messages", "tools"])


def _device(cfg: SFTRunConfig) -> str:
    import torch

    if cfg.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return cfg.device


def last_trainer_checkpoint(work: Path) -> str | None:
    cks = sorted((p for p in work.glob("checkpoint-*") if p.is_dir() and (p / "trainer_state.json").exists()),
                 key=lambda p: int(p.name.split("-")[-1]))
    return str(cks[-1]) if cks else None


def plot_loss(curve: list[dict], path: Path, title: str = "SFT loss") -> Path | None:
    if not curve:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3), dpi=100)
    ax.plot([c["step"] for c in curve], [c["loss"] for c in curve], marker=".")
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def run_sft(cfg: SFTRunConfig, on_log=None) -> dict[str, Any]:
    """Train, save the model folder at cfg.output_dir, and return its registry row.

    `on_log(dict)` (optional) receives every Trainer log entry (e.g. to forward it through Dagster Pipes).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer
    from trl.chat_template_utils import has_generation_markers

    t0 = time.time()
    out = Path(cfg.output_dir)
    work = out / "_trainer"
    work.mkdir(parents=True, exist_ok=True)
    device = _device(cfg)
    use_bf16 = cfg.bf16 if cfg.bf16 is not None else (device == "cuda" and torch.cuda.is_bf16_supported())

    tok = AutoTokenizer.from_pretrained(cfg.base_model)
    if not (tok.chat_template and has_generation_markers(tok.chat_template)):
        from clawgym.train.base_model import apply_tool_chat_template

        apply_tool_chat_template(tok)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(cfg.base_model, dtype=torch.bfloat16 if use_bf16 else torch.float32)
    ds = load_sft_dataset(cfg.dataset_path)

    peft_config = None
    if cfg.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                                 target_modules="all-linear", task_type="CAUSAL_LM")

    args = SFTConfig(
        output_dir=str(work), max_steps=cfg.max_steps, num_train_epochs=cfg.num_train_epochs,
        learning_rate=cfg.lr, per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum, warmup_steps=cfg.warmup_steps,
        lr_scheduler_type=cfg.lr_scheduler, weight_decay=cfg.weight_decay,
        logging_steps=cfg.logging_steps, save_steps=cfg.save_steps, save_total_limit=cfg.save_total_limit,
        seed=cfg.seed, data_seed=cfg.seed, use_cpu=(device == "cpu"), bf16=use_bf16,
        activation_checkpointing=cfg.gradient_checkpointing, assistant_only_loss=cfg.assistant_only_loss,
        max_length=cfg.max_length, packing=cfg.packing, report_to=[], disable_tqdm=True,
        include_num_input_tokens_seen="non_padding", dataloader_num_workers=0, save_only_model=False,
        **cfg.extra,
    )

    class _Forward(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if on_log and logs:
                on_log({"step": state.global_step, **logs})

    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, peft_config=peft_config,
                         callbacks=[_Forward()])
    resume_from = last_trainer_checkpoint(work) if cfg.resume else None
    t_train = time.time()
    result = trainer.train(resume_from_checkpoint=resume_from)
    train_wall = time.time() - t_train
    trainer.save_state()

    # the final, servable model folder (LoRA merged into the base weights)
    final = trainer.model
    if cfg.lora:
        final = final.merge_and_unload()
    final.save_pretrained(str(out))
    tok.save_pretrained(str(out))

    hist = trainer.state.log_history
    curve = [{"step": h["step"], "loss": float(h["loss"])} for h in hist if "loss" in h and "step" in h]
    loss_png = plot_loss(curve, out / "loss.png", f"SFT loss — {cfg.name or out.name}")
    tokens = int(trainer.state.num_input_tokens_seen or 0)
    metrics = dict(result.metrics or {})
    runtime = float(metrics.get("train_runtime") or train_wall)
    hyper = {k: v for k, v in asdict(cfg).items() if k not in ("output_dir", "dataset_path", "base_model", "name")}
    hyper["device"] = device
    hyper["bf16"] = use_bf16
    row = {
        "checkpoint": cfg.name or out.name, "path": str(out), "base": cfg.base_model, "parent": cfg.base_model,
        "data_version": cfg.dataset_version, "dataset_path": cfg.dataset_path, "n_samples": len(ds),
        "hyperparams": hyper, "hyperparams_json": json.dumps(hyper, default=str),
        "loss_curve": curve, "loss_curve_json": json.dumps(curve),
        "final_loss": curve[-1]["loss"] if curve else None, "train_loss": metrics.get("train_loss"),
        "steps": int(trainer.state.global_step), "resumed_from": resume_from,
        "tokens_seen": tokens, "train_runtime_s": runtime, "tokens_per_s": tokens / runtime if runtime > 0 else None,
        "wall_s": time.time() - t0, "loss_plot": str(loss_png) if loss_png else None,
        "created_at": datetime.now(timezone.utc).isoformat(),
    }
    tmp = out / "clawgym_checkpoint.json.tmp"
    tmp.write_text(json.dumps(row, indent=1, default=str))
    os.replace(tmp, out / "clawgym_checkpoint.json")
    return row


def read_registry_row(checkpoint_dir: str | os.PathLike) -> dict[str, Any] | None:
    p = Path(checkpoint_dir) / "clawgym_checkpoint.json"
    return json.loads(p.read_text()) if p.exists() else None


def clean_trainer_state(checkpoint_dir: str | os.PathLike) -> None:
    """Remove the intermediate Trainer checkpoints (after a successful run, to save disk)."""
    shutil.rmtree(Path(checkpoint_dir) / "_trainer", ignore_errors=True)


__all__ = ["SFTRunConfig", "run_sft", "load_sft_dataset", "last_trainer_checkpoint", "plot_loss",
           "read_registry_row", "clean_trainer_state"]
