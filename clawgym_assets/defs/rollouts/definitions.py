"""The rollout domain's definitions: trajectories and steps over the settings' shard count, the SFT set, their
quality gates."""

import dagster as dg

from clawgym_assets.defs.rollouts import assets, checks
from clawgym_assets.settings import GraphSettings

CHECKS = checks.CHECKS

ASSETS = [assets.trajectories, assets.steps, assets.sft_dataset]  # the default graph's (DEFAULT_SHARDS shards)


def graph_assets(n_shards: int) -> list:
    """ASSETS with `trajectories` / `steps` partitioned over `n_shards` shards."""
    if n_shards == assets.DEFAULT_SHARDS:
        return list(ASSETS)
    traj, steps = assets.build_rollout_assets(n_shards)
    return [traj if a is assets.trajectories else steps if a is assets.steps else a for a in ASSETS]


def defs(settings: GraphSettings) -> dg.Definitions:
    return dg.Definitions(assets=graph_assets(settings.n_shards), asset_checks=checks.CHECKS)
