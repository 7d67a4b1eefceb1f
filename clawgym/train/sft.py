"""Supervised fine-tuning with TRL's SFTTrainer (the `checkpoints` asset).

    run_sft(SFTRunConfig(base_model=..., dataset_path=..., output_dir=...,
                         sft_config={"learning_rate": 1e-5, "max_steps": 100}))  -> CheckpointRecord

Trainer settings are `trl.SFTConfig` fields by TRL's own names (`sft_config`, over `config.SFT_DEFAULTS`);
LoRA settings are `peft.LoraConfig` fields (`lora_config`, over `config.LORA_DEFAULTS`); the rest of
`SFTRunConfig` is clawgym's own (which model, which data, where to save, resume).

Multi-turn conversational rows (`messages` + `tools`), loss on assistant tokens only (the chat template's
``{% generation %}`` markers), full fine-tuning or LoRA (peft, merged into the saved model), CPU or GPU.
Resumable: intermediate Trainer checkpoints live in ``<output_dir>/_trainer``; with ``resume=True`` the run
continues from the last saved step. The final model folder (weights + tokenizer with the tool-calling chat
template) is written to ``output_dir`` with ``clawgym_checkpoint.json`` (the registry record) and ``loss.png``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from clawgym.train.base_model import DEFAULT_BASE_DIR
from clawgym.train.config import (
    LORA_DEFAULTS,
    SFT_DEFAULTS,
    TrainConfigError,
    bf16_optimizer,
    check_fields,
    field_names,
    lora_config_class,
    precision,
    resolve_device,
    sft_config_class,
    weights_dtype,
)
from clawgym.train.record import CheckpointRecord, read_registry_row

_SFT_RESERVED = {"output_dir": "SFTRunConfig.output_dir; Trainer checkpoints go to <output_dir>/_trainer"}


@dataclass
class SFTRunConfig:
    """One SFT run: base model, dataset, output folder, resume/LoRA switches and trl.SFTConfig /
    peft.LoraConfig overrides (checked against their fields)."""

    base_model: str = DEFAULT_BASE_DIR  # any HF causal-LM folder or (cached) id
    dataset_path: str = "data/sft/hf"  # a load_from_disk folder, or parquet file/folder of the lake's sft table
    output_dir: str = "data/checkpoints/sft"
    name: str | None = None  # checkpoint name (default: the output folder's name)
    dataset_version: str = ""
    resume: bool = True  # continue from the last Trainer checkpoint in <output_dir>/_trainer
    lora: bool = False  # LoRA (peft; merged into the saved model) instead of full fine-tuning
    lora_config: dict[str, Any] = field(default_factory=dict)  # peft.LoraConfig fields over LORA_DEFAULTS
    sft_config: dict[str, Any] = field(default_factory=dict)  # trl.SFTConfig fields over SFT_DEFAULTS

    def __post_init__(self) -> None:
        check_fields(sft_config_class(), self.sft_config, "SFTRunConfig.sft_config", _SFT_RESERVED)
        check_fields(lora_config_class(), self.lora_config, "SFTRunConfig.lora_config")

    def trl_fields(self) -> dict[str, Any]:
        """The keyword arguments of trl.SFTConfig (without output_dir): clawgym's defaults, then `sft_config`."""
        f = resolve_device({**SFT_DEFAULTS, **self.sft_config})
        f.setdefault("data_seed", f["seed"])
        return f

    def peft_fields(self) -> dict[str, Any] | None:
        """The keyword arguments of peft.LoraConfig, or None (full fine-tuning)."""
        return {**LORA_DEFAULTS, **self.lora_config} if self.lora else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> SFTRunConfig:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            k = unknown[0]
            hint = " (a trl.SFTConfig field: put it in sft_config)" if k in field_names(sft_config_class()) else ""
            raise TrainConfigError(f"SFTRunConfig: unknown field {k!r}{hint}")
        return cls(**d)


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
                rows.append({**r, "messages": json.loads(r["messages_json"]),
                             "tools": json.loads(r["tools_json"] or "[]"),
                             "n_tokens": r.get("n_tokens") or 0})
        from clawgym.trajectories.sft import to_hf_dataset

        ds = to_hf_dataset(rows)
    missing = {"messages", "tools"} - set(ds.column_names)
    if missing:
        raise ValueError(f"{p}: dataset lacks column(s) {sorted(missing)}")
    return ds.select_columns(["messages", "tools"])


