"""Bounded records: nothing the model sends may make a stored rollout unbounded.

A scripted hostile endpoint (tests/hostile_endpoint.py, a real local OpenAI-compatible server; huge bodies are
streamed by it in pieces so that only the client's memory grows) plays, through the real ``run_rollout`` on
bwrap and docker: 10,000 tool calls in one reply, a 50 MB assistant text, a 50 MB tool-call argument, and
the same shapes just over the per-message caps (under the reply-body cap), and a transcript that outgrows
``max_record_bytes`` turn by turn. Each ends as `limit`, scored (the workspace as it is is verified: the
first turn writes the right answer), with an error naming the cap; the row from ``to_row()`` stays under
the record cap and the test process's RSS grows by a bounded amount (printed; run with -s to see).

Without sandboxes: ``bound_messages`` / ``bound_record`` / the ``to_row`` guard on synthetic rollouts, and the
recording proxy's caps (clawgym.agent.proxy) on direct requests, plain and streamed.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hostile_endpoint import FILL, HostileEndpoint, exec_call, write_call  # noqa: E402

from clawgym.agent.loop import TRUNCATED_KEY, Limits, bound_messages  # noqa: E402
from clawgym.agent.policies import RetryPolicy  # noqa: E402
from clawgym.agent.rollout import Rollout, RolloutSettings, bound_record, run_rollout  # noqa: E402
from clawgym.tasks import File, Task, Verifier  # noqa: E402

pytestmark = pytest.mark.rule("rollout_bounded")  # tests/attack_rules.py

FAST_RETRY = RetryPolicy(attempts=2, backoff_s=0.05, max_backoff_s=0.1, timeout_s=60)
MB = 1_000_000
GRADE = r'''
import pathlib
def grade(transcript, workspace_path):
    a = pathlib.Path(workspace_path) / "answer.txt"
    return {"answer": a.is_file() and a.read_text().strip() == "42"}
'''
WRITE_ANSWER = [write_call("answer.txt", "42\n")]  # turn 1: the task, done right


def _task() -> Task:
    return Task(task_id="bounds", instruction="Write 42 to answer.txt.",
                files=[File(path="README.md", content=b"# bounds\n")],
                verifier=Verifier(kind="grade", code=GRADE, timeout_s=60))


@pytest.fixture(scope="module", params=["bwrap", "docker"])
def backend(request):
    """(name, factory): the session factories of tests/conftest.py (skipped when the backend cannot run)."""
    return request.param, request.getfixturevalue(f"{request.param}_factory")


class PeakRSS:
    """The test process's RSS sampled every 5 ms while the block runs: `growth` = peak - start, bytes."""

    def __enter__(self):
        self.proc = psutil.Process()
        self.start = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.005)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def growth(self) -> int:
        return self.peak - self.start


def _row_bytes(row: dict) -> int:
    return sum(len(v.encode("utf-8", "surrogatepass")) for v in row.values() if isinstance(v, str))


def _play(backend, steps, final="Done.", fill_chars=0, limits=None):
    name, factory = backend
    limits = limits or Limits(max_turns=6, max_wall_s=240)
    with HostileEndpoint(steps, final=final, fill_chars=fill_chars) as ep, PeakRSS() as mem:
        t0 = time.monotonic()
        ro = run_rollout(_task(), ep.endpoint, factory,
                         settings=RolloutSettings(limits=limits, attempts=1, retry=FAST_RETRY))
        wall = time.monotonic() - t0
    row = ro.to_row()
    print(f"\n[{name}] class={ro.failure_class} score={ro.score} wall={wall:.1f}s "
          f"row={_row_bytes(row) / MB:.2f} MB messages_json={len(row['messages_json']) / MB:.2f} MB "
          f"rss_growth={mem.growth / MB:.1f} MB filler_sent={ep.bytes_sent / MB:.1f} MB error={ro.error!r}")
    assert ro.failure_class == "limit", (ro.failure_class, ro.error)
    assert ro.score == 1.0, "the workspace as it was is verified: turn 1 did the task"
    assert len(row["messages_json"].encode()) <= limits.max_record_bytes
    assert _row_bytes(row) < limits.max_record_bytes + MB
    assert row["failure_class"] == "limit"
    return ro, row, mem, ep


