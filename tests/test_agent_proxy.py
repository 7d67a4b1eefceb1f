"""The recording proxy (plain + SSE streaming, sessions, secrets) and trajectory aggregation."""

import json

import openai
import pytest

from clawgym.agent.demo import demo_tasks
from clawgym.agent.proxy import RecordingProxy, merge_stream, read_log, rebuild_sessions
from clawgym.agent.servers import FINAL_TEXT, PolicyServer, adapt_call
from clawgym.agent.tools import TOOL_SCHEMAS


@pytest.fixture(scope="module")
def policy_server():
    with PolicyServer() as s:
        for t in demo_tasks():
            s.register(t)
        yield s


def test_proxy_records_plain_and_streaming_sessions(policy_server, tmp_path, monkeypatch):
    secret = "sk-proxy-secret-" + "ab12" * 6
    monkeypatch.setenv("CLAWGYM_PX_KEY", secret)
    task = demo_tasks()[1]
    log = tmp_path / "proxy.jsonl"
    with RecordingProxy(policy_server.base_url, str(log), api_key_env="CLAWGYM_PX_KEY", model="oracle") as px:
        px.register_session("s1", task_id=task.task_id, policy="oracle")
        client = openai.OpenAI(base_url=px.session_url("s1"), api_key="client-side-" + secret, max_retries=0)
        msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "please " + secret}]
        r1 = client.chat.completions.create(model="whatever", messages=msgs, tools=TOOL_SCHEMAS)
        tc = r1.choices[0].message.tool_calls[0]
        assert tc.function.name == "read" and json.loads(tc.function.arguments) == {"path": "config/app.ini"}
        msgs += [{"role": "assistant", "content": None, "tool_calls": [tc.model_dump()]},
                 {"role": "tool", "tool_call_id": tc.id, "content": "[server]\nport = 8080\n"}]
        # the second turn streams (as OpenClaw does)
        stream = client.chat.completions.create(model="whatever", messages=msgs, tools=TOOL_SCHEMAS, stream=True,
                                                stream_options={"include_usage": True})
        chunks = [c.model_dump() for c in stream]
        merged = merge_stream(chunks)
        call = merged["choices"][0]["message"]["tool_calls"][0]
        assert call["function"]["name"] == "edit"
        assert json.loads(call["function"]["arguments"])["newText"] == "port = 8443"
        assert merged["usage"]["completion_tokens"] > 0
        msgs += [{"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": call["id"], "content": "ok"}]
        r3 = client.chat.completions.create(model="whatever", messages=msgs, tools=TOOL_SCHEMAS)
        assert r3.choices[0].message.content == FINAL_TEXT
        # the upstream's failure is passed through and logged
        policy_server.inject_failures(1, 500)
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="whatever", messages=msgs)
        # header-addressed default session
        c2 = openai.OpenAI(base_url=px.base_url, api_key="x", max_retries=0,
                           default_headers={"X-Clawgym-Session": "other"})
        c2.chat.completions.create(model="noop", messages=[{"role": "user", "content": "hi"}])
    entries = read_log(str(log))
    assert [e["session"] for e in entries] == ["s1", "s1", "s1", "s1", "other"]
    assert [e["status"] for e in entries] == [200, 200, 200, 500, 200]
    assert entries[1]["stream"] is True and entries[1]["response"]["choices"][0]["message"]["tool_calls"]
    assert all(e["request"]["model"] == "oracle" for e in entries)  # the proxy pins the upstream model
    raw = log.read_text()
    assert secret not in raw and "[REDACTED]" in raw
    sessions = rebuild_sessions(entries)
    s1 = sessions["s1"]
    assert s1["n_requests"] == 3 and s1["dropped"] == 1
    assert [m["role"] for m in s1["messages"]] == ["system", "user", "assistant", "tool", "assistant", "tool",
                                                   "assistant"]
    assert s1["messages"][-1]["content"] == FINAL_TEXT
    assert [t["function"]["name"] for t in s1["tools"]] == [t["function"]["name"] for t in TOOL_SCHEMAS]


