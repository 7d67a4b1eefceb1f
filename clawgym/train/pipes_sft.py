"""Out-of-process training entry point for Dagster Pipes: ``python -m clawgym.train.pipes_sft``.

Launched by the `checkpoints` asset through ``PipesSubprocessClient`` (or ``PipesDockerClient``), so a crash
in training never takes Dagster down. The run configuration comes from the Pipes extras, one of:

    extras = {"sft_run": {<SFTRunConfig fields>}}   (trl.SFTConfig fields by TRL's names under "sft_config")
    extras = {"grpo_run": {<GRPORunConfig fields>},  (trl.GRPOConfig fields under "grpo_config")
              "tasks_file": <tasks parquet (clawgym.tasks.parquet_io)>,
              "sandbox": {"backend": "auto|docker|bwrap|local", "config": {<SandboxConfig fields>}}}

GRPO's rewards are real verifier runs, one fresh sandbox per sample from the backend's factory (the recycling
pool behind the isolating backends), scored in parallel threads (`score_workers`).

The checkpoint name defaults to the partition key. Progress goes to the Pipes log; the registry record is
reported as the asset materialization's metadata (loss curve, tokens/s, wall time, hyper-parameters, plot)
and saved next to the model (``clawgym_checkpoint.json``).

Outside Dagster it also runs stand-alone: ``python -m clawgym.train.pipes_sft --config cfg.json``
(prints the registry record as JSON on the last stdout line).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dagster_pipes import PipesContext, open_dagster_pipes

from clawgym.train.grpo import GRPORunConfig, run_grpo
from clawgym.train.record import CheckpointRecord
from clawgym.train.sft import SFTRunConfig, run_sft


def registry_metadata(rec: CheckpointRecord) -> dict[str, Any]:
    """The registry record as Pipes metadata values (typed, so the UI renders them)."""
    md: dict[str, Any] = {
        "checkpoint": {"raw_value": rec.checkpoint, "type": "text"},
        "path": {"raw_value": rec.path, "type": "path"},
        "base": {"raw_value": rec.base, "type": "text"},
        "data_version": {"raw_value": rec.data_version or "", "type": "text"},
        "n_samples": {"raw_value": int(rec.n_samples or 0), "type": "int"},
        "steps": {"raw_value": int(rec.steps), "type": "int"},
        "tokens_seen": {"raw_value": int(rec.tokens_seen or 0), "type": "int"},
        "tokens_per_s": {"raw_value": float(rec.tokens_per_s or 0.0), "type": "float"},
        "train_runtime_s": {"raw_value": float(rec.train_runtime_s or 0.0), "type": "float"},
        "wall_s": {"raw_value": float(rec.wall_s or 0.0), "type": "float"},
        "hyperparams": {"raw_value": rec.hyperparams, "type": "json"},
        "loss_curve": {"raw_value": {"points": rec.loss_curve}, "type": "json"},
        "algorithm": {"raw_value": rec.algorithm, "type": "text"},
    }
    if rec.algorithm == "grpo":
        md["reward_curve"] = {"raw_value": {"points": rec.reward_curve}, "type": "json"}
        md["n_tasks"] = {"raw_value": int(rec.n_tasks or 0), "type": "int"}
        md["n_sandboxes"] = {"raw_value": int(rec.n_sandboxes or 0), "type": "int"}
        if rec.reward_curve:
            md["final_reward"] = {"raw_value": float(rec.reward_curve[-1]["reward"]), "type": "float"}
    if rec.final_loss is not None:
        md["final_loss"] = {"raw_value": float(rec.final_loss), "type": "float"}
    if rec.loss_plot:
        md["loss_plot"] = {"raw_value": rec.loss_plot, "type": "path"}
    if rec.resumed_from:
        md["resumed_from"] = {"raw_value": rec.resumed_from, "type": "path"}
    return md


def _config_from_extras(ctx: PipesContext) -> SFTRunConfig:
    extras = dict(ctx.extras or {})
    if "sft_run" not in extras:
        raise ValueError(f"Pipes extras: no 'sft_run' (SFTRunConfig fields); got keys {sorted(extras)}")
    return SFTRunConfig.from_dict(_named_by_partition(ctx, extras["sft_run"]))


def _named_by_partition(ctx: PipesContext, run: dict) -> dict:
    """The run config with its name defaulted to the Pipes context's partition key (when partitioned)."""
    run = dict(run)
    if not run.get("name"):
        try:
            run["name"] = ctx.partition_key
        except Exception:  # not partitioned
            pass
    return run


