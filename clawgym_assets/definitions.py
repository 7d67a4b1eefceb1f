"""The clawgym asset graph: `dg list defs`, `dg launch`, `dagster dev` and
`dagster asset materialize -m clawgym_assets.definitions` all load `defs` from here.

`defs` is lazy (`@dg.definitions`): the graph settings (shard count, executor) and the resources are read from
the environment by clawgym_resources when Dagster loads the definitions, not when a module is imported.
`build_defs(settings, resources)` builds the same graph from explicit values (tests, notebooks)."""

from typing import Optional

import dagster as dg

from clawgym_assets import automation, bench, harbor, rollouts, synthesis, training
from clawgym_assets.checks import CHECKS
from clawgym_resources import GraphSettings, default_resources

# the default graph's assets (DEFAULT_SHARDS shards); build_defs swaps in trajectories/steps for other counts
ASSETS = [
    synthesis.personas, synthesis.skills, synthesis.imported_tasks, synthesis.llm_candidates,
    synthesis.synthetic_tasks,
    synthesis.mock_workspaces, synthesis.verifiers,
    rollouts.trajectories, rollouts.steps, rollouts.sft_dataset,
    training.base_model, training.checkpoints,
    bench.bench_history, bench.bench_tasks, bench.bench_scores, bench.leaderboard,
    harbor.harbor_datasets,
]


def graph_assets(n_shards: int) -> list:
    """ASSETS with `trajectories` / `steps` partitioned over `n_shards` shards."""
    if n_shards == rollouts.DEFAULT_SHARDS:
        return list(ASSETS)
    traj, steps = rollouts.build_rollout_assets(n_shards)
    return [traj if a is rollouts.trajectories else steps if a is rollouts.steps else a for a in ASSETS]


def _executor(name: str):
    """The run executor named by GraphSettings.executor."""
    if name == "docker":  # each step in its own container of the run's image (settings from the DockerRunLauncher)
        from dagster_docker import docker_executor

        return docker_executor
    return dg.multiprocess_executor if name == "multiprocess" else dg.in_process_executor


def build_defs(settings: Optional[GraphSettings] = None, resources: Optional[dict] = None) -> dg.Definitions:
    settings = settings or GraphSettings()
    return dg.Definitions(
        assets=graph_assets(settings.n_shards),
        asset_checks=CHECKS,
        jobs=[automation.bench_job],
        sensors=[automation.new_checkpoint_sensor],
        schedules=[automation.weekly_rescore_schedule],
        resources=default_resources() if resources is None else resources,
        # one machine, few cores: steps run in the run's own process (no per-step re-import). Set
        # CLAWGYM_EXECUTOR=multiprocess to run steps in parallel subprocesses (bounded by the "sandboxes" pool), or
        # =docker for dagster-docker's docker_executor (a container per step; deploy/ and docs/DEPLOY.md).
        executor=_executor(settings.executor),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_defs(GraphSettings.from_env(), default_resources())