def _assistant(ro: Rollout, i: int = -1) -> dict:
    return [m for m in ro.messages if m.get("role") == "assistant"][i]


def test_ten_thousand_tool_calls_in_one_turn(backend):
    ro, row, mem, _ = _play(backend, [WRITE_ANSWER, [exec_call("touch ran.txt")] * 10_000])
    assert "max_tool_calls_per_turn=32" in ro.error
    last = _assistant(ro)
    assert len(last["tool_calls"]) == 32
    assert last[TRUNCATED_KEY]["tool_calls"] == {"received": 10_000, "kept": 32}
    results = [m for m in ro.messages if m.get("role") == "tool"]
    assert len(results) == 1 + 32 and all(m["content"].startswith("Not run") for m in results[1:])
    assert not any(d["path"] == "ran.txt" for d in ro.workspace_diff), "a call of the cut reply ran"
    assert ro.tool_calls == 33 and len(ro.tool_durations) == 33
    assert len(row["messages_json"]) < 100_000


def test_fifty_mb_text_is_not_read_past_the_reply_cap(backend):
    ro, row, mem, ep = _play(backend, [WRITE_ANSWER], final=FILL, fill_chars=50 * MB)
    assert "max_response_bytes" in ro.error
    assert mem.growth < 48 * MB, "the client read the whole 50 MB body"
    assert len(row["messages_json"]) < 100_000


def test_text_over_the_message_cap_is_stored_cut(backend):
    ro, row, mem, _ = _play(backend, [WRITE_ANSWER], final=FILL, fill_chars=1 * MB)
    assert "max_message_chars=65536" in ro.error
    last = _assistant(ro)
    assert len(last["content"]) == 65_536
    assert last[TRUNCATED_KEY]["content"] == {"chars": 1 * MB, "kept": 65_536}


def test_fifty_mb_argument_is_not_read_past_the_reply_cap(backend):
    ro, row, mem, ep = _play(backend, [WRITE_ANSWER, [write_call("big.txt", FILL)]], fill_chars=50 * MB)
    assert "max_response_bytes" in ro.error
    assert mem.growth < 48 * MB, "the client read the whole 50 MB body"
    assert not any(d["path"] == "big.txt" for d in ro.workspace_diff)


def test_argument_over_the_argument_cap_is_stored_cut_and_not_run(backend):
    ro, row, mem, _ = _play(backend, [WRITE_ANSWER, [write_call("big.txt", FILL)]], fill_chars=1 * MB)
    assert "max_argument_chars=262144" in ro.error
    call = _assistant(ro)["tool_calls"][0]
    assert len(call["function"]["arguments"]) == 262_144
    assert _assistant(ro)[TRUNCATED_KEY]["arguments"][0]["kept"] == 262_144
    assert not any(d["path"] == "big.txt" for d in ro.workspace_diff), "the cut call ran"


def test_transcript_over_the_record_cap_drops_its_middle(backend):
    # each turn prints 40 KB (tool results are capped at 50 KB each): a 300 KB record cap is hit in ~8 turns
    spam = exec_call("head -c 30000 /dev/zero | tr '\\0' y")
    limits = Limits(max_turns=40, max_wall_s=240, max_record_bytes=300_000)
    ro, row, mem, _ = _play(backend, [WRITE_ANSWER] + [[spam]] * 30, limits=limits)
    assert ro.error.startswith("record size limit (300000 bytes)")
    markers = [m for m in ro.messages if TRUNCATED_KEY in m and "dropped_messages" in m[TRUNCATED_KEY]]
    assert len(markers) == 1 and ro.messages[2] is not None and ro.messages[2] == markers[0]
    assert ro.messages[0]["role"] == "system" and ro.messages[1]["role"] == "user"
    assert ro.messages[3]["role"] == "assistant", "the kept tail starts at a call, never at an orphan result"
    assert len(row["messages_json"].encode()) <= 300_000


