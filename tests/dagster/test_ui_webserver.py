"""UI test: dagster-webserver started by the test over an instance holding a real bench_scores
materialization; Debian's chromium (driven by playwright, no browser download) checks that the asset graph
shows every stage and that bench_scores has a materialization. Screenshots go to <repo>/data/ui/."""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CLAWGYM_CHROMIUM", "/usr/bin/chromium")
BACKEND = os.environ.get("CLAWGYM_TEST_SANDBOX") or ("bwrap" if shutil.which("bwrap") else "local")
STAGES = ["personas", "skills", "synthetic_tasks", "imported_tasks", "mock_workspaces", "verifiers", "trajectories",
          "steps", "sft_dataset", "base_model", "checkpoints", "bench_tasks", "bench_scores", "leaderboard"]

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def populated_home(tmp_path, monkeypatch):
    """A DAGSTER_HOME whose instance holds a noop bench_scores materialization on a tiny procedural suite."""
    import dagster as dg

    home, data = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("CLAWGYM_DATA", str(data))
    monkeypatch.chdir(home)  # dagster.yaml storage paths are relative to the working directory
    from test_dagster_graph import _families

    from clawgym_assets.definitions import ASSETS
    from clawgym_assets.defs.lake.resources import LakeResource
    from clawgym_assets.defs.rollouts.resources import SandboxResource
    from clawgym_assets.resources import default_resources

    res = {**default_resources(), "lake": LakeResource(data_dir=str(data)), "sandbox": SandboxResource(backend=BACKEND)}
    with dg.DagsterInstance.from_config(str(home)) as inst:
        dg.materialize(ASSETS, selection=["personas", "skills", "synthetic_tasks"], instance=inst, resources=res,
                       run_config={"ops": {"synthetic_tasks": {"config": {"n": 6, "families": _families()}}}})
        dg.materialize(ASSETS, selection=["bench_tasks"], partition_key="procedural", instance=inst, resources=res)
        inst.add_dynamic_partitions("model", ["noop"])
        dg.materialize(ASSETS, selection=["bench_scores"], partition_key="noop", instance=inst, resources=res)
    return home, data


def test_asset_graph_and_bench_scores_in_ui(populated_home):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"chromium not found at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    home, data = populated_home
    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "CLAWGYM_DATA": str(data), "DAGSTER_DISABLE_TELEMETRY": "1"}
    exe = Path(sys.executable).with_name("dagster-webserver")
    log = open(home / "webserver.log", "w")
    proc = subprocess.Popen([str(exe) if exe.exists() else "dagster-webserver", "-m", "clawgym_assets.definitions",
                             "-h", "127.0.0.1", "-p", str(port)], env=env, cwd=home, stdout=log,
                            stderr=subprocess.STDOUT)
    shots = REPO / "data" / "ui"
    shots.mkdir(parents=True, exist_ok=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 180
        while True:
            try:
                if httpx.get(f"{base}/server_info", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (home / "webserver.log").read_text()[-3000:]
            assert time.time() < deadline, "webserver did not come up"
            time.sleep(1)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1800, "height": 1100})
            page.set_default_timeout(90_000)
            page.goto(f"{base}/asset-groups")  # the global lineage (groups collapsed)
            page.wait_for_selector("text=Global asset lineage")
            page.wait_for_timeout(3000)
            page.screenshot(path=str(shots / "asset_graph.png"), full_page=True)
            seen = set()
            for group in ("synthesis", "rollouts", "training", "bench"):
                page.goto(f"{base}/locations/clawgym_assets.definitions/asset-groups/{group}")
                page.wait_for_selector(f"text={group}")
                page.wait_for_timeout(3000)
                page.screenshot(path=str(shots / f"group_{group}.png"), full_page=True)
                body = page.inner_text("body")
                seen |= {s for s in STAGES if s in body}
            missing = [s for s in STAGES if s not in seen]
            assert not missing, f"stages not shown in the asset graph: {missing}"
            page.goto(f"{base}/assets/bench_scores?view=partitions")
            page.wait_for_selector("text=Materialized (1)")
            page.get_by_text("noop").first.wait_for()
            page.goto(f"{base}/assets/bench_scores")
            page.wait_for_selector("text=Latest materialization")
            page.wait_for_timeout(3000)
            page.screenshot(path=str(shots / "bench_scores.png"), full_page=True)
            assert "Never materialized" not in page.inner_text("body")
            browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    assert (shots / "asset_graph.png").stat().st_size > 10_000
