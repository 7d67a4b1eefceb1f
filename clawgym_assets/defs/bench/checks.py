"""The bench tables' blocking Great Expectations gates, and a regression warning on the leaderboard."""

import dagster as dg

from clawgym import quality
from clawgym.lake import Table
from clawgym_assets._util import gx_result
from clawgym_assets.defs.bench.assets import bench_scores, bench_tasks, leaderboard
from clawgym_assets.defs.lake.resources import LakeResource
from clawgym_assets.defs.training.assets import checkpoints
from clawgym_assets.partitions import SUITES


@dg.asset_check(asset=bench_tasks, blocking=True, description="GX: unique task ids within each bench suite")
def bench_tasks_gx(lake: LakeResource) -> dg.AssetCheckResult:
    import pyarrow as pa

    t = pa.concat_tables([lake.bench_tasks(s) for s in SUITES])
    return gx_result(Table.TASKS, t, unique=[], unique_combo=["source", "task_id"])


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


CHECKS = [bench_tasks_gx, bench_scores_gx, no_regression_vs_parent]
