"""LLM route at scale: overlapping requests, the content-addressed response cache, 429 retries, token stats.

A local OpenAI-compatible FastAPI stub (ServerThread) answers after a small latency with the gate-passing spec
of tests/synth/test_synth_llm.py; it counts requests and the most requests it saw at once. The REAL openai client
and the real gates (local sandbox factory) run.
"""

import asyncio
import json
import os
import re

import pytest

openai = pytest.importorskip("openai")
fastapi = pytest.importorskip("fastapi")

from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402
from test_synth_llm import spec  # noqa: E402  # tests/ is on sys.path (pytest prepend import mode)

from clawgym.agent.servers import ServerThread  # noqa: E402
from clawgym.synth.llm_cache import ResponseCache, request_key  # noqa: E402
from clawgym.synth.llm_route import generate_llm_tasks  # noqa: E402


class Stub:
    """Accepting stub: every spec passes the gates, every review and audit passes."""

    def __init__(self, latency: float = 0.0, fail_first: int = 0, fail_status: int = 429,
                 usage: tuple[int, int] = (10, 10)):
        self.latency, self.fail_first, self.fail_status, self.usage = latency, fail_first, fail_status, usage
        self.requests: list[dict] = []
        self.failed = 0
        self.current = 0
        self.peak = 0

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            self.requests.append(body)
            self.current += 1
            self.peak = max(self.peak, self.current)
            try:
                await asyncio.sleep(self.latency)
                if self.failed < self.fail_first:
                    self.failed += 1
                    return JSONResponse({"error": {"message": "slow down", "type": "rate_limit"}},
                                        status_code=self.fail_status, headers={"retry-after-ms": "20"})
                return JSONResponse(self.reply(body))
            finally:
                self.current -= 1

        return app

    def reply(self, body: dict) -> dict:
        name = body["response_format"]["json_schema"]["name"]
        if name == "task_spec":  # unique per candidate (its variation token), so no two reviews are identical
            token = re.search(r"Variation token: (\d+)", body["messages"][-1]["content"])
            out = spec(f"case-good {token.group(1) if token else ''}")
        elif name == "task_review":
            out = {"pass": True, "coverage_pass": True, "issues": [], "missing_task_requirements": [],
                   "weak_or_incorrect_checks": [], "repair_guidance": ""}
        else:
            out = {"pass": True, "factual_errors": [], "answer_leak": False, "leaked_text": ""}
        pt, ct = self.usage
        return {"id": f"cmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
                "model": body.get("model", "m"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": json.dumps(out)}}],
                "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}}


PERSONAS = [{"persona_id": f"p{i}", "name": f"persona {i}", "role": "analyst"} for i in range(6)]
TAX = [("analysis_reasoning", "data analysis and calculation")]


def run(url: str, factory, n: int, **kw):
    cfg = {"base_url": url, "model": "stub", "max_retries": kw.pop("max_retries", 2), "timeout_s": 30,
           **kw.pop("cfg", {})}
    return generate_llm_tasks(PERSONAS, [], TAX, cfg, n=n, factory=factory, max_repairs=1, return_stats=True, **kw)


def test_requests_overlap_and_respect_the_limit(local_factory):
    stub = Stub(latency=0.3)
    with ServerThread(stub.app()) as srv:
        acc, rej, stats = run(srv.base_url, local_factory, n=8, max_in_flight=8)
        assert not rej and len(acc) == 8
        assert [t.persona_id for t in acc] == [f"p{i % 6}" for i in range(8)]  # candidate order kept
        assert stub.peak >= 4, stub.peak  # the requests really overlapped at the server
        assert 4 <= stats["peak_in_flight"] <= 8
        assert len(stub.requests) == stats["requests"] == 24  # gen + review + audit per candidate

        stub.peak = 0
        acc, rej, stats = run(srv.base_url, local_factory, n=6, max_in_flight=2)
        assert len(acc) == 6 and stub.peak <= 2 and stats["peak_in_flight"] == 2


def test_cache_rerun_makes_no_request_and_ignores_base_url(local_factory, tmp_path):
    cache = tmp_path / "llm_cache"
    stub = Stub(latency=0.05)
    with ServerThread(stub.app()) as srv:
        acc1, rej1, s1 = run(srv.base_url, local_factory, n=4, cache_dir=str(cache), seed=3)
        assert not rej1 and len(acc1) == 4
        assert s1["cache_hits"] == 0 and s1["cache_misses"] == s1["requests"] == len(stub.requests) == 12
        # one small file per response, content-addressed: <aa>/<sha256>.json, no temp files left
        files = sorted(p for p in cache.rglob("*") if p.is_file() and "gates" not in p.parts)
        assert len(files) == 12 and all(p.parent.name == p.stem[:2] and len(p.stem) == 64 for p in files)
        # the gate verdicts, content-addressed under gates/: one per distinct candidate, computed in batches
        verdicts = [p for p in (cache / "gates").rglob("*.json")]
        assert len(verdicts) == s1["gates"]["gated"] == 4 and 1 <= s1["gates"]["batches"] <= 4
        body = stub.requests[0]
        key = request_key(body)
        hit = ResponseCache(cache).get(key)  # the key is the sha256 of the very body the endpoint received
        assert hit is not None and hit["model"] == "stub"
        assert json.loads(hit["content"]) == json.loads(stub.reply(body)["choices"][0]["message"]["content"])

        seen = len(stub.requests)
        acc2, rej2, s2 = run(srv.base_url, local_factory, n=4, cache_dir=str(cache), seed=3)
        assert len(stub.requests) == seen  # 0 requests on the re-run
        assert s2["requests"] == 0 and s2["cache_hits"] == 12 and s2["cache_misses"] == 0
        assert [t.model_dump() for t in acc2] == [t.model_dump() for t in acc1]
        assert s2["prompt_tokens"] == 0 and s2["cached_prompt_tokens"] == s1["prompt_tokens"]
        assert s2["gates"] == {"gated": 0, "batches": 0, "cache_hits": 4}  # nothing re-gated either

        # another seed = other prompts: misses again
        _, _, s3 = run(srv.base_url, local_factory, n=1, cache_dir=str(cache), seed=4)
        assert s3["cache_misses"] == 3 and len(stub.requests) == seen + 3

    other = Stub()  # same model, another endpoint: the key does not include the base_url
    with ServerThread(other.app()) as srv2:
        acc3, _, s4 = run(srv2.base_url, local_factory, n=4, cache_dir=str(cache), seed=3)
        assert other.requests == [] and s4["cache_hits"] == 12 and len(acc3) == 4
        _, _, s5 = run(srv2.base_url, local_factory, n=1, cache_dir=str(cache), seed=3, cfg={"model": "other"})
        assert s5["cache_hits"] == 0 and len(other.requests) == 3  # the model name is part of the key


def test_cache_writes_are_atomic_and_tolerate_garbage(tmp_path):
    c = ResponseCache(tmp_path)
    k = request_key({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7})
    assert k != request_key({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.2})
    assert c.get(k) is None
    c.put(k, {"content": "{}", "usage": {"prompt_tokens": 1, "completion_tokens": 2}})
    assert c.get(k)["usage"] == {"prompt_tokens": 1, "completion_tokens": 2}
    assert os.listdir(c.path(k).parent) == [f"{k}.json"]  # the temp file was renamed into place
    c.path(k).write_text("{truncated")
    assert c.get(k) is None  # an unreadable entry is a miss, never a crash


@pytest.mark.parametrize("status", [429, 503])
def test_429_and_5xx_are_retried(local_factory, status):
    stub = Stub(fail_first=1, fail_status=status)
    with ServerThread(stub.app()) as srv:
        acc, rej, stats = run(srv.base_url, local_factory, n=1, max_retries=2)
        assert not rej and len(acc) == 1
        assert stub.failed == 1 and len(stub.requests) == 4  # 1 failure + gen, review, audit
        assert stub.requests[0]["messages"] == stub.requests[1]["messages"]
        assert stats["requests"] == 3 and stats["errors"] == 0

        stub.failed, stub.fail_first = 0, 5
        acc, rej, stats = run(srv.base_url, local_factory, n=1, max_retries=1)
        assert not acc and rej[0]["reason"] == "llm_error" and stats["errors"] == 1 and stub.failed == 2


def test_stats_count_tokens_and_cost_per_accepted_task(local_factory):
    stub = Stub(usage=(100, 50))
    with ServerThread(stub.app()) as srv:
        acc, rej, stats = run(srv.base_url, local_factory, n=2, cfg={"price_per_1k_tokens": 2.0})
        assert len(acc) == 2 and not rej
        assert stats["prompt_tokens"] == 600 and stats["completion_tokens"] == 300 and stats["total_tokens"] == 900
        assert stats["tokens_per_accepted_task"] == 450
        assert stats["cost"] == pytest.approx(1.8) and stats["cost_per_accepted_task"] == pytest.approx(0.9)
        assert acc[0].source["llm"]["usage"] == {"prompt_tokens": 300, "completion_tokens": 150}

        _, _, s2 = run(srv.base_url, local_factory, n=1,
                       cfg={"price_per_1k_prompt": 1.0, "price_per_1k_completion": 4.0})
        assert s2["cost"] == pytest.approx((300 * 1.0 + 150 * 4.0) / 1000)
        _, _, s3 = run(srv.base_url, local_factory, n=1)
        assert "cost" not in s3 and s3["prompt_tokens"] == 300
