"""Resume retries what infra broke: a trajectories partition whose rollouts failed as infra (the policy
server answering 500) is run again on the next materialization; finished rollouts are skipped, infra rows
stay as history and readers use the latest non-infra row per (policy, task, repeat)."""

import dagster as dg
import pytest

from clawgym import lake as lk
from clawgym.lake.records import effective_rows, finished_keys


def test_effective_rows_latest_finished_else_latest_infra():
    import datetime as dt

    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = [
        {"rollout_id": "a1", "policy": "p", "task_id": "a", "failure_class": "infra", "score": None, "created_at": t0},
        {"rollout_id": "a2", "policy": "p", "task_id": "a", "failure_class": "ok", "score": 1.0,
         "created_at": t0 + dt.timedelta(hours=1)},
        {"rollout_id": "a3", "policy": "p", "task_id": "a", "failure_class": "infra", "score": None,
         "created_at": t0 + dt.timedelta(hours=2)},  # a later infra row never hides a finished one
        {"rollout_id": "b1", "policy": "p", "task_id": "b", "failure_class": "infra", "score": None},
        {"rollout_id": "b2", "policy": "p", "task_id": "b", "failure_class": "infra", "score": None},
        {"rollout_id": "c1", "policy": "p", "task_id": "c", "failure_class": "unjudged", "score": None},
        {"rollout_id": "a9", "policy": "q", "task_id": "a", "failure_class": "limit", "score": 0.0},
        {"rollout_id": "d0", "policy": "p", "task_id": "d", "repeat": 0, "failure_class": "ok", "score": 0.5},
        {"rollout_id": "d1", "policy": "p", "task_id": "d", "repeat": 1, "failure_class": "ok", "score": 1.0},
    ]
    assert [r["rollout_id"] for r in effective_rows(rows)] == ["a2", "b2", "c1", "a9", "d0", "d1"]
    assert finished_keys(rows) == {"a", "c", "d"}  # unjudged is finished; infra-only b is not


def _resources(data):
    from clawgym_assets.defs.lake.resources import LakeResource
    from clawgym_assets.defs.rollouts.resources import (
        JudgeResource,
        ModelEndpointsResource,
        OpenClawResource,
        SandboxResource,
    )

    lake = LakeResource(data_dir=str(data))  # one lake, nested where data paths are needed
    return {"lake": lake, "sandbox": SandboxResource(backend="local"),
            "endpoints": ModelEndpointsResource(lake=lake), "judge": JudgeResource(), "openclaw": OpenClawResource()}


@pytest.fixture()
def world(tmp_path, monkeypatch):
    from clawgym.agent.demo import demo_tasks
    from clawgym.agent.resume import shard_of
    from clawgym.lake.records import task_row
    from clawgym_assets.partitions import DEFAULT_SHARDS

    data = tmp_path / "data"
    monkeypatch.setenv("CLAWGYM_DATA", str(data))
    tasks = [t.model_copy(update={"task_id": f"{t.task_id}-{i}", "split": "train"})
             for i in range(4) for t in demo_tasks()]
    root = data / "lake"
    lk.write_table("tasks", [task_row(t, "synthetic") for t in tasks], {"source": "synthetic"}, root=root)
    shard = max(range(DEFAULT_SHARDS), key=lambda s: sum(shard_of(t.task_id, DEFAULT_SHARDS) == s for t in tasks))
    mine = sorted(t.task_id for t in tasks if shard_of(t.task_id, DEFAULT_SHARDS) == shard)
    assert len(mine) >= 3
    return {"data": data, "root": root, "shard": shard, "mine": mine}


def test_infra_rows_are_retried_and_kept_as_history(world):
    from clawgym.agent.servers import shared_policy_server
    from clawgym_assets.defs.rollouts import assets as rollouts

    root, shard, mine = world["root"], world["shard"], world["mine"]
    res = _resources(world["data"])
    assets = [rollouts.trajectories, rollouts.steps, dg.AssetSpec("verifiers")]
    cfg = {"ops": {"trajectories": {"config": {"attempts": 1, "request_attempts": 1, "retry_wait_s": 0.0}}}}
    key = dg.MultiPartitionKey({"policy": "oracle", "shard": str(shard)})
    part = {"policy": "oracle", "shard": shard}
    srv = shared_policy_server()
    n_down = 2  # the endpoint is down for the first two tasks' requests (one request each: no retries)
    with dg.instance_for_test() as inst:
        inst.add_dynamic_partitions("policy", ["oracle"])
        srv.fail_next.clear()
        srv.inject_failures(n_down, 500)
        try:
            r1 = dg.materialize(assets, selection=["trajectories"], partition_key=key, resources=res, instance=inst,
                                run_config=cfg)
        finally:
            srv.fail_next.clear()
        assert r1.success
        rows = lk.read_table("trajectories", part, root=root).to_pylist()
        infra = sorted(r["task_id"] for r in rows if r["failure_class"] == "infra")
        assert infra == mine[:n_down] and all(r["score"] is None for r in rows if r["task_id"] in infra)
        md1 = r1.asset_materializations_for_node("trajectories")[0].metadata
        assert md1["n_infra"].value == n_down and md1["n_new"].value == len(mine)
        assert md1["infra_rate"].value == pytest.approx(n_down / len(mine))
        assert md1["mean_score"].value == 1.0  # infra is never averaged in as 0

        # the outage is over: a rematerialization runs exactly the infra tasks again
        r2 = dg.materialize(assets, selection=["trajectories", "steps"], partition_key=key, resources=res,
                            instance=inst, run_config=cfg)
        assert r2.success
        md2 = r2.asset_materializations_for_node("trajectories")[0].metadata
        assert md2["n_skipped_resume"].value == len(mine) - n_down
        assert md2["n_retried_infra"].value == n_down and md2["n_new"].value == n_down
        assert md2["n_infra"].value == 0 and md2["n_rollouts"].value == len(mine)
        assert md2["n_rows_with_history"].value == len(mine) + n_down
        rows = lk.read_table("trajectories", part, root=root).to_pylist()
        assert len(rows) == len(mine) + n_down  # both rows kept
        assert sorted(r["task_id"] for r in rows if r["failure_class"] == "infra") == infra
        eff = effective_rows(rows)
        assert sorted(r["task_id"] for r in eff) == mine
        assert all(r["failure_class"] == "ok" and r["score"] == 1.0 for r in eff)
        # the catalog reader can pick the same rows
        _, got = lk.query("SELECT count(DISTINCT task_id) FROM trajectories WHERE failure_class <> 'infra'",
                          world["data"] / "c.duckdb")
        assert got == [(len(mine),)]

        # nothing left: a third run runs nothing
        r3 = dg.materialize(assets, selection=["trajectories"], partition_key=key, resources=res, instance=inst,
                            run_config=cfg)
        md3 = r3.asset_materializations_for_node("trajectories")[0].metadata
        assert md3["n_new"].value == 0 and md3["n_skipped_resume"].value == len(mine)