# ---- without sandboxes -------------------------------------------------------------------------------------
def _conversation(n_turns: int, result_chars: int) -> list[dict]:
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "do it"}]
    for i in range(n_turns):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "exec", "arguments": '{"command": "ls"}'}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "name": "exec", "content": "é" * result_chars})
    msgs.append({"role": "assistant", "content": "done"})
    return msgs


def test_bound_messages_keeps_head_and_tail_and_pairs():
    msgs = _conversation(200, 5000)
    assert bound_messages(msgs, 100 * MB) == (msgs, None)
    out, dropped = bound_messages(msgs, 200_000)
    size = len(json.dumps(out, ensure_ascii=False).encode())
    assert size <= 200_000 and dropped["dropped_messages"] > 100
    assert out[:2] == msgs[:2] and out[-1] == msgs[-1] and out[2][TRUNCATED_KEY] == dropped
    assert out[3]["role"] == "assistant"
    one = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
           {"role": "assistant", "content": "x" * 5 * MB}]
    out, dropped = bound_messages(one, 100_000)
    assert len(json.dumps(out).encode()) <= 100_000 and out[-1][TRUNCATED_KEY]["message_bytes"] > 5 * MB


def test_bound_record_and_the_to_row_guard():
    msgs = _conversation(400, 50_000)  # ~40 MB of UTF-8
    ro = Rollout(task_id="t", policy="p", messages=msgs, tool_calls=400, tool_durations=[0.1] * 400,
                 failure_class="ok", score=1.0,
                 workspace_diff=[{"path": f"f{i:07d}", "change": "added", "size": 1} for i in range(200_000)])
    row = ro.to_row()  # the guard alone, on an unbounded Rollout
    assert len(row["messages_json"].encode()) <= Limits().max_record_bytes
    assert row["failure_class"] == "limit" and row["error"].startswith("record size limit")
    assert ro.failure_class == "ok", "to_row does not change the Rollout"
    limits = Limits(max_record_bytes=1 * MB)
    bound_record(ro, limits)
    assert ro.failure_class == "limit" and ro.score == 1.0 and ro.error.startswith("record size limit (1000000")
    assert ro.tool_calls == len(ro.tool_durations) < 400
    assert ro.workspace_diff[-1]["change"] == "unlisted"
    row = ro.to_row(max_record_bytes=limits.max_record_bytes)
    assert len(row["messages_json"].encode()) <= 1 * MB and len(row["diff_json"]) <= MB // 8
    infra = Rollout(task_id="t", policy="p", messages=_conversation(100, 50_000), failure_class="infra",
                    error="sandbox: died")
    bound_record(infra, limits)
    assert infra.failure_class == "infra" and infra.score is None and "sandbox: died" in infra.error


# ---- the recording proxy (OpenClaw runtime) ----------------------------------------------------------------
class _StreamingUpstream:
    """A streaming chat-completions upstream: `deltas` SSE chunks made by `make(i)`."""

    def __init__(self, n: int, make):
        from fastapi import FastAPI
        from fastapi.responses import StreamingResponse

        from clawgym.agent.servers import ServerThread

        self.sent = 0
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat():  # noqa: ANN202
            async def gen():
                for i in range(n):
                    self.sent += 1
                    d = {"id": "c", "object": "chat.completion.chunk", "model": "m",
                         "choices": [{"index": 0, "delta": make(i), "finish_reason": None}]}
                    yield "data: " + json.dumps(d) + "\n\n"
                yield "data: [DONE]\n\n"
            return StreamingResponse(gen(), media_type="text/event-stream")

        self.srv = ServerThread(app)

    def __enter__(self):
        self.srv.start()
        return self

    def __exit__(self, *exc):
        self.srv.stop()


def _post(url: str, body: dict, stream: bool = False) -> tuple[int, str]:
    with httpx.Client(timeout=60) as c:
        r = c.post(url + "/chat/completions", json={**body, "stream": stream})
        return r.status_code, r.text


