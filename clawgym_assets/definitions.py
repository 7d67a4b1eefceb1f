"""The clawgym asset graph (DESIGN §2): `dagster dev` / `dagster asset materialize -m clawgym_assets.definitions`."""

import dagster as dg

from clawgym_assets import automation, bench, rollouts, synthesis, training
from clawgym_assets.checks import CHECKS
from clawgym_resources import default_resources

ASSETS = [
    synthesis.personas, synthesis.skills, synthesis.imported_tasks, synthesis.synthetic_tasks,
    synthesis.mock_workspaces, synthesis.verifiers,
    rollouts.trajectories, rollouts.steps, rollouts.sft_dataset,
    training.base_model, training.checkpoints,
    bench.bench_tasks, bench.bench_scores, bench.leaderboard,
]

defs = dg.Definitions(
    assets=ASSETS,
    asset_checks=CHECKS,
    jobs=[automation.bench_job],
    sensors=[automation.new_checkpoint_sensor],
    schedules=[automation.weekly_rescore_schedule],
    resources=default_resources(),
)
