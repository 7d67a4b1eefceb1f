"""The synthesis tables' blocking Great Expectations gates."""

import dagster as dg

from clawgym.lake import Table, TaskSource
from clawgym_assets._util import gx_result
from clawgym_assets.defs.lake.resources import LakeResource
from clawgym_assets.defs.synthesis.assets import imported_tasks, synthetic_tasks, verifiers


@dg.asset_check(asset=synthetic_tasks, blocking=True, description="GX: unique task ids, required fields non-null")
def synthetic_tasks_gx(lake: LakeResource) -> dg.AssetCheckResult:
    return gx_result(Table.TASKS, lake.tasks(TaskSource.SYNTHETIC), min_rows=1)


@dg.asset_check(asset=imported_tasks, blocking=True, description="GX: unique task ids, required fields non-null")
def imported_tasks_gx(lake: LakeResource) -> dg.AssetCheckResult:
    return gx_result(Table.TASKS, lake.tasks(TaskSource.IMPORTED))


@dg.asset_check(asset=verifiers, blocking=True, description="GX: scores in [0,1], one row per (task, kind)")
def verifications_gx(lake: LakeResource) -> dg.AssetCheckResult:
    return gx_result(Table.VERIFICATIONS, lake.verifications())


CHECKS = [synthetic_tasks_gx, imported_tasks_gx, verifications_gx]