def _entry(seq, session, msgs, reply, status=200):
    return {"session": session, "seq": seq, "status": status, "request": {"messages": msgs, "tools": []},
            "response": {"choices": [{"message": {"role": "assistant", "content": reply}}],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 2}} if status == 200 else None}


def test_rebuild_drops_heartbeat_cron_and_internal_turns():
    sys_ = {"role": "system", "content": "S"}
    u = {"role": "user", "content": "Write the report"}
    a1 = {"role": "assistant", "content": None,
          "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}
    t1 = {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}
    hb = {"role": "user", "content": "Read HEARTBEAT.md if it exists (workspace context). Follow it strictly. "
                                     "If nothing needs attention, reply HEARTBEAT_OK."}
    internal = {"role": "user", "content": [{"type": "text", "text": "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>\n"
                                                                      "x\n<<<END_OPENCLAW_INTERNAL_CONTEXT>>>"}]}
    entries = [
        _entry(1, "main", [sys_, u, internal], None),
        _entry(2, "main", [sys_, u, a1, t1], "Done."),
        _entry(3, "main", [sys_, u, a1, t1, {"role": "assistant", "content": "Done."}, hb], "HEARTBEAT_OK"),
        _entry(4, "main", [sys_, {"role": "user", "content": "Summarise this conversation for compaction"}],
               "summary"),
        _entry(5, "main", [sys_, u], None, status=500),
        _entry(6, "cron:job1", [sys_, {"role": "user", "content": "cron job"}], "ok"),
    ]
    entries[0]["response"]["choices"][0]["message"] = a1
    out = rebuild_sessions(entries)
    assert list(out) == ["main"]
    m = out["main"]
    assert [x["role"] for x in m["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert m["messages"][-1]["content"] == "Done."
    assert m["n_requests"] == 2 and m["dropped"] == 3
    assert not any("HEARTBEAT" in json.dumps(x) or "INTERNAL_CONTEXT" in json.dumps(x) for x in m["messages"])


def test_adapt_call_to_openclaw_schemas():
    oc_tools = [{"type": "function", "function": {"name": "edit", "parameters": {"properties": {
        "path": {}, "edits": {}}}}},
        {"type": "function", "function": {"name": "exec", "parameters": {"properties": {
            "command": {}, "workdir": {}, "timeoutSeconds": {}}}}}]
    assert adapt_call("edit", {"path": "a", "oldText": "x", "newText": "y"}, oc_tools) == \
        ("edit", {"path": "a", "edits": [{"oldText": "x", "newText": "y"}]})
    assert adapt_call("exec", {"command": "ls", "timeout": 5}, oc_tools) == \
        ("exec", {"command": "ls", "timeoutSeconds": 5})
    assert adapt_call("ls", {"path": "in put"}, oc_tools) == ("exec", {"command": 'ls -1Ap -- "in put"'})
    assert adapt_call("edit", {"path": "a", "oldText": "x", "newText": "y"}, TOOL_SCHEMAS)[1]["oldText"] == "x"


def test_proxy_enforces_turn_limit(policy_server, tmp_path):
    task = demo_tasks()[0]
    log = tmp_path / "p.jsonl"
    with RecordingProxy(policy_server.base_url, str(log), model="oracle", max_requests=1) as px:
        px.register_session("s", task_id=task.task_id)
        c = openai.OpenAI(base_url=px.session_url("s"), api_key="x", max_retries=0)
        msgs = [{"role": "user", "content": task.instruction}]
        r1 = c.chat.completions.create(model="m", messages=msgs, tools=TOOL_SCHEMAS)
        assert r1.choices[0].message.tool_calls
        r2 = c.chat.completions.create(model="m", messages=msgs + [{"role": "user", "content": "go on"}],
                                       stream=True)
        text = "".join(ch.choices[0].delta.content or "" for ch in r2 if ch.choices)
        assert "turn limit (1) reached" in text
    entries = read_log(str(log))
    assert [bool(e.get("limit")) for e in entries] == [False, True]
    s = rebuild_sessions(entries)["s"]
    assert s["n_requests"] == 1 and s["messages"][-1]["tool_calls"]
