"""Out-of-process SFT entry point for Dagster Pipes: ``python -m clawgym.train.pipes_sft``.

Launched by the `checkpoints` asset through ``PipesSubprocessClient`` (or ``PipesDockerClient``), so a crash
in training never takes Dagster down. The run configuration comes from the Pipes extras:

    extras = {"sft_config": {<SFTRunConfig fields>}}      (or the SFTRunConfig fields at the top level)

The checkpoint name defaults to the partition key. Progress goes to the Pipes log; the registry row is
reported as the asset materialization's metadata (loss curve, tokens/s, wall time, hyper-parameters, plot).

Outside Dagster it also runs stand-alone: ``python -m clawgym.train.pipes_sft --config cfg.json``
(prints the registry row as JSON on the last stdout line).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dagster_pipes import PipesContext, open_dagster_pipes

from clawgym.train.sft import SFTRunConfig, run_sft


def registry_metadata(row: dict[str, Any]) -> dict[str, Any]:
    """The registry row as Pipes metadata values (typed, so the UI renders them)."""
    md: dict[str, Any] = {
        "checkpoint": {"raw_value": row["checkpoint"], "type": "text"},
        "path": {"raw_value": row["path"], "type": "path"},
        "base": {"raw_value": row["base"], "type": "text"},
        "data_version": {"raw_value": row.get("data_version") or "", "type": "text"},
        "n_samples": {"raw_value": int(row["n_samples"]), "type": "int"},
        "steps": {"raw_value": int(row["steps"]), "type": "int"},
        "tokens_seen": {"raw_value": int(row["tokens_seen"]), "type": "int"},
        "tokens_per_s": {"raw_value": float(row["tokens_per_s"] or 0.0), "type": "float"},
        "train_runtime_s": {"raw_value": float(row["train_runtime_s"]), "type": "float"},
        "wall_s": {"raw_value": float(row["wall_s"]), "type": "float"},
        "hyperparams": {"raw_value": row["hyperparams"], "type": "json"},
        "loss_curve": {"raw_value": {"points": row["loss_curve"]}, "type": "json"},
    }
    if row.get("final_loss") is not None:
        md["final_loss"] = {"raw_value": float(row["final_loss"]), "type": "float"}
    if row.get("loss_plot"):
        md["loss_plot"] = {"raw_value": row["loss_plot"], "type": "path"}
    if row.get("resumed_from"):
        md["resumed_from"] = {"raw_value": row["resumed_from"], "type": "path"}
    return md


def _config_from_extras(ctx: PipesContext) -> SFTRunConfig:
    extras = dict(ctx.extras or {})
    raw = extras.get("sft_config", extras)
    if isinstance(raw, str):
        raw = json.loads(raw)
    raw = dict(raw)
    if not raw.get("name"):
        try:
            raw["name"] = ctx.partition_key
        except Exception:  # not partitioned
            pass
    return SFTRunConfig.from_dict(raw)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m clawgym.train.pipes_sft")
    ap.add_argument("--config", help="JSON file with SFTRunConfig fields (stand-alone runs, outside Dagster Pipes)")
    args, _ = ap.parse_known_args(argv)
    with open_dagster_pipes() as ctx:
        if args.config:
            with open(args.config, encoding="utf-8") as f:
                cfg = SFTRunConfig.from_dict(json.load(f))
        else:
            cfg = _config_from_extras(ctx)
        ctx.log.info(f"SFT {cfg.name or cfg.output_dir}: base={cfg.base_model} data={cfg.dataset_path} "
                     f"steps={cfg.max_steps} lora={cfg.lora}")
        every = max(1, int(cfg.extra.get("logging_steps", 0) or 0) or 10)

        def on_log(entry: dict) -> None:
            if "loss" in entry and int(entry.get("step", 0)) % every == 0:
                ctx.log.info(f"step {entry['step']}: loss {float(entry['loss']):.4f}")

        row = run_sft(cfg, on_log=on_log)
        ctx.log.info(f"done: {row['steps']} steps, {row['tokens_per_s'] or 0:.1f} tokens/s, final loss {row['final_loss']}")
        ctx.report_asset_materialization(metadata=registry_metadata(row),
                                         data_version=f"{row['checkpoint']}@{row['steps']}")
        print(json.dumps({k: v for k, v in row.items() if k not in ("loss_curve",)}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
