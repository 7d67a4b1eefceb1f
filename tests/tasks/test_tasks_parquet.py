"""Canonical Parquet form: one row per task, files inline, exact round trip, atomic writes, clear errors."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clawgym.tasks import File, RubricProxy, RubricRule, Task, TaskError, ToolCall, Verifier, import_any
from clawgym.tasks.clawgym_format import import_clawgym_folder
from clawgym.tasks.parquet_io import (
    TASKS_SCHEMA,
    read_tasks_parquet,
    table_to_tasks,
    tasks_to_table,
    write_tasks_parquet,
)

REPO = Path(__file__).resolve().parents[2]


def rich_task() -> Task:
    return Task(
        task_id="p1", suite="s", split="bench", route="procedural", family="csv_sum", category="analysis_reasoning",
        subcategory="data analysis", persona_id="per_1", skill_ids=["csv"], difficulty=4, seed=7,
        instruction="Sum column b of data.csv into out.txt",
        files=[File(path="data.csv", content=b"a,b\n1,\xff\x00\n"),
               File(path="run.sh", content=b"#!/bin/sh\n", mode=0o755)],
        verifier=Verifier(kind="grade", code="def grade(t, w):\n    return {'x': 1}\n", timeout_s=30,
                          rubric=[RubricRule(name="r", file_path="out.txt", scores={"0": "a", "1": "b"},
                                             proxy=RubricProxy(required_phrases=["3"], min_words=1))],
                          code_weight=0.5, rubric_weight=0.5),
        reference=[ToolCall(name="write", arguments={"path": "out.txt", "content": "3"})],
        timeout_s=99.5, source={"format": "x", "nested": {"k": [1, 2]}},
    )


def test_round_trip_exact(tmp_path):
    tasks = [rich_task(), Task(task_id="p2", instruction="plain")]
    tb = tasks_to_table(tasks)
    assert tb.schema.equals(TASKS_SCHEMA, check_metadata=False) and tb.num_rows == 2
    assert table_to_tasks(tb) == tasks
    p = write_tasks_parquet(tasks, tmp_path / "lake" / "tasks.parquet")
    assert read_tasks_parquet(p) == tasks
    assert [x for x in os.listdir(p.parent) if x != "tasks.parquet"] == []  # no temp files left
    assert pq.read_table(p).column("fingerprint").to_pylist() == [t.fingerprint() for t in tasks]
    rep = import_any(p)
    assert rep.ok and rep.tasks == tasks


def test_fixture_tasks_through_parquet(tmp_path):
    d = Path(os.environ.get("CLAWGYM_FIXTURES") or REPO.parent / "shared" / "fixtures") / "clawgym_train_sample"
    if not d.is_dir():
        pytest.skip(f"ClawGym fixtures not found at {d}")
    tasks = import_clawgym_folder(d).tasks
    p = write_tasks_parquet(tasks, tmp_path / "t.parquet")
    assert read_tasks_parquet(p) == tasks


def test_bad_parquet_errors(tmp_path):
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet")
    with pytest.raises(TaskError, match="junk.parquet: is not a readable Parquet file"):
        read_tasks_parquet(junk)
    tb = tasks_to_table([rich_task()]).drop_columns(["instruction"])
    pq.write_table(tb, tmp_path / "cut.parquet")
    with pytest.raises(TaskError, match='cut.parquet: missing "instruction"'):
        read_tasks_parquet(tmp_path / "cut.parquet")
    tb = tasks_to_table([rich_task()])
    i = tb.schema.get_field_index("verifier_kind")
    tb = tb.set_column(i, "verifier_kind", pa.array(["bogus"]))
    with pytest.raises(TaskError, match="invalid row"):
        table_to_tasks(tb)
