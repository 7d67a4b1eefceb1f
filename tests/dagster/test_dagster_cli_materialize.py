"""The documented CLI path on a fresh DAGSTER_HOME (subprocesses, as a user or CI would run it):
`dagster asset materialize --select '*verifiers'`, then `clawgym bench add` + bench_scores by partition."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clawgym import lake as lk

REPO = Path(__file__).resolve().parents[2]
FIX = Path(os.environ.get("CLAWGYM_FIXTURES") or REPO.parent / "shared" / "fixtures")
SAMPLE = FIX / "clawgym_train_sample"
BACKEND = os.environ.get("CLAWGYM_TEST_SANDBOX") or ("bwrap" if shutil.which("bwrap") else "local")


def _dagster(args, env, cwd):
    exe = Path(sys.executable).with_name("dagster")
    cmd = [str(exe) if exe.exists() else "dagster", "asset", "materialize", "-m", "clawgym_assets.definitions", *args]
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return p


def test_materialize_verifiers_then_bench_by_partition(tmp_path):
    if not SAMPLE.is_dir():
        pytest.skip(f"ClawGym fixtures not found at {SAMPLE} (set CLAWGYM_FIXTURES)")
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    suite = tmp_path / "suite"  # three real fixture tasks, copied to a temp dir (never into the repo; a linked
    suite.mkdir()               # task folder is refused by the importers)
    for name in sorted(p.name for p in SAMPLE.iterdir() if p.is_dir())[:3]:
        shutil.copytree(SAMPLE / name, suite / name)
    data = tmp_path / "data"
    env = {**os.environ, "DAGSTER_HOME": str(home), "CLAWGYM_DATA": str(data), "CLAWGYM_SANDBOX": BACKEND,
           "HF_HUB_OFFLINE": "1", "DAGSTER_DISABLE_TELEMETRY": "1"}
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"""ops:
  synthetic_tasks: {{config: {{n: 6}}}}
  imported_tasks: {{config: {{folder: "{suite}"}}}}
""")
    _dagster(["--select", "*verifiers", "-c", str(cfg)], env, cwd=home)
    assert (home / "data" / "dagster" / "storage").is_dir()  # dagster.yaml put storage under data/dagster
    root = data / "lake"
    assert lk.read_table("tasks", {"source": "imported"}, root=root).num_rows == 3
    assert lk.read_table("tasks", {"source": "synthetic"}, root=root).num_rows == 6
    kinds = {(r["route"], r["kind"]) for r in lk.read_table("verifications", root=root).to_pylist()}
    assert kinds == {("imported", "noop"), ("procedural", "noop"), ("procedural", "oracle")}

    # an unknown dynamic partition is refused; `clawgym bench add` registers it
    p = subprocess.run([sys.executable, "-m", "clawgym.cli", "bench", "add", "oracle"], env=env, cwd=home,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    _dagster(["--select", "bench_tasks", "--partition", "procedural"], env, cwd=home)
    _dagster(["--select", "bench_scores", "--partition", "oracle"], env, cwd=home)
    rows = lk.read_table("bench_scores", {"model": "oracle"}, root=root).to_pylist()
    overall = [r for r in rows if r["category"] == "overall"]
    assert overall and overall[0]["mean"] == 100.0
