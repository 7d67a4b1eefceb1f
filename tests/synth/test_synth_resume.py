"""`dagster asset materialize --select synthetic_tasks` with `route: llm` against a named endpoint, killed (SIGKILL to
the whole process group) part-way through, then materialized again: the second run pays only for the requests the
first did not finish (the content-addressed response cache in the lake answers the rest, counted in the asset's
metadata), and re-gates nothing the first run gated.

The endpoint is a local OpenAI-compatible FastAPI server (0.25 s per request) answering with gate-passing task specs,
one per candidate; the real openai client, the real gates (sandbox backend of the machine) and the real CLI run.
"""

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

fastapi = pytest.importorskip("fastapi")

from clawgym.agent.servers import ServerThread, completion_json  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BACKEND = os.environ.get("CLAWGYM_TEST_SANDBOX") or ("bwrap" if shutil.which("bwrap") else "local")
N = 16  # candidates; each costs 3 requests (generate, review, audit) when nothing needs repair

CODE = '''import json, os

def grade(transcript, workspace_path):
    try:
        v = json.load(open(os.path.join(workspace_path, "output/total.json")))["total"]
    except Exception:
        return {"total": 0.0}
    return {"total": 1.0 if v == WANT else 0.0}
'''


def spec(token: int) -> dict:
    nums = [token % 97 + 3, token % 13 + 1, 7]
    return {"instruction": f"Add up the numbers in input/nums.csv and write output/total.json as {{\"total\": <sum>}}."
                           f" Ticket {token}.",
            "subcategory": "data analysis and calculation", "difficulty": 2,
            "workspace_files": [{"path": "input/nums.csv", "content": "n\n" + "\n".join(map(str, nums)) + "\n"}],
            "output_paths": ["output/total.json"], "verifier_code": CODE.replace("WANT", str(sum(nums))),
            "rubric": [], "reference_outputs": [{"path": "output/total.json",
                                                 "content": json.dumps({"total": sum(nums)})}]}


class Slow:
    def __init__(self, latency: float):
        self.latency, self.lock, self.by_schema = latency, threading.Lock(), {}

    def total(self) -> int:
        with self.lock:
            return sum(self.by_schema.values())

    def app(self):
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse

        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            name = body["response_format"]["json_schema"]["name"]
            await asyncio.sleep(self.latency)
            if name == "task_spec":
                out = spec(int(re.search(r"Variation token: (\d+)", body["messages"][-1]["content"]).group(1)))
            elif name == "task_review":
                out = {"pass": True, "coverage_pass": True, "issues": [], "missing_task_requirements": [],
                       "weak_or_incorrect_checks": [], "repair_guidance": ""}
            else:
                out = {"pass": True, "factual_errors": [], "answer_leak": False, "leaked_text": ""}
            with self.lock:  # counted when answered: a request cut by the kill is not a finished one
                self.by_schema[name] = self.by_schema.get(name, 0) + 1
            return JSONResponse(completion_json({"role": "assistant", "content": json.dumps(out)}, body["model"],
                                                {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}))

        return app


def _cmd(cfg: Path) -> list[str]:
    exe = Path(sys.executable).with_name("dagster")
    return [str(exe) if exe.exists() else "dagster", "asset", "materialize", "-m", "clawgym_assets.definitions",
            "--select", "personas,skills,synthetic_tasks", "-c", str(cfg)]


def _metadata(home: Path, monkeypatch) -> dict:
    import dagster as dg

    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.chdir(home)  # dagster.yaml keeps its storage under ./data/dagster
    with dg.DagsterInstance.get() as inst:
        ev = inst.get_latest_materialization_event(dg.AssetKey("synthetic_tasks"))
        return {k: v.value for k, v in ev.asset_materialization.metadata.items()}


def test_llm_route_resumes_after_kill_without_repeating_requests(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    data = tmp_path / "data"
    cfg = tmp_path / "run.yaml"
    cfg.write_text("ops:\n  personas: {config: {n: 4}}\n"
                   f"  synthetic_tasks: {{config: {{route: llm, n_llm: {N}, skill_fraction: 0.0, generator: gen,"
                   " categories: [analysis_reasoning], max_in_flight: 2, max_repairs: 0}}\n")
    stub = Slow(latency=0.25)
    with ServerThread(stub.app()) as srv:
        env = {**os.environ, "DAGSTER_HOME": str(home), "CLAWGYM_DATA": str(data), "CLAWGYM_SANDBOX": BACKEND,
               "HF_HUB_OFFLINE": "1", "DAGSTER_DISABLE_TELEMETRY": "1",
               "CLAWGYM_ENDPOINTS": json.dumps([{"name": "gen", "base_url": srv.base_url, "model": "gen-model"}])}
        # run 1: killed once a third of the work is answered
        p = subprocess.Popen(_cmd(cfg), env=env, cwd=home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
        deadline = time.monotonic() + 300
        while stub.total() < N and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.poll() is None, "run 1 ended before it could be killed:\n" + p.stdout.read().decode()[-3000:]
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)
        p.stdout.close()
        time.sleep(0.5)  # requests cut by the kill finish on the server side (counted, never cached)
        first = stub.total()
        cached = [f for f in (data / "cache" / "llm").rglob("*.json") if "gates" not in f.parts]
        assert N <= first < 3 * N and len(cached) >= first - 2  # at most max_in_flight answers lost in flight

        # run 2: completes; only the requests run 1 did not finish reach the endpoint
        p2 = subprocess.run(_cmd(cfg), env=env, cwd=home, capture_output=True, text=True, timeout=600)
        assert p2.returncode == 0, p2.stdout[-3000:] + p2.stderr[-6000:]
        second = stub.total() - first
    md = _metadata(home, monkeypatch)
    assert "llm" in md, sorted(md)
    llm = md["llm"]
    assert llm["candidates"] == N and llm["accepted"] == N
    assert md["llm_cache_hits"] == len(cached) and md["llm_requests"] == second
    assert second + len(cached) == 3 * N  # every request paid once, except those cut by the kill
    assert llm["gates"]["cache_hits"] >= 1  # candidates gated in run 1 are not gated again
    assert llm["gates"]["gated"] + llm["gates"]["cache_hits"] == N
    gc = md["gate_counts"]["persona"]["analysis_reasoning"]
    assert gc["candidates"] == N and gc["passed"]["audit"] == N
