"""What the thin assets call, without Dagster: the resumable shard runner, the one rollout settings
object, the workspaces writer on the one atomic-folder helper, bench scoring per suite, and `rejected_tasks`
written per writer (each asset replaces only its own partition; readers see the union)."""

import os

import pytest

from clawgym import lake as lk
from clawgym.agent.demo import demo_tasks
from clawgym.agent.loop import Limits
from clawgym.agent.policies import RetryPolicy
from clawgym.agent.settings import RolloutSettings

FAST = RolloutSettings(retry=RetryPolicy(attempts=1, backoff_s=0.01, timeout_s=30), attempts=1, retry_wait_s=0.0)


def _train(n=3):
    return [t.model_copy(update={"task_id": f"{t.task_id}-{i}", "split": "train"})
            for i in range(n) for t in demo_tasks()[:1]]


# --- rollout settings ----------------------------------------------------------------------------------------------
def test_rollout_settings_defaults_and_validation():
    s = RolloutSettings()
    assert s.limits == Limits() and s.attempts == 3 and s.retry is None and s.runtime == "builtin"
    with pytest.raises(ValueError, match="runtime"):
        RolloutSettings(runtime="claude")
    assert RolloutSettings(limits=None).limits == Limits()
    t = s.replace(attempts=1)
    assert t.attempts == 1 and s.attempts == 3  # frozen: a copy


def test_both_asset_configs_build_the_same_settings_from_fields_declared_once():
    from clawgym_assets.defs.bench.assets import BenchScoresConfig
    from clawgym_assets.defs.rollouts.assets import TrajectoriesConfig
    from clawgym_assets.defs.rollouts.config import RolloutConfig
    from clawgym_assets.defs.rollouts.resources import OpenClawResource

    fields = {"max_turns": 7, "max_wall_s": 50.0, "max_completion_tokens": 99, "attempts": 2, "retry_wait_s": 0.5,
              "request_attempts": 4, "request_backoff_s": 0.25}
    oc = OpenClawResource()
    a = TrajectoriesConfig(**fields).rollout_settings(oc)
    b = BenchScoresConfig(**fields).rollout_settings(oc)
    assert a == b
    assert a.limits == Limits(max_turns=7, max_wall_s=50.0, max_completion_tokens=99)
    assert a.retry == RetryPolicy(attempts=4, backoff_s=0.25) and a.attempts == 2 and a.runtime == "builtin"
    assert TrajectoriesConfig().rollout_settings(oc).retry is None  # request_attempts 0: the endpoint's default
    for cls in (TrajectoriesConfig, BenchScoresConfig):  # the shared fields live on RolloutConfig only
        assert set(RolloutConfig.model_fields) <= set(cls.model_fields)
        assert not set(RolloutConfig.model_fields) & set(vars(cls).get("__annotations__", {}))


# --- the resumable shard runner --------------------------------------------------------------------------------------
def test_shard_tasks_filters_split_rejected_and_shard():
    from clawgym.agent.resume import shard_of, shard_tasks

    tasks = _train(12) + [demo_tasks()[0].model_copy(update={"task_id": "bench-1", "split": "bench"})]
    rejected = {tasks[0].task_id}
    got = shard_tasks(tasks, rejected, 1, 3)
    assert [t.task_id for t in got] == sorted(t.task_id for t in tasks[1:12] if shard_of(t.task_id, 3) == 1)
    assert shard_tasks(tasks, rejected, 1, 3, limit=1) == got[:1]