def token_exact_dataset(ds, tok):
    """`ds` (messages, tools) as TRL's pre-tokenized form when any row carries the sampled tokens of its rollout
    or content with control-token text.

    Returns ``(dataset, stats)``. Each row is tokenized by clawgym.trajectories.sft.tokenize_row (the rule the
    SFT export's `input_ids` columns follow too): rows whose assistant messages all carry their sampled tokens
    (clawgym.trajectories.sft.token_exact_row) become exactly those tokens, the loss mask on exactly the sampled
    ones (a server context that turned control text of a tool result / user turn into control ids is re-encoded:
    ``stats["contexts_fixed"]``); the others are rendered by the chat template (the call TRL makes itself:
    `apply_chat_template` with the tools and ``return_assistant_tokens_mask``, through
    clawgym.trajectories.sft.encode_chat, which encodes control text in the content as ordinary pieces):
    re-tokenized, counted in ``stats["retokenized"]`` with the reason (a row without any token record, or ending on
    a tool result); a row whose token record disagrees with its messages (drift, prompt_mismatch, ids_mismatch …)
    is dropped, counted in ``stats["dropped"]`` by reason. ``stats["control_text_rows"]``: rows whose
    content carried control text (only when any); rows that cannot be encoded exactly are dropped and counted in
    ``stats["dropped"]``. The dataset has ``input_ids`` + ``assistant_masks`` (TRL builds the labels from the
    mask). When no row carries tokens or control text, `ds` is returned unchanged and TRL tokenizes every row (all
    re-tokenized)."""
    from collections import Counter

    from datasets import Dataset

    from clawgym.trajectories.sft import CONTROL_TEXT, TOKENS_KEY, ControlTextError, control_text_count, tokenize_row

    rows = ds.to_list()
    has_tokens = any(isinstance(m, dict) and TOKENS_KEY in m for r in rows for m in r["messages"])
    control = [bool(control_text_count(tok, r["messages"], r.get("tools"))) for r in rows]
    if not has_tokens and not any(control):
        return ds, {"token_exact": 0, "retokenized": len(rows), "retokenize_reasons": {"no_tokens": len(rows)},
                    "tokenized_by": "trl"}
    reasons: Counter = Counter()
    dropped: Counter = Counter()
    fixed = 0
    out = []
    for r in rows:
        try:  # the one per-row rule (the SFT export's input_ids / assistant_masks are the same call)
            ids, mask, reason, n_fixed = tokenize_row(r, tok)
        except ControlTextError as e:  # TokenRecordMismatch too: a record that disagrees with its messages
            dropped[getattr(e, "reason", CONTROL_TEXT)] += 1
            continue
        if reason is not None:
            reasons[reason] += 1
        fixed += n_fixed
        out.append({"input_ids": ids, "assistant_masks": mask})
    n_re = sum(reasons.values())
    stats = {"token_exact": len(out) - n_re, "retokenized": n_re, "retokenize_reasons": dict(reasons),
             "tokenized_by": "clawgym"}
    if any(control):
        stats["control_text_rows"] = sum(control)
    if fixed:
        stats["contexts_fixed"] = fixed
    if dropped:
        stats["dropped"] = dict(dropped)
    return Dataset.from_list(out), stats


def last_trainer_checkpoint(work: Path) -> str | None:
    """The highest-step Trainer checkpoint-* folder under `work` that has a trainer_state.json, or None."""
    cks = sorted((p for p in work.glob("checkpoint-*") if p.is_dir() and (p / "trainer_state.json").exists()),
                 key=lambda p: int(p.name.split("-")[-1]))
    return str(cks[-1]) if cks else None


def plot_curve(curve: list[dict], key: str, path: Path, title: str, ylabel: str) -> Path | None:
    """Plot curve[i][key] against curve[i]["step"] as a PNG at `path`; returns it, or None for an empty curve."""
    if not curve:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3), dpi=100)
    ax.plot([c["step"] for c in curve], [c[key] for c in curve], marker=".")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_loss(curve: list[dict], path: Path, title: str = "SFT loss") -> Path | None:
    """Plot the loss curve ([{"step", "loss"}]) as a PNG at `path`; returns it, or None for an empty curve."""
    return plot_curve(curve, "loss", path, title, "train loss")


