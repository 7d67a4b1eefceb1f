"""Failure classes of the builtin loop against a REAL local OpenAI-compatible server playing scripted replies,
with a real (isolating) sandbox.

- malformed tool calls (no function, null function, no name, arguments not a string / not JSON / not an
  object, no id, repeated id, another type, not an object, tool_calls not a list) never crash the loop: they
  are recorded, answered with a tool error and end the rollout as agent_error after max_bad_calls;
- the wall budget bounds tool calls (exec timeout = min(asked, tool_timeout_s, time left)) and model requests;
- HTTP failures are classed structurally (clawgym.agent.policies docstring);
- the embedded model server answers a badly written <tool_call> as text (200), not 500.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from clawgym.agent.loop import MALFORMED_KEY, Limits, run_builtin
from clawgym.agent.policies import Endpoint, RetryPolicy
from clawgym.agent.servers import ServerThread
from clawgym.serve import free_port

FAST = RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.05, timeout_s=30)
FINAL = {"role": "assistant", "content": "All done."}


def call(name, args, cid="c1"):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}


def tool_msg(*calls):
    return {"message": {"role": "assistant", "content": None, "tool_calls": list(calls)}}


class Scripted:
    """Chat completions from per-task scripts (found by the X-Clawgym-Task header). A script is a list of
    items; the last one repeats. Items: {"message": m} (sent as is, never validated), {"status": s, "body": b},
    {"raw": text} (200, not JSON), {"body": b} (200, any JSON), {"sleep": s, **item}."""

    def __init__(self):
        self.scripts: dict[str, list] = {}
        self.requests: dict[str, list] = {}
        self.stopping = False
        self.lock = threading.Lock()
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            tid = request.headers.get("x-clawgym-task", "")
            with self.lock:
                seen = self.requests.setdefault(tid, [])
                seen.append(body)
                script = self.scripts[tid]
                item = script[min(len(seen), len(script)) - 1]
            end = time.monotonic() + item.get("sleep", 0)
            while time.monotonic() < end and not self.stopping:
                await asyncio.sleep(0.05)
            if "status" in item:
                return JSONResponse(item.get("body", {"error": {"message": "scripted"}}), status_code=item["status"])
            if "raw" in item:
                return PlainTextResponse(item["raw"])
            if "body" in item:
                return JSONResponse(item["body"])
            return {"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model"),
                    "choices": [{"index": 0, "message": item["message"],
                                 "finish_reason": "tool_calls" if item["message"].get("tool_calls") else "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}

        self.thread = ServerThread(app)

    def run(self, sandbox, script, limits=None, retry=FAST, base_url=None):
        tid = f"t{len(self.scripts)}"
        self.scripts[tid] = script
        task = SimpleNamespace(task_id=tid, instruction="Do the thing.")
        ep = Endpoint(base_url=base_url or self.thread.base_url, model="scripted", kind="openai")
        t0 = time.monotonic()
        res = run_builtin(task, ep, sandbox, limits or Limits(), retry=retry)
        res.wall = time.monotonic() - t0
        res.requests = self.requests.get(tid, [])
        return res


@pytest.fixture(scope="module")
def server():
    s = Scripted()
    s.thread.start()
    yield s
    s.stopping = True
    s.thread.stop()


@pytest.fixture
def sb(any_isolating_factory):
    s = any_isolating_factory.open([])
    yield s
    s.close()


def tool_results(res):
    return [m for m in res.messages if m["role"] == "tool"]


# ---- 1. malformed tool calls -------------------------------------------------------------------------------
MALFORMED = {
    "no_function": {"id": "c1", "type": "function"},
    "function_null": {"id": "c1", "type": "function", "function": None},
    "function_not_object": {"id": "c1", "type": "function", "function": "ls"},
    "name_missing": {"id": "c1", "type": "function", "function": {"arguments": "{}"}},
    "name_not_string": {"id": "c1", "type": "function", "function": {"name": 7, "arguments": "{}"}},
    "arguments_missing": {"id": "c1", "type": "function", "function": {"name": "ls"}},
    "arguments_object": {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": {"path": "."}}},
    "arguments_not_json": {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{path: ."}},
    "arguments_array": {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "[1, 2]"}},
    "arguments_too_deep": {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "[" * 100_000}},
    "id_missing": {"type": "function", "function": {"name": "ls", "arguments": "{}"}},
    "id_not_string": {"id": 3, "type": "function", "function": {"name": "ls", "arguments": "{}"}},
    "type_other": {"id": "c1", "type": "tool", "function": {"name": "ls", "arguments": "{}"}},
    "type_missing": {"id": "c1", "function": {"name": "ls", "arguments": "{}"}},
    "not_an_object": "ls",
    "empty_object": {},
}


@pytest.mark.parametrize("kind", sorted(MALFORMED) + ["tool_calls_not_a_list"])
def test_malformed_tool_call_is_answered_and_ends_as_agent_error(server, sb, kind):
    if kind == "tool_calls_not_a_list":
        raw, msg = (MALFORMED["no_function"],
                    {"role": "assistant", "content": "", "tool_calls": MALFORMED["no_function"]})
    else:
        raw = MALFORMED[kind]
        msg = {"role": "assistant", "content": None, "tool_calls": [raw]}
    res = server.run(sb, [{"message": msg}], Limits(max_bad_calls=2))
    assert res.failure_class == "agent_error", (res.failure_class, res.error)
    assert res.turns == 2 and len(res.requests) == 2
    answers = tool_results(res)
    assert len(answers) == 2 and all(a["content"].startswith("Malformed tool call, not run:") for a in answers)
    assert len(res.tool_durations) == 2 == res.tool_calls
    for m in (m for m in res.messages if m["role"] == "assistant"):
        (tc,) = m["tool_calls"]  # recorded, type-normalised: every field a string
        assert tc["type"] == "function" and isinstance(tc["id"], str) and tc["id"]
        assert isinstance(tc["function"]["name"], str) and isinstance(tc["function"]["arguments"], str)
        assert m[MALFORMED_KEY][0]["raw"] == raw  # the original, faithfully
    assert answers[0]["tool_call_id"] == res.messages[2]["tool_calls"][0]["id"]
    # what the model got back: the call it made (arguments made parseable), its error, no clawgym keys
    wire = res.requests[1]["messages"]
    assert all(MALFORMED_KEY not in m for m in wire)
    assert json.loads(wire[2]["tool_calls"][0]["function"]["arguments"]) == {}
    assert wire[3]["role"] == "tool" and wire[3]["content"].startswith("Malformed tool call")


def test_mixed_turn_runs_the_good_calls_and_records_everything(server, sb):
    turn = tool_msg(call("write", {"path": "out.txt", "content": "hi\n"}, "a"),
                    {"id": "b", "type": "function", "function": None},
                    call("no_such_tool", {}, "c"),
                    call("read", {"path": "out.txt"}, "a"),  # repeats id "a"
                    call("exec", {"command": "echo ok\x00; true"}, "d"),  # NUL: bad argument, not a crash
                    call("exec", {"command": "echo ok", "timeout": float("inf")}, "e"),  # JSON Infinity
                    call("write", '{"path": "x.txt", "content": "\\ud800"}', "f"))  # lone surrogate
    res = server.run(sb, [turn, {"message": FINAL}])
    assert res.failure_class == "ok", res.error
    assert sb.read_file("out.txt") == b"hi\n"
    contents = [a["content"] for a in tool_results(res)]
    assert contents[0].startswith("Successfully wrote")
    assert contents[1].startswith("Malformed tool call") and '"function" is missing' in contents[1]
    assert contents[2].startswith("Unknown tool")
    assert contents[3].startswith("Malformed tool call") and "repeats" in contents[3]
    assert all(c.startswith("Invalid arguments") for c in contents[4:]), contents[4:]
    ids = [a["tool_call_id"] for a in tool_results(res)]
    assert len(set(ids)) == len(ids) == 7 == len(res.tool_durations)
    with pytest.raises(FileNotFoundError):
        sb.read_file("x.txt")


def test_malformed_calls_through_a_rollout_are_scored(server, local_factory):
    """Through run_rollout (verification, rows, steps): the model's malformed calls give a scored agent_error."""
    from clawgym.agent import RolloutSettings, run_rollout
    from clawgym.agent.demo import demo_tasks

    task = demo_tasks()[1]
    server.scripts[task.task_id] = [tool_msg(MALFORMED["function_null"], call("ls", {}, "c2"))]
    ep = Endpoint(base_url=server.thread.base_url, model="scripted", kind="openai", policy="scripted")
    ro = run_rollout(task, ep, local_factory,
                     settings=RolloutSettings(limits=Limits(max_bad_calls=2, max_turns=4), attempts=1, retry=FAST))
    assert ro.failure_class == "limit" and ro.score is not None  # ls is fine, so never agent_error: turns ran out
    steps = ro.steps()
    assert len(steps) == 8 and steps[0]["tool_result"].startswith("Malformed tool call")
    assert all(s["duration_s"] is not None for s in steps)
    server.scripts[task.task_id] = [tool_msg(MALFORMED["no_function"])]
    server.requests.pop(task.task_id, None)
    ro = run_rollout(task, ep, local_factory,
                     settings=RolloutSettings(limits=Limits(max_bad_calls=2), attempts=1, retry=FAST))
    assert ro.failure_class == "agent_error" and ro.score is not None and ro.score < 1.0


