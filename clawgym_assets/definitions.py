"""The clawgym asset graph (DESIGN §2): `dagster dev` / `dagster asset materialize -m clawgym_assets.definitions`."""

import os

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
    # one machine, few cores: steps run in the run's own process (no per-step re-import). Set
    # CLAWGYM_EXECUTOR=multiprocess to run steps in parallel subprocesses (bounded by the "sandboxes" pool).
    executor=dg.multiprocess_executor if os.environ.get("CLAWGYM_EXECUTOR") == "multiprocess"
    else dg.in_process_executor,
)
