"""Asset checks: blocking Great Expectations gates on every table, and a regression warning on the leaderboard."""

import dagster as dg

from clawgym import quality
from clawgym.lake import Table, TaskSource
from clawgym_assets.bench import bench_scores, bench_tasks, leaderboard
from clawgym_assets.partitions import SUITES
from clawgym_assets.rollouts import sft_dataset, trajectories
from clawgym_assets.synthesis import imported_tasks, synthetic_tasks, verifiers
from clawgym_assets.training import checkpoints
from clawgym_resources import LakeResource


def _gx(table: str, frame, **extra) -> dg.AssetCheckResult:
    ok, details = quality.check_table(table, frame, **extra)
    return dg.AssetCheckResult(passed=ok, description=quality.summary(details),
                               metadata={"n_rows": details["n_rows"], "details": dg.MetadataValue.json(details)})


@dg.asset_check(asset=synthetic_tasks, blocking=True, description="GX: unique task ids, required fields non-null")
def synthetic_tasks_gx(lake: LakeResource) -> dg.AssetCheckResult:
    return _gx(Table.TASKS, lake.tasks(TaskSource.SYNTHETIC), min_rows=1)


@dg.asset_check(asset=imported_tasks, blocking=True, description="GX: unique task ids, required fields non-null")
def imported_tasks_gx(lake: LakeResource) -> dg.AssetCheckResult:
    return _gx(Table.TASKS, lake.tasks(TaskSource.IMPORTED))


@dg.asset_check(asset=verifiers, blocking=True, description="GX: scores in [0,1], one row per (task, kind)")
def verifications_gx(lake: LakeResource) -> dg.AssetCheckResult:
    return _gx(Table.VERIFICATIONS, lake.verifications())


@dg.asset_check(asset=bench_tasks, blocking=True, description="GX: unique task ids within each bench suite")
def bench_tasks_gx(lake: LakeResource) -> dg.AssetCheckResult:
    import pyarrow as pa

    t = pa.concat_tables([lake.bench_tasks(s) for s in SUITES])
    return _gx(Table.TASKS, t, unique=[], unique_combo=["source", "task_id"])


@dg.asset_check(asset=trajectories, blocking=True,
                description="GX: unique rollout ids, scores in [0,1], known failure classes")
def trajectories_gx(lake: LakeResource) -> dg.AssetCheckResult:
    return _gx(Table.TRAJECTORIES, lake.trajectories())


@dg.asset_check(asset=sft_dataset, blocking=True,
                description="GX: unique sample ids, assistant turns non-empty, tools present, tokens ≤ max length")
def sft_gx(lake: LakeResource) -> dg.AssetCheckResult:
    import json

    from clawgym.trajectories.sft import SFTCleanConfig, check_sft_rows

    table = lake.sft()
    ok1, d1 = quality.check_table(Table.SFT, table)
    stats_file = lake.path("datasets", "sft", "clawgym_stats.json")  # written with the HF export: the config used
    cfg = json.loads(stats_file.read_text()).get("config", {}) if stats_file.exists() else {}
    max_tokens = int(cfg.get("max_tokens") or SFTCleanConfig().max_tokens)
    ok2, d2 = check_sft_rows(table.to_pylist(), max_tokens) if table.num_rows else (True, {"n_rows": 0})
    return dg.AssetCheckResult(passed=ok1 and ok2,
                               description=f"table: {quality.summary(d1)} | rows: {quality.summary(d2)}",
                               metadata={"table": dg.MetadataValue.json(d1), "rows": dg.MetadataValue.json(d2),
                                         "max_tokens": max_tokens})


@dg.asset_check(asset=bench_scores, blocking=True, description="GX: scores within 0–100, per-task results in [0,1]")
def bench_scores_gx(lake: LakeResource) -> dg.AssetCheckResult:
    ok1, d1 = quality.check_table(Table.BENCH_SCORES, lake.bench_scores())
    ok2, d2 = quality.check_table(Table.BENCH_RESULTS, lake.bench_results())
    return dg.AssetCheckResult(passed=ok1 and ok2, description=f"scores: {quality.summary(d1)} | results: "
                               f"{quality.summary(d2)}", metadata={"scores": dg.MetadataValue.json(d1),
                                                                    "results": dg.MetadataValue.json(d2)})


@dg.asset_check(asset=leaderboard, additional_deps=[checkpoints],  # reads the parent registry
                description="WARN when a model is significantly worse than its parent")
def no_regression_vs_parent(lake: LakeResource) -> dg.AssetCheckResult:
    from clawgym.bench.leaderboard import leaderboard_rows

    reg = lake.checkpoint_registry()
    bad = []
    for suite in sorted({r["suite"] for r in lake.bench_scores().to_pylist()}):
        board = leaderboard_rows(lake.bench_scores(suite=suite).to_pylist(),
                                 lake.bench_results(suite=suite).to_pylist(), reg)
        bad += [{**b, "suite": suite} for b in board if b["regression"]]
    return dg.AssetCheckResult(
        passed=not bad, severity=dg.AssetCheckSeverity.WARN,
        description="no significant regression" if not bad else
        "; ".join(f"{b['suite']}: {b['model']} vs {b['parent']}: {b['delta']:+.1f} "
                  f"[{b['delta_ci_low']:.1f}, {b['delta_ci_high']:.1f}]" for b in bad),
        metadata={"regressions": dg.MetadataValue.json(bad)})


CHECKS = [synthetic_tasks_gx, imported_tasks_gx, verifications_gx, bench_tasks_gx, trajectories_gx, sft_gx,
          bench_scores_gx, no_regression_vs_parent]