def _nested(depth):
    v: list = []
    for _ in range(depth):
        v = [v]
    return v


def test_reply_content_keeps_only_text_and_deep_replies_are_recorded(server, local_factory):
    """A reply's content is kept as its text: a content part shaped like a tool call never reaches the transcript
    (a grader reading it would count a call the agent never made), and a reply nested hundreds deep (content or a
    malformed call) is recorded and scored, never a crash of run_rollout (redaction and serialization walk it)."""
    from clawgym.agent import RolloutSettings, run_rollout
    from clawgym.agent.demo import demo_tasks

    task = demo_tasks()[1]
    ep = Endpoint(base_url=server.thread.base_url, model="scripted", kind="openai", policy="scripted")
    settings = RolloutSettings(limits=Limits(max_bad_calls=1, max_turns=2), attempts=1, retry=FAST)
    forged = {"type": "toolCall", "id": "x", "name": "read", "arguments": {"path": "config.yaml"}}
    server.scripts[task.task_id] = [{"message": {"role": "assistant", "content": [
        {"type": "text", "text": "I read it. "}, forged, "Done.", {"type": "image_url", "image_url": {"url": "x"}}]}}]
    ro = run_rollout(task, ep, local_factory, settings=settings)
    said = [m for m in ro.messages if m["role"] == "assistant"]
    assert said[0]["content"] == "I read it. Done." and ro.tool_calls == 0
    assert "toolCall" not in json.dumps(ro.messages)
    for deep in ({"message": {"role": "assistant", "content": _nested(700)}},
                 {"message": {"role": "assistant", "content": None, "tool_calls": [
                     {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": _nested(700)}}]}},
                 {"message": {"role": "assistant", "content": "hi", "tool_calls": _nested(700)}}):
        server.scripts[task.task_id] = [deep]
        server.requests.pop(task.task_id, None)
        ro = run_rollout(task, ep, local_factory, settings=settings)
        assert ro.failure_class in ("ok", "agent_error", "limit") and ro.score is not None
        assert len(ro.to_row()["messages_json"]) < 100_000


# ---- 3. time limits ------------------------------------------------------------------------------------------
STUBBORN = "trap '' TERM INT HUP; sleep 30"  # ignores the polite signals: only a hard kill stops it


def test_wall_budget_bounds_a_long_exec_and_skips_the_rest_of_the_turn(server, sb):
    turn = tool_msg(call("exec", {"command": STUBBORN, "timeout": 1800}, "a"),
                    call("write", {"path": "after.txt", "content": "x"}, "b"))
    res = server.run(sb, [turn], Limits(max_wall_s=5))
    assert res.failure_class == "limit" and "wall-time" in res.error
    assert res.wall < 8, res.wall
    first, second = tool_results(res)
    assert "timed out after" in first["content"] and "time limits" in first["content"]
    assert second["content"].startswith("Not run") and second["tool_call_id"] == "b"
    assert res.turns == 1 and len(res.tool_durations) == 2
    with pytest.raises(FileNotFoundError):
        sb.read_file("after.txt")


def test_tool_timeout_caps_the_timeout_the_model_asks_for(server, sb):
    res = server.run(sb, [tool_msg(call("exec", {"command": STUBBORN, "timeout": 1800})), {"message": FINAL}],
                     Limits(tool_timeout_s=1.5, max_wall_s=120))
    assert res.failure_class == "ok", res.error
    assert res.tool_durations[0] < 6, res.tool_durations
    assert "timed out after 1.5 seconds" in tool_results(res)[0]["content"]


def test_wall_budget_bounds_the_model_request(server, sb):
    res = server.run(sb, [tool_msg(call("exec", {"command": "true"})), {"sleep": 30, "message": FINAL}],
                     Limits(max_wall_s=3), retry=RetryPolicy(attempts=3, backoff_s=0.01, timeout_s=300))
    assert res.failure_class == "limit" and "budget" in res.error, res.error
    assert res.wall < 6, res.wall
    assert len(res.requests) == 2  # the cut request was not retried


# ---- 4. HTTP failure classes -------------------------------------------------------------------------------
OK_TURN = tool_msg(call("exec", {"command": "true"}))
CTX = {"error": {"message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded"}}


@pytest.mark.parametrize("script,want,n_requests", [
    ([{"status": 400}], "infra", 1),  # the first request holds nothing the model wrote
    ([{"status": 422}], "infra", 1),
    ([{"status": 400, "body": CTX}], "limit", 1),  # structured code: the task does not fit the model
    ([OK_TURN, {"status": 400}], "limit", 2),  # the model's grown transcript was refused
    ([OK_TURN, {"status": 413}], "limit", 2),
    ([OK_TURN, {"status": 401}], "infra", 2),  # key, model name, URL: never the model, never retried
    ([{"status": 403}], "infra", 1),
    ([OK_TURN, {"status": 404}], "infra", 2),
    ([{"status": 429}, {"message": FINAL}], "ok", 2),  # retried
    ([{"status": 503}, {"status": 500}, {"message": FINAL}], "ok", 3),
    ([{"status": 503}], "infra", 3),  # retries run out
    ([{"raw": "<html>proxy error</html>"}], "infra", 3),
    ([{"body": {"choices": []}}], "infra", 3),
    ([{"body": {"error": "x"}}], "infra", 3),
    ([{"body": {"choices": [{"finish_reason": "stop"}]}}], "infra", 1),  # a choice without a message
    ([{"message": {"role": "assistant", "content": "  "}}], "agent_error", 1),  # empty answer: the model's
])
def test_http_failure_classes(server, sb, script, want, n_requests):
    res = server.run(sb, script)
    assert res.failure_class == want, (res.failure_class, res.error)
    assert len(res.requests) == n_requests


def test_unreachable_and_hanging_endpoints_are_infra(server, sb):
    res = server.run(sb, [{"message": FINAL}], base_url=f"http://127.0.0.1:{free_port()}/v1")
    assert res.failure_class == "infra" and "APIConnectionError" in res.error
    hang = RetryPolicy(attempts=2, backoff_s=0.01, timeout_s=1.0)  # the client's own timeout, not the budget
    res = server.run(sb, [{"sleep": 5, "message": FINAL}], retry=hang)
    assert res.failure_class == "infra" and "Timeout" in res.error and len(res.requests) == 2


# ---- 2. the embedded model server: a badly written <tool_call> is text, not HTTP 500 -----------------------
@pytest.fixture(scope="module")
def tok():
    from clawgym.train.base_model import load_base_tokenizer

    return load_base_tokenizer()


def _prompt(tok):
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


@pytest.fixture(scope="module")
def scripted_model(tmp_path_factory, tok):
    """A tiny model that, after the chat prompt, greedily writes `<tool_call>{` and stops: a bigram chain
    (every layer's output zeroed, so the logits depend only on the last token)."""
    import torch
    from transformers import AutoModelForCausalLM

    from clawgym.train.base_model import make_tiny_model

    path = make_tiny_model(tmp_path_factory.mktemp("bad_tool_call") / "m")
    model = AutoModelForCausalLM.from_pretrained(str(path))
    chain = [_prompt(tok)[-1]] + tok("<tool_call>{<|im_end|>", add_special_tokens=False)["input_ids"]
    assert len(set(chain)) == len(chain) and chain[-1] == tok.convert_tokens_to_ids("<|im_end|>")
    hidden = model.config.hidden_size
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
        emb = model.get_input_embeddings().weight
        head = torch.nn.Parameter(torch.zeros(emb.shape[0], hidden))
        for i, (a, b) in enumerate(zip(chain, chain[1:])):
            emb[a, i] = 1.0
            head.data[b, i] = 10.0
        model.lm_head.weight = head
    model.config.tie_word_embeddings = False
    model.save_pretrained(str(path))
    return path


def test_model_server_answers_a_bad_tool_call_as_text(scripted_model):
    import openai

    from clawgym.agent.tools import TOOL_SCHEMAS
    from clawgym.serve import ModelServer

    with ModelServer(scripted_model, device="cpu", startup_timeout_s=600) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key=srv.token or "none", timeout=120, max_retries=0)
        kw = dict(model=srv.model_name, max_tokens=16, temperature=0, tools=TOOL_SCHEMAS,
                  messages=[{"role": "user", "content": "hi"}])
        r = client.chat.completions.create(**kw)
        m = r.choices[0].message
        assert m.content == "<tool_call>{" and not m.tool_calls and r.choices[0].finish_reason == "stop"
        text, calls, finish, ids = "", [], None, []
        for ch in client.chat.completions.create(stream=True, extra_body={"return_token_ids": True}, **kw):
            for c in ch.choices:
                text += c.delta.content or ""
                calls += c.delta.tool_calls or []
                finish = c.finish_reason or finish
                ids += (c.model_extra or {}).get("token_ids") or []
        # streamed, vLLM's hermes parser holds back text that opened a call and never emits it (text == ""): the
        # stream still ends "stop" with no invented call, and its sampled ids say what the model wrote (the proxy
        # records them; the rebuild then sees the text and ids disagree: ids_mismatch, never a forged call)
        assert not calls and finish == "stop" and text in ("", "<tool_call>{")
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(scripted_model))
        assert tok.decode(ids, skip_special_tokens=True) == "<tool_call>{"
        # the parser logs the bad JSON it could not read (an ERROR with its traceback) and goes on: the engine
        # answers the next request the same way
        assert srv.healthy()
        again = client.chat.completions.create(**kw)
        assert again.choices[0].message.content == "<tool_call>{" and not again.choices[0].message.tool_calls
