"""The clawgym asset graph: `dg list defs`, `dg launch`, `dagster dev` and
`dagster asset materialize -m clawgym_assets.definitions` all load `defs` from here.

Each domain keeps its assets, checks, automation and resources in its own folder (defs/<domain>/); this module
merges the domains' definitions (dg.Definitions.merge) and binds the resources and the executor once.
The domains are merged explicitly rather than found by dg.load_from_defs_folder because the graph takes settings
(the shard count reshapes `trajectories` / `steps`) and the resources are bound as one set (the one LakeResource
is nested in the resources that need data paths, and tests swap the whole set).

`defs` is lazy (`@dg.definitions`): the graph settings (shard count, executor) and the resources are read from
the environment by each resource's `from_env` when Dagster loads the definitions, not when a module is imported.
`build_defs(settings, resources)` builds the same graph from explicit values (tests, notebooks)."""


import dagster as dg

from clawgym_assets.defs.bench import definitions as bench
from clawgym_assets.defs.harbor import definitions as harbor
from clawgym_assets.defs.rollouts import definitions as rollouts
from clawgym_assets.defs.synthesis import definitions as synthesis
from clawgym_assets.defs.training import definitions as training
from clawgym_assets.resources import default_resources
from clawgym_assets.settings import GraphSettings

# the domains in the order their assets are listed (synthesis feeds rollouts, rollouts training, all of them bench)
DOMAINS = (synthesis, rollouts, training, bench, harbor)

# the default graph's assets (DEFAULT_SHARDS shards); build_defs swaps in trajectories/steps for other counts
ASSETS = [a for d in DOMAINS for a in d.ASSETS]

# every asset check of the graph (each domain keeps its own in defs/<domain>/checks.py)
CHECKS = [c for d in DOMAINS for c in d.CHECKS]


def graph_assets(n_shards: int) -> list:
    """ASSETS with `trajectories` / `steps` partitioned over `n_shards` shards."""
    return [a for d in DOMAINS for a in (d.graph_assets(n_shards) if d is rollouts else d.ASSETS)]


def _executor(name: str):
    """The run executor named by GraphSettings.executor."""
    if name == "docker":  # each step in its own container of the run's image (settings from the DockerRunLauncher)
        from dagster_docker import docker_executor

        return docker_executor
    return dg.multiprocess_executor if name == "multiprocess" else dg.in_process_executor


def build_defs(settings: GraphSettings | None = None, resources: dict | None = None) -> dg.Definitions:
    settings = settings or GraphSettings()
    return dg.Definitions.merge(
        *(d.defs(settings) for d in DOMAINS),
        dg.Definitions(
            resources=default_resources() if resources is None else resources,
            # one machine, few cores: steps run in the run's own process (no per-step re-import). Set
            # CLAWGYM_EXECUTOR=multiprocess to run steps in parallel subprocesses (bounded by the "sandboxes" pool),
            # or =docker for dagster-docker's docker_executor (a container per step; deploy/ and docs/DEPLOY.md).
            executor=_executor(settings.executor),
        ),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_defs(GraphSettings.from_env(), default_resources())
