"""Throughput of the LLM synthesis route against a slow OpenAI-compatible endpoint.

    python benchmarks/llm_synth_throughput.py [--n 640] [--latency 2] [--in-flight 32] [--servers 3|1]
                                              [--backend bwrap|local|docker] [--cache-rerun]

A local stub (FastAPI in a thread) answers every chat request after `--latency` seconds with a valid,
gate-passing task spec (the shape of tests/synth/test_synth_llm.py's scripted replies, unique per candidate) and
accepting review / audit replies. The real route runs: the real openai client, `max_in_flight` overlapping
requests, and the real gates (noop / scaffold / oracle verifier runs in the sandbox factory).

Prints candidate tasks/s against the ideal (in-flight / latency), their ratio, requests/s and the most requests
each stub saw at once. Every candidate costs 3 sequential requests (generate, review, audit). With `--servers 3`
(default) the generator, reviewer and auditor are three endpoints (three stubs), each with `--in-flight` requests
overlapping at most, so the pipeline's ideal is in-flight / latency candidates/s; with `--servers 1` all three
roles share one server's in-flight budget and the ideal is a third of that. The gates (batched in the sandbox)
are included. `--cache-rerun` repeats the run over the response and gate caches (0 requests, 0 gate runs).
No ``from __future__ import annotations`` here: FastAPI reads the endpoint annotations.
"""

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

GOOD_CODE = '''import json, os

def grade(transcript, workspace_path):
    try:
        data = json.load(open(os.path.join(workspace_path, "output/total.json")))
        v = data["total"]
    except Exception:
        return {"total": 0.0, "is_int": 0.0}
    return {"total": 1.0 if v == 42 else 0.0, "is_int": 1.0 if isinstance(v, int) and v == 42 else 0.0}
'''


def good_spec(token: str) -> dict:
    """A gate-passing spec (noop 0, scaffold 0, oracle 1, no leak), unique through `token`."""
    return {
        "instruction": f"Add up the numbers in input/nums.csv and write output/total.json as {{\"total\": <sum>}}. "
                       f"[batch {token}]",
        "subcategory": "data analysis and calculation",
        "difficulty": 2,
        "workspace_files": [{"path": "input/nums.csv", "content": "n\n10\n12\n20\n"},
                            {"path": "notes/old.txt", "content": "stale numbers: 1 2 3\n"}],
        "output_paths": ["output/total.json"],
        "verifier_code": GOOD_CODE,
        "rubric": [],
        "reference_outputs": [{"path": "output/total.json", "content": "{\"total\": 42}\n"}],
    }


