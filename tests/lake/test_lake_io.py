import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from clawgym import lake


@pytest.fixture()
def root(tmp_path, monkeypatch):
    # the library's default data root (it never reads $CLAWGYM_DATA: entry points and resources pass it)
    monkeypatch.setattr(lake.io, "DEFAULT_DATA_DIR", tmp_path / "data")
    return tmp_path / "data"


def test_data_root_is_a_parameter(root, tmp_path, monkeypatch):
    assert lake.data_root() == root.resolve()
    assert lake.table_dir("tasks") == root.resolve() / "lake" / "tasks"
    assert lake.data_root(tmp_path / "other") == (tmp_path / "other").resolve()
    monkeypatch.setenv("CLAWGYM_DATA", str(tmp_path / "from-env"))  # read by entry points only
    assert lake.data_root() == root.resolve()
    assert lake.table_dir(lake.Table.TASKS) == root.resolve() / "lake" / "tasks"


def test_typed_tables(root):
    lk = lake.Lake.at(root)
    lk.write(lake.Table.TASKS, [{"task_id": "s1"}], {"source": lake.TaskSource.SYNTHETIC})
    lk.write(lake.Table.TASKS, [{"task_id": "b1"}], {"source": lake.bench_source("procedural")})
    lk.write(lake.Table.REJECTED_TASKS, [{"task_id": "s1"}], {"writer": lake.RejectedBy.SYNTHESIS})
    lk.write(lake.Table.REJECTED_TASKS, [{"task_id": "v1"}], {"writer": lake.RejectedBy.VERIFIERS})
    lk.append(lake.Table.TRAJECTORIES, [{"rollout_id": "r", "task_id": "s1"}], {"policy": "oracle", "shard": 2})
    lk.write(lake.Table.CHECKPOINTS, [{"checkpoint": "c1", "parent": "base"}])
    assert lk.tasks("synthetic").column("task_id").to_pylist() == ["s1"]
    assert lk.bench_tasks("procedural").column("task_id").to_pylist() == ["b1"]
    assert sorted(lk.tasks().column("task_id").to_pylist()) == ["b1", "s1"]
    assert lk.rejected_task_ids() == {"s1", "v1"}  # the union of the writers' partitions
    assert lk.trajectories("oracle", 2).num_rows == 1 and lk.trajectories("noop").num_rows == 0
    assert lk.checkpoint_registry()["c1"]["parent"] == "base"
    assert set(lake.Table) == set(lake.TABLES)
    with pytest.raises(ValueError):
        lake.Table("nope")


def test_unknown_table_and_bad_partition(root):
    with pytest.raises(KeyError, match="unknown lake table"):
        lake.table_dir("nope")
    with pytest.raises(ValueError, match="partitioned by"):
        lake.write_table("trajectories", [{"task_id": "a"}], {"policy": "p"})
    with pytest.raises(ValueError, match="must match"):
        lake.write_table("trajectories", [{"task_id": "a"}], {"policy": "a/b", "shard": 0})


def test_conform_and_roundtrip(root):
    lake.write_table("tasks", [{"task_id": "t1", "difficulty": 3, "skill_ids": ["s"], "extra": 1},
                               {"task_id": "t2", "instruction": "do"}], {"source": "imported"})
    t = lake.read_table("tasks", {"source": "imported"})
    assert t.schema == lake.schema("tasks")
    assert t.column("task_id").to_pylist() == ["t1", "t2"]
    assert t.column("difficulty").to_pylist() == [3, None]
    # overwrite replaces
    lake.write_table("tasks", [{"task_id": "t3"}], {"source": "imported"})
    lake.write_table("tasks", [{"task_id": "t4"}], {"source": "synthetic"})
    assert lake.read_table("tasks", {"source": "imported"}).column("task_id").to_pylist() == ["t3"]
    assert len(list(lake.table_dir("tasks").glob("source=imported/*.parquet"))) == 1
    lake.write_table("verifications", [{"task_id": "a"}])
    lake.write_table("verifications", [{"task_id": "b"}])
    assert lake.read_table("verifications").column("task_id").to_pylist() == ["b"]


