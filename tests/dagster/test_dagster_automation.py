"""The checkpoint sensor and the weekly re-scoring schedule."""

import datetime as dt

import dagster as dg
import pytest

from clawgym import lake as lk
from clawgym_assets.definitions import build_defs, defs
from clawgym_assets.defs.bench.automation import (
    bench_job,
    discover_checkpoints,
    new_checkpoint_sensor,
    weekly_rescore_schedule,
)
from clawgym_assets.defs.lake.resources import LakeResource


@pytest.fixture()
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


def _drop_checkpoint(data, name):
    d = data / "checkpoints" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")


def test_definitions_load_with_every_stage():
    d = build_defs()
    keys = {k.to_user_string() for k in d.resolve_asset_graph().get_all_asset_keys()}
    assert keys >= {"personas", "skills", "synthetic_tasks", "imported_tasks", "mock_workspaces", "verifiers",
                    "trajectories", "steps", "sft_dataset", "base_model", "checkpoints", "bench_tasks",
                    "bench_scores", "leaderboard"}
    assert d.resolve_sensor_def("new_checkpoint_sensor") and d.resolve_schedule_def("weekly_rescore_schedule")


def test_lazy_definitions_read_settings_when_loaded(monkeypatch, tmp_path):
    """The shard count and resources come from the environment when Dagster loads `defs`, not at import."""
    from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext, DefinitionsLoadType

    def load():
        DefinitionsLoadContext.set(DefinitionsLoadContext(load_type=DefinitionsLoadType.INITIALIZATION,
                                                          repository_load_data=None))
        return defs()

    monkeypatch.setenv("CLAWGYM_SHARDS", "6")
    monkeypatch.setenv("CLAWGYM_DATA", str(tmp_path / "d"))
    d = load()
    pdef = d.resolve_assets_def("trajectories").partitions_def
    shard = next(x for x in pdef.partitions_defs if x.name == "shard").partitions_def
    assert shard.get_partition_keys() == [str(i) for i in range(6)]
    assert d.resolve_assets_def("steps").partitions_def == pdef
    lake_res = d.resources["lake"]
    assert lake_res.data_dir == str(tmp_path / "d") and d.resources["endpoints"].lake.data_dir == lake_res.data_dir
    monkeypatch.delenv("CLAWGYM_SHARDS")
    shard = next(x for x in load().resolve_assets_def("trajectories").partitions_def.partitions_defs
                 if x.name == "shard").partitions_def
    assert shard.get_partition_keys() == ["0", "1", "2", "3"]  # users' keys unchanged by default


def test_discover_registry_and_folders(data):
    assert discover_checkpoints(data) == []
    _drop_checkpoint(data, "dropped-1")
    (data / "checkpoints" / "not-a-model").mkdir()  # no config.json: ignored
    lk.Lake.at(data).write(lk.Table.CHECKPOINTS, [{"checkpoint": "trained-1", "path": "x"}])
    assert discover_checkpoints(data) == ["dropped-1", "trained-1"]


def test_sensor_adds_partitions_and_requests_runs(data):
    def tick(instance, res_):  # the lake resource has setup/teardown hooks: its context is opened as Dagster does
        with dg.build_sensor_context(instance=instance, resources=res_) as ctx:
            return new_checkpoint_sensor(ctx)

    with dg.instance_for_test() as instance:
        res_ = {"lake": LakeResource(data_dir=str(data))}
        res = tick(instance, res_)
        assert not res.run_requests and res.skip_reason
        _drop_checkpoint(data, "ckpt-a")
        lk.Lake.at(data).write(lk.Table.CHECKPOINTS, [{"checkpoint": "ckpt-b", "path": "x"}])
        res = tick(instance, res_)
        assert sorted(r.partition_key for r in res.run_requests) == ["ckpt-a", "ckpt-b"]
        assert res.dynamic_partitions_requests[0].partition_keys == ["ckpt-a", "ckpt-b"]
        # once the partitions exist (as the daemon would add them), nothing new is requested
        instance.add_dynamic_partitions("model", ["ckpt-a", "ckpt-b"])
        res = tick(instance, res_)
        assert not res.run_requests


def test_weekly_schedule_rescores_every_model(data):
    assert weekly_rescore_schedule.cron_schedule == "0 3 * * 1"
    assert weekly_rescore_schedule.job_name == bench_job.name
    with dg.instance_for_test() as instance:
        t = dt.datetime(2026, 11, 30, 3, tzinfo=dt.UTC)
        ctx = dg.build_schedule_context(instance=instance, scheduled_execution_time=t)
        out = weekly_rescore_schedule(ctx)
        assert isinstance(out, dg.SkipReason)
        instance.add_dynamic_partitions("model", ["oracle", "sft-1"])
        out = weekly_rescore_schedule(dg.build_schedule_context(instance=instance, scheduled_execution_time=t))
        assert sorted(r.partition_key for r in out) == ["oracle", "sft-1"]
        assert all(r.run_key.endswith("2026-11-30") for r in out)
