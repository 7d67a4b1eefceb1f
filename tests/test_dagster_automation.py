"""The checkpoint sensor and the weekly re-scoring schedule."""

import datetime as dt

import dagster as dg
import pytest

from clawgym import lake as lk
from clawgym_assets.automation import (bench_job, discover_checkpoints, new_checkpoint_sensor,
                                       weekly_rescore_schedule)
from clawgym_assets.definitions import defs


@pytest.fixture()
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


def _drop_checkpoint(data, name):
    d = data / "checkpoints" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")


def test_definitions_load_with_every_stage():
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert keys >= {"personas", "skills", "synthetic_tasks", "imported_tasks", "mock_workspaces", "verifiers",
                    "trajectories", "steps", "sft_dataset", "base_model", "checkpoints", "bench_tasks",
                    "bench_scores", "leaderboard"}
    assert defs.resolve_sensor_def("new_checkpoint_sensor") and defs.resolve_schedule_def("weekly_rescore_schedule")


def test_discover_registry_and_folders(data):
    assert discover_checkpoints() == []
    _drop_checkpoint(data, "dropped-1")
    (data / "checkpoints" / "not-a-model").mkdir()  # no config.json: ignored
    lk.write_table("checkpoints", [{"checkpoint": "trained-1", "path": "x"}])
    assert discover_checkpoints() == ["dropped-1", "trained-1"]


def test_sensor_adds_partitions_and_requests_runs(data):
    with dg.instance_for_test() as instance:
        ctx = dg.build_sensor_context(instance=instance, definitions=defs)
        res = new_checkpoint_sensor(ctx)
        assert not res.run_requests and res.skip_reason
        _drop_checkpoint(data, "ckpt-a")
        lk.write_table("checkpoints", [{"checkpoint": "ckpt-b", "path": "x"}])
        res = new_checkpoint_sensor(dg.build_sensor_context(instance=instance, definitions=defs))
        assert sorted(r.partition_key for r in res.run_requests) == ["ckpt-a", "ckpt-b"]
        assert res.dynamic_partitions_requests[0].partition_keys == ["ckpt-a", "ckpt-b"]
        # once the partitions exist (as the daemon would add them), nothing new is requested
        instance.add_dynamic_partitions("model", ["ckpt-a", "ckpt-b"])
        res = new_checkpoint_sensor(dg.build_sensor_context(instance=instance, definitions=defs))
        assert not res.run_requests


def test_weekly_schedule_rescores_every_model(data):
    assert weekly_rescore_schedule.cron_schedule == "0 3 * * 1"
    assert weekly_rescore_schedule.job_name == bench_job.name
    with dg.instance_for_test() as instance:
        t = dt.datetime(2026, 11, 30, 3, tzinfo=dt.timezone.utc)
        ctx = dg.build_schedule_context(instance=instance, scheduled_execution_time=t)
        out = weekly_rescore_schedule(ctx)
        assert isinstance(out, dg.SkipReason)
        instance.add_dynamic_partitions("model", ["oracle", "sft-1"])
        out = weekly_rescore_schedule(dg.build_schedule_context(instance=instance, scheduled_execution_time=t))
        assert sorted(r.partition_key for r in out) == ["oracle", "sft-1"]
        assert all(r.run_key.endswith("2026-11-30") for r in out)