def test_run_shard_skips_finished_retries_infra_and_appends_in_batches(local_factory):
    import contextlib

    from clawgym.agent.resume import run_shard

    tasks = _train(3)
    a, b, c = (t.task_id for t in tasks)
    prior = [{"task_id": a, "failure_class": "ok", "score": 1.0},  # finished: skipped
             {"task_id": b, "failure_class": "infra", "score": None}]  # infra only: run again
    appended, logs, opened = [], [], []

    @contextlib.contextmanager
    def open_factory():
        opened.append(1)
        yield local_factory

    rep = run_shard(tasks, prior, "oracle", open_factory, policy="oracle", shard=2, settings=FAST, run_id="r1",
                    batch_size=1, append=appended.append, log=logs.append)
    assert (rep.n_tasks, rep.n_finished, rep.n_retried_infra, rep.n_todo, rep.n_written) == (3, 1, 1, 2, 2)
    assert [len(x) for x in appended] == [1, 1]  # one part per batch
    rows = [r for x in appended for r in x]
    assert sorted(r["task_id"] for r in rows) == [b, c]
    assert all(r["shard"] == 2 and r["run_id"] == "r1" and r["policy"] == "oracle" and r["score"] == 1.0
               for r in rows)
    assert logs == ["oracle|2: 3 tasks, 1 finished, 1 infra to retry, 2 to run"]
    # nothing left to run: no sandboxes opened, nothing appended
    again = run_shard(tasks, prior + rows, "oracle", open_factory, policy="oracle", shard=2, settings=FAST,
                      append=appended.append)
    assert (again.n_todo, again.n_written, len(opened), len(appended)) == (0, 0, 1, 2)


def test_run_rollout_takes_its_limits_from_the_settings(local_factory):
    from clawgym.agent.rollout import run_rollout

    ro = run_rollout(demo_tasks()[1], "oracle", local_factory, FAST.replace(limits=Limits(max_turns=1)))
    assert ro.failure_class == "limit" and ro.turns == 1


# --- workspaces on the one atomic-folder helper ----------------------------------------------------------------------
def test_write_workspaces_replaces_the_folder_and_isolates_a_bad_task(tmp_path):
    from clawgym.tasks.model import File as TaskFile
    from clawgym.tasks.workspaces import write_workspaces

    root = tmp_path / "workspaces"
    (root / "stale-task").mkdir(parents=True)
    good = demo_tasks()[0]
    # a path the host cannot hold (a file below a file): that task's error only
    bad = good.model_copy(update={"task_id": "bad", "files": [TaskFile(path="ok.txt", content=b"x"),
                                                               TaskFile(path="ok.txt/under", content=b"y")]})
    exe = good.model_copy(update={"task_id": "exe", "files": [TaskFile(path="run.sh", content=b"#!/bin/sh\n",
                                                                        mode=0o755)]})
    warned = []
    rep = write_workspaces([good, bad, exe], root, warn=warned.append)
    assert sorted(os.listdir(root)) == sorted([good.task_id, "exe"])  # the stale folder is gone, bad left out
    assert set(rep.failed) == {"bad"} and "bad" in warned[0] and rep.n_written == 2
    assert rep.n_files == len(good.files) + 1 and rep.by_extension[".sh"] == 1
    assert os.stat(root / "exe" / "run.sh").st_mode & 0o777 == 0o755
    assert os.stat(root).st_mode & 0o777 == 0o755
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temp or old folder left beside it


def test_write_workspaces_never_removes_what_a_path_task_id_names(tmp_path):
    """A task id that is a path (a row written around the importers) is that task's error; cleaning up after it
    never joins the id to a path (the old asset removed `<tmp>/<task_id>`, i.e. a sibling folder of data/)."""
    from clawgym.tasks import File, Task
    from clawgym.tasks.workspaces import write_workspaces

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    t = Task.model_construct(**{**Task(task_id="x", instruction="i").__dict__, "task_id": "../victim",
                                "files": [File(path="a.txt", content=b"a")]})
    rep = write_workspaces([t, demo_tasks()[0]], tmp_path / "workspaces")
    assert (victim / "precious.txt").read_text() == "keep me"
    assert list(rep.failed) == ["../victim"] and "task_id" in rep.failed["../victim"]
    assert os.listdir(tmp_path / "workspaces") == [demo_tasks()[0].task_id]


def test_replace_dir_keeps_the_old_folder_when_fill_fails(tmp_path):
    from clawgym.fsatomic import replace_dir

    out = tmp_path / "out"
    replace_dir(out, lambda d: (d / "a").write_text("1"))
    assert (out / "a").read_text() == "1"

    def broken(d):
        (d / "b").write_text("2")
        raise RuntimeError("fill failed")

    with pytest.raises(RuntimeError):
        replace_dir(out, broken)
    assert sorted(os.listdir(out)) == ["a"] and sorted(os.listdir(tmp_path)) == ["out"]
    replace_dir(out, lambda d: (d / "c").write_text("3"), mode=0o750)
    assert sorted(os.listdir(out)) == ["c"] and os.stat(out).st_mode & 0o777 == 0o750
    assert sorted(os.listdir(tmp_path)) == ["out"]