def _sft_tokenizer(base_model: str):
    """`base_model`'s tokenizer, with clawgym's tool chat template where its own has no generation markers (the
    assistant-only loss needs them) and its end-of-sequence token as pad token when it has none."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import has_generation_markers

    tok = AutoTokenizer.from_pretrained(base_model)
    if not (tok.chat_template and has_generation_markers(tok.chat_template)):
        from clawgym.serve.chat_encoding import apply_tool_chat_template

        apply_tool_chat_template(tok)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def _share_pad_id(model, tok) -> None:
    """The model's pad id is the tokenizer's (a pad id equal to the end-of-turn id would make nn.Embedding's
    padding_idx freeze that token's input embedding)."""
    if tok.pad_token_id is not None:
        model.config.pad_token_id = tok.pad_token_id
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.pad_token_id = tok.pad_token_id


def _checkpoint_record(cfg: SFTRunConfig, out: Path, trainer, result, trl_fields: dict[str, Any],
                       lora_fields: dict[str, Any] | None, token_stats: dict[str, Any], n_samples: int,
                       resume_from: str | None, train_wall: float, t0: float) -> CheckpointRecord:
    """The registry record of a finished run (its loss curve also plotted to ``loss.png`` in `out`)."""
    hist = trainer.state.log_history
    curve = [{"step": h["step"], "loss": float(h["loss"])} for h in hist if "loss" in h and "step" in h]
    loss_png = plot_loss(curve, out / "loss.png", f"SFT loss — {cfg.name or out.name}")
    tds = trainer.train_dataset
    lengths = [len(x) for x in tds["input_ids"]] if "input_ids" in tds.column_names else []
    truncated = sum(1 for n in lengths if trl_fields.get("max_length") and n >= int(trl_fields["max_length"]))
    tokens = int(trainer.state.num_input_tokens_seen or 0)
    metrics = dict(result.metrics or {})
    runtime = float(metrics.get("train_runtime") or train_wall)
    hyper = {"sft_config": trl_fields, "lora": cfg.lora, "lora_config": lora_fields, "resume": cfg.resume,
             "dataset_version": cfg.dataset_version, "tokens": token_stats, "rows_at_max_length": truncated,
             "precision": precision(trl_fields)}
    return CheckpointRecord(
        checkpoint=cfg.name or out.name, path=str(out), base=cfg.base_model, parent=cfg.base_model, algorithm="sft",
        data_version=cfg.dataset_version, dataset_path=cfg.dataset_path, n_samples=n_samples, hyperparams=hyper,
        loss_curve=curve, final_loss=curve[-1]["loss"] if curve else None, train_loss=metrics.get("train_loss"),
        steps=int(trainer.state.global_step), resumed_from=resume_from, tokens_seen=tokens,
        train_runtime_s=runtime, tokens_per_s=tokens / runtime if runtime > 0 else None, wall_s=time.time() - t0,
        loss_plot=str(loss_png) if loss_png else None,
    )


def run_sft(cfg: SFTRunConfig, on_log=None) -> CheckpointRecord:
    """Train, save the model folder at cfg.output_dir with its registry record, and return the record.

    `on_log(dict)` (optional) receives every Trainer log entry (e.g. to forward it through Dagster Pipes).
    """
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    t0 = time.time()
    out = Path(cfg.output_dir)
    work = out / "_trainer"
    work.mkdir(parents=True, exist_ok=True)
    trl_fields = cfg.trl_fields()
    lora_fields = cfg.peft_fields()

    tok = _sft_tokenizer(cfg.base_model)
    # bf16 (on where the hardware has it): bf16 weights, trained by optimi's Kahan-summed AdamW (bf16_optimizer);
    # model_init_kwargs / optim (TRL's fields) override either
    dtype = weights_dtype(trl_fields)
    mik = {k: v for k, v in (trl_fields.get("model_init_kwargs") or {}).items() if k not in ("dtype", "torch_dtype")}
    model = AutoModelForCausalLM.from_pretrained(cfg.base_model, **mik, dtype=dtype)
    ds = load_sft_dataset(cfg.dataset_path)
    ds, token_stats = token_exact_dataset(ds, tok)
    if token_stats["tokenized_by"] == "clawgym" and trl_fields.get("assistant_only_loss"):
        # pre-tokenized rows: the loss mask is the `assistant_masks` column (TRL folds it into the labels);
        # TRL's assistant_only_loss switch is for conversational rows only
        trl_fields = {**trl_fields, "assistant_only_loss": False}
    if token_stats["retokenized"]:
        print(f"SFT: {token_stats['retokenized']} of {len(ds)} rows re-tokenized from their text "
              f"({token_stats['retokenize_reasons']}); {token_stats['token_exact']} as sampled", file=sys.stderr)
    _share_pad_id(model, tok)

    args = SFTConfig(output_dir=str(work), **trl_fields)

    class _Forward(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if on_log and logs:
                on_log({"step": state.global_step, **logs})

    peft_config = lora_config_class()(**lora_fields) if lora_fields else None
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, peft_config=peft_config,
                         callbacks=[_Forward()], optimizer_cls_and_kwargs=bf16_optimizer(trl_fields, dtype))
    resume_from = last_trainer_checkpoint(work) if cfg.resume else None
    t_train = time.time()
    result = trainer.train(resume_from_checkpoint=resume_from)
    train_wall = time.time() - t_train
    trainer.save_state()

    # the final, servable model folder (LoRA merged into the base weights)
    final: Any = trainer.model  # the trained transformers / peft model (dynamic to mypy)
    if cfg.lora:
        final = final.merge_and_unload()
    final.save_pretrained(str(out))
    tok.save_pretrained(str(out))

    rec = _checkpoint_record(cfg, out, trainer, result, trl_fields, lora_fields, token_stats, len(ds), resume_from,
                             train_wall, t0)
    rec.save(out)
    return rec


__all__ = ["SFTRunConfig", "run_sft", "load_sft_dataset", "token_exact_dataset", "last_trainer_checkpoint", "plot_loss",
           "read_registry_row", "CheckpointRecord"]
