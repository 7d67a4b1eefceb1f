"""GraphSettings (read once when the definitions load) shapes the graph: shard count and the run executor,
including dagster-docker's step-per-container executor; a bad value is one error naming the variable."""

import dagster as dg
import pytest

from clawgym_assets.definitions import build_defs
from clawgym_assets.resources import default_resources
from clawgym_assets.settings import GraphSettings


def _executor_name(defs: dg.Definitions) -> str:
    job = defs.resolve_implicit_global_asset_job_def()
    return job.executor_def.name


@pytest.mark.parametrize("value, name", [("", "in_process"), ("multiprocess", "multiprocess"),
                                         ("docker", "docker")])
def test_executor_from_env(value, name):
    s = GraphSettings.from_env({"CLAWGYM_EXECUTOR": value})
    assert s.executor == (value or "in_process")
    assert _executor_name(build_defs(s, resources=default_resources())) == name


def test_bad_settings_name_the_variable():
    with pytest.raises(ValueError, match="CLAWGYM_EXECUTOR"):
        GraphSettings.from_env({"CLAWGYM_EXECUTOR": "k8s"})
    with pytest.raises(ValueError, match="CLAWGYM_SHARDS"):
        GraphSettings.from_env({"CLAWGYM_SHARDS": "two"})


def test_shards_shape_the_trajectory_partitions():
    defs = build_defs(GraphSettings.from_env({"CLAWGYM_SHARDS": "3"}), resources=default_resources())
    traj = defs.resolve_assets_def("trajectories")
    dims = {d.name: d.partitions_def for d in traj.partitions_def.partitions_defs}
    assert dims["shard"].get_partition_keys() == ["0", "1", "2"]