# --- bench scoring ---------------------------------------------------------------------------------------------------
def test_score_model_hands_each_suite_over_as_it_is_scored(local_factory):
    from clawgym.bench.scores import ScoreSettings, score_model

    seen = []
    tasks = demo_tasks()[:2]
    out = score_model({"a": tasks, "b": tasks[:1]}, "oracle", local_factory, model="oracle", parent="base",
                      rollout=FAST, scoring=ScoreSettings(n_boot=50), run_id="r9",
                      on_suite=lambda ss: seen.append((ss.suite, len(ss.results), len(ss.scores))))
    assert [s[:2] for s in seen] == [("a", 2), ("b", 1)]
    assert [ss.overall.mean for ss in out] == [100.0, 100.0]
    assert all(r["parent"] == "base" and r["run_id"] == "r9" and r["suite"] == ss.suite
               for ss in out for r in ss.scores)


# --- rejected_tasks per writer ---------------------------------------------------------------------------------------
def _rej(task_id, stage):
    return {"task_id": task_id, "route": "procedural", "family": "f", "category": "c", "stage": stage,
            "reason": "why", "task_json": "{}"}


def test_rejected_tasks_each_writer_replaces_only_its_partition(tmp_path):
    root = tmp_path / "lake"
    lake = lk.Lake(root)
    lake.write(lk.Table.REJECTED_TASKS, [_rej("s1", "oracle"), _rej("s2", "dedupe")],
               {"writer": lk.RejectedBy.SYNTHESIS})
    lake.write(lk.Table.REJECTED_TASKS, [_rej("v1", "verifiers")], {"writer": lk.RejectedBy.VERIFIERS})
    assert lake.rejected_task_ids() == {"s1", "s2", "v1"}
    # a new synthesis run replaces its own rows; the verifiers' stay (and the other way round)
    lake.write(lk.Table.REJECTED_TASKS, [_rej("s3", "oracle")], {"writer": lk.RejectedBy.SYNTHESIS})
    assert lake.rejected_task_ids() == {"s3", "v1"}
    lake.write(lk.Table.REJECTED_TASKS, [], {"writer": lk.RejectedBy.VERIFIERS})
    assert lake.rejected_task_ids() == {"s3"}
    assert {r["writer"] for r in lake.rejected_tasks().to_pylist()} == {"synthetic_tasks"}
    assert lake.rejected_tasks(lk.RejectedBy.VERIFIERS).num_rows == 0


def test_rejected_tasks_of_an_unpartitioned_lake_are_dropped_and_duckdb_reads_the_union(tmp_path):
    import pyarrow.parquet as pq

    root = tmp_path / "lake"
    legacy = root / "rejected_tasks" / "part-20250101T000000-000000000-00000000.parquet"
    legacy.parent.mkdir(parents=True)
    tbl = lk.to_table("rejected_tasks", [_rej("old", "oracle")], for_file=True)
    pq.write_table(tbl.drop_columns(["writer"]) if "writer" in tbl.column_names else tbl, legacy)
    lake = lk.Lake(root)
    lake.write(lk.Table.REJECTED_TASKS, [_rej("v1", "verifiers")], {"writer": lk.RejectedBy.VERIFIERS})
    assert not legacy.exists()  # no reader sees a root part of a partitioned table; DuckDB could not mix them
    lake.write(lk.Table.REJECTED_TASKS, [_rej("s1", "oracle")], {"writer": lk.RejectedBy.SYNTHESIS})
    db = tmp_path / "c.duckdb"
    _, rows = lk.query("SELECT writer, task_id, stage FROM rejected_tasks ORDER BY 1", db, root=root)
    assert rows == [("synthetic_tasks", "s1", "oracle"), ("verifiers", "v1", "verifiers")]
