"""The bench domain's definitions: suites, scores and the leaderboard, their checks, and the automation that scores
new checkpoints and re-scores every model weekly."""

import dagster as dg

from clawgym_assets.defs.bench import assets, automation, checks
from clawgym_assets.settings import GraphSettings

CHECKS = checks.CHECKS

ASSETS = [assets.bench_history, assets.bench_tasks, assets.bench_scores, assets.leaderboard]


def defs(settings: GraphSettings) -> dg.Definitions:
    return dg.Definitions(assets=ASSETS, asset_checks=checks.CHECKS, jobs=[automation.bench_job],
                          sensors=[automation.new_checkpoint_sensor],
                          schedules=[automation.weekly_rescore_schedule])