class SlowStub:
    """Chat-completions stub with a fixed latency; counts requests and the peak of concurrent requests."""

    def __init__(self, latency: float):
        self.latency = latency
        self.requests = 0
        self.current = 0
        self.peak = 0

    def app(self):
        """The FastAPI app."""
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse

        app = FastAPI()

        async def chat(request: Request):
            body = await request.json()
            self.requests += 1
            self.current += 1
            self.peak = max(self.peak, self.current)
            try:
                await asyncio.sleep(self.latency)
                return JSONResponse(self.reply(body))
            finally:
                self.current -= 1

        async def stats():
            out = {"requests": self.requests, "peak": self.peak}
            self.peak = 0
            return JSONResponse(out)

        app.add_api_route("/v1/chat/completions", chat, methods=["POST"])
        app.add_api_route("/stats", stats, methods=["GET"])  # counters, and resets the peak
        return app

    @staticmethod
    def reply(body: dict) -> dict:
        """Accepting replies for task_spec / task_review / task_audit."""
        name = body["response_format"]["json_schema"]["name"]
        if name == "task_spec":
            m = re.search(r"Variation token: (\d+)", body["messages"][-1]["content"])
            out = good_spec(m.group(1) if m else "0")
        elif name == "task_review":
            out = {"pass": True, "coverage_pass": True, "issues": [], "missing_task_requirements": [],
                   "weak_or_incorrect_checks": [], "repair_guidance": ""}
        else:
            out = {"pass": True, "factual_errors": [], "answer_leak": False, "leaked_text": ""}
        content = json.dumps(out)
        prompt = sum(len(m["content"]) for m in body["messages"]) // 4
        return {"id": "cmpl-stub", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "stub"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": len(content) // 4,
                          "total_tokens": prompt + len(content) // 4}}


def _serve_stub(latency: float, ports) -> None:
    """A stub server in its own process (so that its CPU does not compete with the route for one GIL)."""
    from clawgym.agent.servers import ServerThread

    srv = ServerThread(SlowStub(latency).app()).start()
    ports.put(srv.port)
    threading.Event().wait()


class StubProcess:
    """A SlowStub served by a child process; `stats()` reads its counters over HTTP."""

    def __init__(self, latency: float):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        self.proc = ctx.Process(target=_serve_stub, args=(latency, q), daemon=True)
        self.proc.start()
        self.base_url = f"http://127.0.0.1:{q.get(timeout=60)}/v1"

    def stats(self) -> dict:
        """{"requests": total so far, "peak": most concurrent since the last call}."""
        import urllib.request

        with urllib.request.urlopen(self.base_url[:-3] + "/stats", timeout=10) as r:
            return json.loads(r.read())

    def close(self) -> None:
        """Stop the child."""
        self.proc.terminate()
        self.proc.join(10)


def main() -> None:
    """Run the benchmark and print the throughput report."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=640, help="candidate tasks")
    ap.add_argument("--latency", type=float, default=2.0, help="stub latency per request (s)")
    ap.add_argument("--in-flight", type=int, default=32, help="requests overlapping at most, per server")
    ap.add_argument("--servers", type=int, default=3, choices=[1, 3],
                    help="3: generator, reviewer, auditor on their own endpoints; 1: one endpoint for all")
    ap.add_argument("--backend", default="bwrap", choices=["local", "bwrap", "docker", "auto"])
    ap.add_argument("--gate-workers", type=int, default=2, help="gate batches at once")
    ap.add_argument("--cache-rerun", action="store_true", help="run twice over a fresh response cache")
    a = ap.parse_args()

    from clawgym.sandbox import get_factory, host_settings
    from clawgym.sandbox.base import SandboxConfig
    from clawgym.synth.llm_route import generate_llm_tasks

    personas = [{"persona_id": f"bench-{i}", "name": f"persona {i}", "role": "analyst", "domain": "retail"}
                for i in range(16)]
    taxonomy = [("analysis_reasoning", "data analysis and calculation")]
    stubs = [StubProcess(a.latency) for _ in range(a.servers)]
    factory = get_factory(a.backend, SandboxConfig(**host_settings(os.environ)))
    try:
        with tempfile.TemporaryDirectory(prefix="llm_cache_") as cache:
            cfgs = [{"base_url": st.base_url, "model": "stub", "max_retries": 2, "timeout_s": 60,
                     "price_per_1k_tokens": 0.001, "max_in_flight": a.in_flight} for st in stubs]
            gen, rev, aud = (cfgs * 3)[:3] if a.servers == 1 else cfgs
            for r in range(2 if a.cache_rerun else 1):
                before = sum(x.stats()["requests"] for x in stubs)
                t0 = time.perf_counter()
                acc, rej, st = generate_llm_tasks(personas, [], taxonomy, gen, n=a.n, route="persona",
                                                  max_repairs=1, factory=factory, reviewer=rev, auditor=aud,
                                                  gate_workers=a.gate_workers,
                                                  return_stats=True, cache_dir=cache if a.cache_rerun else None)
                wall = time.perf_counter() - t0
                after = [x.stats() for x in stubs]
                report(a, r, acc, rej, st, wall, sum(x["requests"] for x in after) - before,
                       [x["peak"] for x in after])
    finally:
        for x in stubs:
            x.close()
    factory.close()


def report(a, r: int, acc, rej, st: dict, wall: float, reqs: int, peaks: list) -> None:
    """Print one run's figures."""
    if rej:
        print(f"  first rejection: {rej[0]['reason']}: {rej[0]['detail'][:300]}")
    per_server = a.in_flight / a.latency
    per_cand = (reqs / a.n) if reqs else 3.0
    ideal_cand = per_server * a.servers / per_cand
    cps = a.n / wall
    label = "cached re-run" if r == 1 else f"backend={a.backend}, {a.servers} server(s)"
    print(f"[{label}] {a.n} candidates, {len(acc)} accepted, {len(rej)} rejected "
          f"{st['rejected_by_reason'] or ''} in {wall:.1f}s")
    print(f"  candidate tasks/s       : {cps:.2f}  (in-flight/latency = {a.in_flight}/{a.latency:g}s = "
          f"{per_server:.1f}/s; ratio {cps / per_server:.2f})")
    if reqs:
        print(f"  requests/s              : {reqs / wall:.2f} over {a.servers} server(s) "
              f"(ideal {per_server * a.servers:.1f}/s; ratio {reqs / wall / (per_server * a.servers):.2f})")
        print(f"  requests per candidate  : {per_cand:.2f}  -> ideal candidate tasks/s = {ideal_cand:.2f}; "
              f"ratio {cps / ideal_cand:.2f}")
    else:
        print("  requests                : 0 (every reply from the response cache)")
    print(f"  max concurrent per stub : {peaks}  (route peak_in_flight {st['peak_in_flight']})")
    print(f"  gates                   : {st['gates']}")
    print(f"  requests {st['requests']}, cache hits {st['cache_hits']}, misses {st['cache_misses']}; "
          f"tokens/accepted task {st['tokens_per_accepted_task'] or 0:.0f}, "
          f"cost/accepted task {st.get('cost_per_accepted_task') or 0:.6f}")


if __name__ == "__main__":
    main()