REQ = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_proxy_caps_plain_replies(tmp_path):
    from clawgym.agent.proxy import RecordingProxy, read_log

    log = tmp_path / "p.jsonl"
    calls = [exec_call("true")] * 10_000
    with HostileEndpoint([calls]) as ep, RecordingProxy(ep._srv.base_url, str(log), bounds=Limits()) as px, \
            PeakRSS() as mem:
        st, text = _post(px.base_url, REQ)
        st2, text2 = _post(px.base_url, {**REQ, "messages": REQ["messages"] + [{"role": "assistant", "content": "x"}]})
    assert st == 200 and "max_tool_calls_per_turn=32" in json.loads(text)["choices"][0]["message"]["content"]
    assert st2 == 200 and "[clawgym]" in text2 and len(ep.requests) == 1, "after a cap every request is stopped"
    e = [x for x in read_log(str(log)) if not x.get("kind")]
    msg = e[0]["response"]["choices"][0]["message"]
    assert "max_tool_calls_per_turn" in e[0]["limit"] and len(msg["tool_calls"]) == 32
    assert msg[TRUNCATED_KEY]["tool_calls"]["received"] == 10_000
    print(f"\n[proxy plain 10k calls] log={log.stat().st_size / MB:.2f} MB rss_growth={mem.growth / MB:.1f} MB")

    log2 = tmp_path / "p2.jsonl"
    with HostileEndpoint([], final=FILL, fill_chars=50 * MB) as ep, \
            RecordingProxy(ep._srv.base_url, str(log2), bounds=Limits()) as px, PeakRSS() as mem:
        st, text = _post(px.base_url, REQ)
    assert st == 200 and "max_response_bytes" in text
    assert log2.stat().st_size < 100_000
    print(f"[proxy plain 50 MB text] log={log2.stat().st_size / MB:.3f} MB rss_growth={mem.growth / MB:.1f} MB")
    assert mem.growth < 48 * MB


def test_proxy_caps_streams_and_requests(tmp_path):
    from clawgym.agent.proxy import RecordingProxy, read_log

    def call(i):
        return {"tool_calls": [{"index": i, "id": f"call{i}", "type": "function",
                                "function": {"name": "exec", "arguments": '{"command": "true"}'}}]}

    for name, n, make, want in (("10k calls", 10_000, call, "max_tool_calls_per_turn"),
                                ("1-char text deltas", 200_000, lambda i: {"content": "y"}, "max_message_chars"),
                                ("50 MB argument", 800, lambda i: {"tool_calls": [{"index": 0, "function": {
                                    "arguments": "z" * 65_536}}]}, "max_argument_chars")):
        log = tmp_path / f"s{n}.jsonl"
        with _StreamingUpstream(n, make) as up, RecordingProxy(up.srv.base_url, str(log), bounds=Limits()) as px, \
                PeakRSS() as mem:
            st, text = _post(px.base_url, REQ, stream=True)
            time.sleep(0.3)
        e = [x for x in read_log(str(log)) if not x.get("kind")]
        print(f"\n[proxy stream {name}] relayed={len(text) / MB:.2f} MB log={log.stat().st_size / MB:.2f} MB "
              f"rss_growth={mem.growth / MB:.1f} MB upstream_chunks={up.sent}")
        assert st == 200 and text.rstrip().endswith("data: [DONE]")
        assert len(e) == 1 and want in e[0]["limit"], e
        assert log.stat().st_size < 2 * MB and len(text) <= Limits().max_response_bytes
        assert mem.growth < 100 * MB

    log = tmp_path / "big_request.jsonl"
    with HostileEndpoint([]) as ep, RecordingProxy(ep._srv.base_url, str(log),
                                                  bounds=Limits(max_record_bytes=100_000)) as px:
        st, _ = _post(px.base_url, {**REQ, "messages": [{"role": "user", "content": "q" * 200_000}]})
        st2, text2 = _post(px.base_url, REQ)
    assert st == 413 and not ep.requests and "[clawgym] record size limit" in text2
    assert log.stat().st_size < 10_000
