"""`clawgym` CLI: sql, bench add/list/leaderboard (in-process via typer's runner)."""

import dagster as dg
import pytest
from typer.testing import CliRunner

from clawgym import lake as lk
from clawgym.cli import app

runner = CliRunner()


@pytest.fixture()
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path


def test_sql_prints_table_and_reports_errors(env):
    lk.append_rows("trajectories", [{"rollout_id": "r1", "task_id": "t", "category": "cat_a", "score": 0.5}],
                   {"policy": "oracle", "shard": 0}, root=env / "data" / "lake")  # the CLI reads $CLAWGYM_DATA
    r = runner.invoke(app, ["sql", "SELECT category, avg(score) AS s FROM trajectories GROUP BY 1"])
    assert r.exit_code == 0, r.output
    assert "cat_a" in r.output and "0.5" in r.output and "1 row(s)" in r.output
    r = runner.invoke(app, ["sql", "SELECT nope FROM trajectories"])
    assert r.exit_code == 1 and "error" in r.output


def test_bench_add_registers_dynamic_partition(env):
    r = runner.invoke(app, ["bench", "add", "my-ckpt"])
    assert r.exit_code == 0, r.output
    with dg.DagsterInstance.from_config(str(env / "home")) as inst:
        assert inst.get_dynamic_partitions("model") == ["my-ckpt"]
    r = runner.invoke(app, ["bench", "add", "my-ckpt"])
    assert "already registered" in r.output
    r = runner.invoke(app, ["bench", "add", "pol", "--kind", "policy"])
    assert r.exit_code == 0
    r = runner.invoke(app, ["bench", "list", "--kind", "policy"])
    assert r.output.split() == ["pol"]
    assert runner.invoke(app, ["bench", "add", "bad/name"]).exit_code == 2


def test_leaderboard_with_parent_delta(env):
    assert runner.invoke(app, ["bench", "leaderboard"]).exit_code == 1
    from clawgym.bench.stats import summarize

    for model, score, parent in (("base", 1.0, None), ("child", 0.0, "base")):
        res = [{"model": model, "suite": "procedural", "task_id": f"t{i}", "category": "analysis_reasoning",
                "repeat": 0, "score": score} for i in range(10)]
        lk.write_table(lk.Table.BENCH_RESULTS, res, {"model": model, "suite": "procedural"}, root=env / "data" / "lake")
        rows = [{**s.to_dict(), "parent": parent} for s in summarize(res)]
        lk.write_table(lk.Table.BENCH_SCORES, rows, {"model": model, "suite": "procedural"}, root=env / "data" / "lake")
    r = runner.invoke(app, ["bench", "leaderboard"])
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if "child" in ln]
    assert lines and "-100.0" in lines[0] and "⚠" in lines[0]
    assert "100.0" in [ln for ln in r.output.splitlines() if "base" in ln and "child" not in ln][0]