def _grpo(ctx: PipesContext, raw: dict) -> CheckpointRecord:
    from clawgym.sandbox import SandboxConfig, get_factory
    from clawgym.tasks.parquet_io import read_tasks_parquet

    cfg = GRPORunConfig.from_dict(_named_by_partition(ctx, raw["grpo_run"]))
    if not raw.get("tasks_file"):
        raise ValueError("Pipes extras: 'grpo_run' needs 'tasks_file' (a tasks parquet)")
    tasks = read_tasks_parquet(raw["tasks_file"])
    sb = dict(raw.get("sandbox") or {})
    factory = get_factory(sb.get("backend", "auto"), SandboxConfig(**(sb.get("config") or {})))
    trl_fields = cfg.trl_fields()
    ctx.log.info(f"GRPO {cfg.name or cfg.output_dir}: base={cfg.base_model} tasks={len(tasks)} "
                 f"max_steps={trl_fields['max_steps']} num_generations={trl_fields['num_generations']} "
                 f"sandbox={sb.get('backend', 'auto')}")

    def on_log(entry: dict) -> None:
        if "reward" in entry:
            ctx.log.info(f"step {entry['step']}: reward {float(entry['reward']):.4f}")

    try:
        return run_grpo(cfg, tasks, factory, on_log=on_log)
    finally:
        close = getattr(factory, "close", None)
        if close:
            close()


def _sft(ctx: PipesContext, cfg: SFTRunConfig) -> CheckpointRecord:
    trl_fields = cfg.trl_fields()
    ctx.log.info(f"SFT {cfg.name or cfg.output_dir}: base={cfg.base_model} data={cfg.dataset_path} "
                 f"max_steps={trl_fields['max_steps']} lora={cfg.lora}")
    every = max(10, int(trl_fields["logging_steps"] or 0))

    def on_log(entry: dict) -> None:
        if "loss" in entry and int(entry.get("step", 0)) % every == 0:
            ctx.log.info(f"step {entry['step']}: loss {float(entry['loss']):.4f}")

    return run_sft(cfg, on_log=on_log)


def main(argv: list[str] | None = None) -> int:
    """Run one training (SFT or GRPO) as a Dagster Pipes external process (config from the Pipes extras or
    --config), report the checkpoint as a materialization and print its record as JSON; returns 0."""
    ap = argparse.ArgumentParser(prog="python -m clawgym.train.pipes_sft")
    ap.add_argument("--config", help="JSON file: SFTRunConfig fields, or the GRPO extras ({'grpo_run': …, "
                                     "'tasks_file': …, 'sandbox': …}) (stand-alone runs, outside Dagster Pipes)")
    args, _ = ap.parse_known_args(argv)
    with open_dagster_pipes() as ctx:
        if args.config:
            with open(args.config, encoding="utf-8") as f:
                raw = json.load(f)
            rec = _grpo(ctx, raw) if "grpo_run" in raw else _sft(ctx, SFTRunConfig.from_dict(raw))
        elif "grpo_run" in dict(ctx.extras or {}):
            rec = _grpo(ctx, dict(ctx.extras))
        else:
            rec = _sft(ctx, _config_from_extras(ctx))
        if rec.algorithm == "grpo":
            last = rec.reward_curve[-1]["reward"] if rec.reward_curve else None
            ctx.log.info(f"done: {rec.steps} steps, {rec.n_sandboxes} sandboxes, final mean reward {last}")
        else:
            ctx.log.info(f"done: {rec.steps} steps, {rec.tokens_per_s or 0:.1f} tokens/s, "
                         f"final loss {rec.final_loss}")
        ctx.report_asset_materialization(metadata=registry_metadata(rec), data_version=f"{rec.checkpoint}@{rec.steps}")
        print(json.dumps({k: v for k, v in rec.to_dict().items()
                          if k not in ("loss_curve", "loss_curve_json", "rewards")}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