def test_hive_partitions_append_and_resume(root):
    p = {"policy": "oracle", "shard": 1}
    f1 = lake.append_rows("trajectories", [{"rollout_id": "r1", "task_id": "a", "score": 1.0,
                                            "messages_json": [{"role": "user", "content": "x"}]}], p)
    lake.append_rows("trajectories", [{"rollout_id": "r2", "task_id": "b", "score": 0.5}], p)
    lake.append_rows("trajectories", [{"rollout_id": "r3", "task_id": "c", "score": 0.0}],
                     {"policy": "noop", "shard": 1})
    assert f1.parent == root.resolve() / "lake" / "trajectories" / "policy=oracle" / "shard=1"
    assert "policy" not in pq.read_schema(f1).names  # partition columns live in the folder names
    assert lake.column_values("trajectories", "task_id", p) == {"a", "b"}
    assert lake.column_values("trajectories", "task_id", {"policy": "noop"}) == {"c"}
    t = lake.read_table("trajectories")
    assert t.num_rows == 3 and set(t.column("shard").to_pylist()) == {1}
    msgs = dict(zip(t.column("rollout_id").to_pylist(), t.column("messages_json").to_pylist()))
    assert msgs["r1"].startswith('[{"role"') and msgs["r2"] is None
    assert lake.list_partitions("trajectories") == [{"policy": "noop", "shard": "1"},
                                                    {"policy": "oracle", "shard": "1"}]


def test_atomic_write_leaves_no_temp_on_failure(root, tmp_path):
    import pyarrow as pa

    target = tmp_path / "x" / "f.parquet"
    lake.atomic_write_parquet(pa.table({"a": [1]}), target)
    assert pq.read_table(target).column("a").to_pylist() == [1]

    with pytest.raises(AttributeError):  # pq.write_table: a str has no .schema
        lake.atomic_write_parquet("not a table", target)  # type: ignore[arg-type]
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.parquet"]
    assert pq.read_table(target).column("a").to_pylist() == [1]  # old file intact


def test_killed_writer_leaves_no_parquet(root, tmp_path):
    # a writer killed mid-write must leave nothing that readers glob (*.parquet)
    code = (
        "import os, pyarrow as pa, pyarrow.parquet as pq\n"
        "from clawgym import lake\n"
        "orig = pq.write_table\n"
        "def slow(t, where, **kw):\n"
        "    open(where, 'wb').write(b'PAR1 partial')\n"
        "    os._exit(9)\n"
        "pq.write_table = slow\n"
        "lake.append_rows('steps', [{'rollout_id': 'r'}], {'policy': 'p', 'shard': 0})\n"
    )
    code = code.replace("{'policy': 'p', 'shard': 0})", "{'policy': 'p', 'shard': 0}, root=%r)" % str(root / "lake"))
    env = dict(os.environ)
    rc = subprocess.run([sys.executable, "-c", code], env=env).returncode
    assert rc == 9
    assert lake.read_table("steps").num_rows == 0
    assert list((root / "lake" / "steps").rglob("*.parquet")) == []


def test_catalog_with_zero_and_some_files(root):
    db = lake.refresh_catalog(root / "c.duckdb")
    cols, rows = lake.query("SELECT count(*) FROM trajectories", db)
    assert rows == [(0,)]
    cols, rows = lake.query("SELECT * FROM bench_scores", db)
    assert cols == lake.schema("bench_scores").names and rows == []
    lake.append_rows("trajectories", [{"rollout_id": "r1", "task_id": "a", "category": "x", "score": 1.0}],
                     {"policy": "oracle", "shard": 0})
    lake.append_rows("trajectories", [{"rollout_id": "r2", "task_id": "b", "category": "x", "score": 0.0}],
                     {"policy": "noop", "shard": 3})
    cols, rows = lake.query("SELECT policy, shard, avg(score) FROM trajectories GROUP BY ALL ORDER BY 1", db)
    assert rows == [("noop", 3, 0.0), ("oracle", 0, 1.0)]
    lake.write_table("tasks", [{"task_id": "t"}], {"source": "synthetic"})
    assert lake.query("SELECT source, task_id FROM tasks", db)[1] == [("synthetic", "t")]
