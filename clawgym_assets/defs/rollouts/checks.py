"""The rollout tables' blocking Great Expectations gates (trajectories, the SFT set)."""

import dagster as dg

from clawgym import quality
from clawgym.lake import Table
from clawgym_assets._util import gx_result
from clawgym_assets.defs.lake.resources import LakeResource
from clawgym_assets.defs.rollouts.assets import sft_dataset, trajectories


@dg.asset_check(asset=trajectories, blocking=True,
                description="GX: unique rollout ids, scores in [0,1], known failure classes")
def trajectories_gx(lake: LakeResource) -> dg.AssetCheckResult:
    return gx_result(Table.TRAJECTORIES, lake.trajectories())


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


CHECKS = [trajectories_gx, sft_gx]
