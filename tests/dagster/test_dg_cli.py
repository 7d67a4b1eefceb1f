"""Dagster's current CLI (`dg`, dagster-dg-cli) on this project, as a user runs it from the repository root:
`dg list defs` lists the graph with its declared dependencies, `dg check defs` passes, and
`dg launch --assets bench_scores --partition noop` scores a model on a fresh instance."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clawgym import lake as lk

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_SUITE = REPO / "data" / "seeds" / "example_suite"


def _exe(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    if exe.exists():
        return str(exe)
    found = shutil.which(name)
    assert found, f"{name} is not installed: pip install -e . (pyproject lists dagster-dg-cli)"
    return found


@pytest.fixture()
def env(tmp_path):
    """A throw-away instance and data root. dagster.yaml keeps storage under the home (absolute paths: dg runs
    from the repository root, where the repo's relative data/dagster would land)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        (REPO / "dagster.yaml").read_text().replace("data/dagster", str(home / "data" / "dagster")))
    return {**os.environ, "DAGSTER_HOME": str(home), "CLAWGYM_DATA": str(tmp_path / "data"),
            "CLAWGYM_SANDBOX": "local", "HF_HUB_OFFLINE": "1", "DAGSTER_DISABLE_TELEMETRY": "1",
            "NO_COLOR": "1", "COLUMNS": "200"}


def _dg(args, env, timeout=600):
    p = subprocess.run([_exe("dg"), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return p


def test_dg_list_and_check_defs(env):
    p = _dg(["list", "defs", "--json"], env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    defs = json.loads(p.stdout[p.stdout.index("{"):])
    assets = {a["asset_key"]: a for a in defs["assets"]}
    assert set(assets) >= {"personas", "skills", "imported_tasks", "synthetic_tasks", "mock_workspaces", "verifiers",
                           "trajectories", "steps", "sft_dataset", "base_model", "checkpoints", "bench_tasks",
                           "bench_scores", "leaderboard"}
    deps = {k: set(a["dependency_keys"]) for k, a in assets.items()}
    # every table an asset reads is a declared dependency
    assert {"trajectories", "bench_tasks", "synthetic_tasks", "imported_tasks", "base_model"} <= deps["sft_dataset"]
    assert {"verifiers", "synthetic_tasks", "bench_history"} <= deps["bench_tasks"]
    assert {"bench_scores", "checkpoints"} <= deps["leaderboard"]
    assert {"verifiers", "synthetic_tasks", "imported_tasks"} <= deps["trajectories"]
    assert {"mock_workspaces", "synthetic_tasks", "imported_tasks"} <= deps["verifiers"]
    assert not assets["bench_history"]["is_executable"]  # earlier bench results: an external asset
    checks = {c["key"] for c in defs["asset_checks"]}
    assert {"bench_scores:bench_scores_gx", "leaderboard:no_regression_vs_parent"} <= checks
    assert {j.get("name") or j.get("key") for j in defs["jobs"]} >= {"bench_scores_job"}

    p = _dg(["check", "defs"], env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    assert "loaded successfully" in p.stdout + p.stderr


def test_dg_launch_bench_scores_for_a_partition(env, tmp_path):
    from clawgym.bench.suites import load_suite_folder
    from clawgym.lake.records import task_row

    rep = load_suite_folder(str(EXAMPLE_SUITE), suite="procedural", split="bench", fmt="auto")
    assert rep.tasks, f"no tasks in {EXAMPLE_SUITE}"
    tasks = rep.tasks[:2]
    lake = lk.Lake.at(env["CLAWGYM_DATA"])
    lake.write(lk.Table.TASKS, [task_row(t, lk.bench_source("procedural")) for t in tasks],
               {"source": lk.bench_source("procedural")})
    p = subprocess.run([sys.executable, "-m", "clawgym.cli", "bench", "add", "noop"], env=env, cwd=REPO,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    p = _dg(["launch", "--assets", "bench_scores", "--partition", "noop"], env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-6000:]
    rows = lake.bench_results(model="noop", suite="procedural").to_pylist()
    assert sorted(r["task_id"] for r in rows) == sorted(t.task_id for t in tasks)
    overall = [r for r in lake.bench_scores(model="noop").to_pylist() if r["category"] == "overall"]
    assert overall and overall[0]["mean"] == 0.0  # doing nothing scores 0 on every scored task
    # the run went to the throw-away instance, not the repository's data/dagster
    assert (Path(env["DAGSTER_HOME"]) / "data" / "dagster" / "storage").is_dir()
