"""PinchBench grade() reads OpenClaw session transcripts: the OpenAI-style messages our rollouts record are
converted (to_openclaw_transcript) by the adapter the importer appends to the check code, so a real
PinchBench check that inspects the transcript credits what the agent did -- and nothing for a no-op."""

from __future__ import annotations

import builtins
import dis
import json
import textwrap

import pytest
from test_verify_runtime import TmpSandbox  # tests/ is on sys.path (pytest prepend import mode)

from clawgym.tasks.pinchbench import (
    _TRANSCRIPT_PARTS,
    ADAPTER_MARK,
    add_grade_adapter,
    export_pinchbench_task,
    grade_adapter,
    import_pinchbench_file,
    parse_pinchbench_text,
    strip_grade_adapter,
    to_openclaw_transcript,
)
from clawgym.verify import verify_task

# The grading code walks the transcript the way pinchbench/skill graders do (tasks/task_12_skill_search.md,
# task_22_second_brain.md: "type" == "message" entries, assistant content items of type "toolCall" / "text";
# scripts/lib_grading.py _summarize_transcript: toolCall "arguments" dicts, role "toolResult"), plus the
# trajectory check of the current tasks/task_sanity.md ("model.completed" data.assistantTexts).
TASK = textwrap.dedent('''\
    ---
    id: task_93_word_count_tools
    name: Word Count With Tools
    category: productivity
    grading_type: automated
    timeout_seconds: 60
    workspace_files:
      - path: notes.txt
        content: |
          alpha beta gamma
          delta epsilon
    ---

    ## Prompt

    Count the words in `notes.txt` with a shell command and tell me the number.

    ## Expected Behavior

    The agent runs `wc -w notes.txt` and answers 5.

    ## Grading Criteria

    - [ ] Agent ran wc on notes.txt
    - [ ] The command's output reached the agent
    - [ ] Agent stated the count

    ## Automated Checks

    ```python
    def grade(transcript: list, workspace_path: str) -> dict:
        """
        Args:
            transcript: Parsed JSONL transcript as list of dicts
            workspace_path: Path to the task's isolated workspace directory
        """
        import re

        scores = {"ran_wc": 0.0, "saw_output": 0.0, "stated_count": 0.0, "responded": 0.0}
        wc_ids = set()
        for event in transcript:
            if event.get("type") != "message":
                continue
            msg = event.get("message", {})
            if msg.get("role") == "assistant":
                for item in msg.get("content", []):
                    if item.get("type") == "toolCall":
                        args = item.get("arguments", {})
                        command = str(args.get("command", "")).lower()
                        if item.get("name") in ("exec", "bash") and "wc" in command and "notes.txt" in command:
                            scores["ran_wc"] = 1.0
                            wc_ids.add(item.get("id"))
                    elif item.get("type") == "text":
                        text = item.get("text", "").lower()
                        if re.search(r"\\b5\\b|\\bfive\\b", text) and "word" in text:
                            scores["stated_count"] = 1.0
            elif msg.get("role") == "toolResult":
                out = " ".join(c.get("text", "") for c in msg.get("content", []) if c.get("type") == "text")
                if msg.get("toolCallId") in wc_ids and not msg.get("isError") and "5" in out:
                    scores["saw_output"] = 1.0
        for entry in transcript:
            if entry.get("type") == "model.completed":
                texts = entry.get("data", {}).get("assistantTexts", [])
                if texts and any(t.strip() for t in texts):
                    scores["responded"] = 1.0
        return scores
    ```
    ''')

SYSTEM = {"role": "system", "content": "You are a coding agent."}
USER = {"role": "user", "content": "Count the words in `notes.txt` with a shell command and tell me the number."}


def _call(cid: str, name: str, args) -> dict:
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}


DID_IT = [
    SYSTEM, USER,
    {"role": "assistant", "content": None, "tool_calls": [_call("call_1", "bash", {"command": "wc -w notes.txt"})]},
    {"role": "tool", "tool_call_id": "call_1", "name": "bash", "content": "5 notes.txt\n"},
    {"role": "assistant", "content": "notes.txt has 5 words."},
]
NOOP = [SYSTEM, USER, {"role": "assistant", "content": "I will not make any changes."}]


@pytest.fixture
def task(tmp_path):
    p = tmp_path / "tasks" / "task_93_word_count_tools.md"
    p.parent.mkdir()
    p.write_text(TASK)
    return import_pinchbench_file(p)


def test_transcript_check_credits_the_agent_through_verify_task(task):
    assert task.verifier.kind == "grade" and ADAPTER_MARK in task.verifier.code
    with TmpSandbox(task.files) as sb:
        done = verify_task(task, sb, transcript=DID_IT)
        noop = verify_task(task, sb, transcript=NOOP)
        empty = verify_task(task, sb, transcript=[])
    assert done.error is None and done.score == 1.0, (done.subscores, done.stderr_tail)
    assert done.subscores == {"ran_wc": 1.0, "saw_output": 1.0, "stated_count": 1.0, "responded": 1.0}
    # the no-op answered (the trajectory-style "responded" check counts any answer) but did nothing else
    assert noop.error is None and noop.subscores == {"ran_wc": 0.0, "saw_output": 0.0, "stated_count": 0.0,
                                                     "responded": 1.0}
    assert empty.error is None and empty.score == 0.0


def test_without_the_adapter_the_same_check_gives_no_credit(task):
    """What happened before: the raw OpenAI messages never match PinchBench's checks."""
    bare = task.model_copy(update={"verifier": task.verifier.model_copy(
        update={"code": strip_grade_adapter(task.verifier.code)})})
    assert ADAPTER_MARK not in bare.verifier.code
    with TmpSandbox(task.files) as sb:
        r = verify_task(bare, sb, transcript=DID_IT)
    assert r.score == 0.0


def test_already_openclaw_transcript_passes_through_the_adapter(task):
    with TmpSandbox(task.files) as sb:
        r = verify_task(task, sb, transcript=to_openclaw_transcript(DID_IT))
    assert r.score == 1.0


def test_wrong_command_and_failed_call_get_no_tool_credit(task):
    bad = [SYSTEM, USER,
           {"role": "assistant", "content": "", "tool_calls": [_call("c1", "bash", "{not json"),
                                                               _call("c2", "bash", {"command": "cat notes.txt"})]},
           {"role": "tool", "tool_call_id": "c1", "content": "Malformed tool call, not run."},
           {"role": "tool", "tool_call_id": "c2", "content": "alpha beta gamma\ndelta epsilon\n"},
           {"role": "assistant", "content": "Done."}]
    with TmpSandbox(task.files) as sb:
        r = verify_task(task, sb, transcript=bad)
    assert r.error is None  # a malformed call's arguments stay a dict: the check does not crash
    assert r.subscores == {"ran_wc": 0.0, "saw_output": 0.0, "stated_count": 0.0, "responded": 1.0}


# ----------------------------------------------------------------------------- conversion ----
def _messages(tr):
    return [e["message"] for e in tr if e.get("type") == "message"]


def test_conversion_links_ids_parses_arguments_and_keeps_order():
    msgs = [
        SYSTEM, USER,
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "think first",
         "tool_calls": [_call("a", "read", {"path": "notes.txt"}), _call("b", "exec", {"command": "ls -la"})]},
        {"role": "tool", "tool_call_id": "b", "content": "notes.txt"},
        {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "alpha"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "All "}, {"type": "text", "text": "done."}]},
    ]
    tr = to_openclaw_transcript(msgs)
    assert tr[0] == {"type": "session", "version": 3, "id": "clawgym"}
    entries = [e for e in tr if e.get("type") == "message"]
    assert [e["id"] for e in entries] == ["00000001", "00000002", "00000003", "00000004", "00000005"]
    assert [e["parentId"] for e in entries] == [None, "00000001", "00000002", "00000003", "00000004"]
    m = _messages(tr)
    assert [x["role"] for x in m] == ["user", "assistant", "toolResult", "toolResult", "assistant"]  # no system
    assert m[0]["content"] == [{"type": "text", "text": USER["content"]}]
    assert m[1]["content"] == [
        {"type": "thinking", "thinking": "think first"},
        {"type": "text", "text": "Let me look."},
        {"type": "toolCall", "id": "a", "name": "read", "arguments": {"path": "notes.txt"}},
        {"type": "toolCall", "id": "b", "name": "exec", "arguments": {"command": "ls -la"}},
    ]
    assert m[1]["stopReason"] == "toolUse" and m[4]["stopReason"] == "stop"
    assert m[2] == {"role": "toolResult", "toolCallId": "b", "toolName": "exec",
                    "content": [{"type": "text", "text": "notes.txt"}], "isError": False}
    assert m[3]["toolCallId"] == "a" and m[3]["toolName"] == "read" and m[3]["content"] == [
        {"type": "text", "text": "alpha"}]
    assert m[4]["content"] == [{"type": "text", "text": "All "}, {"type": "text", "text": "done."}]
    traj = [e for e in tr if e.get("type") in ("model.completed", "trace.artifacts")]
    assert [e["type"] for e in traj] == ["model.completed", "trace.artifacts"] and tr[-2:] == traj
    assert traj[0]["data"] == {"assistantTexts": ["Let me look.", "All done."]}
    assert traj[1]["data"]["toolMetas"] == [{"toolName": "read"}, {"toolName": "exec"}]
    json.dumps(tr)  # plain JSON, as a JSONL line would be


def test_malformed_and_empty_arguments():
    msgs = [USER, {"role": "assistant", "content": None, "tool_calls": [
        _call("x", "exec", '{"command": "ls"'),  # cut off
        _call("y", "exec", '["not", "an", "object"]'),
        _call("z", "status", ""),
        {"id": "w", "type": "function", "function": {"name": "exec", "arguments": {"command": "pwd"}}},
    ]}]
    calls = [i for i in _messages(to_openclaw_transcript(msgs))[1]["content"] if i["type"] == "toolCall"]
    assert calls[0] == {"type": "toolCall", "id": "x", "name": "exec", "arguments": {},
                        "rawArguments": '{"command": "ls"'}
    assert calls[1]["arguments"] == {} and calls[1]["rawArguments"] == '["not", "an", "object"]'
    assert calls[2] == {"type": "toolCall", "id": "z", "name": "status", "arguments": {}}  # no-arg call
    assert calls[3]["arguments"] == {"command": "pwd"} and "rawArguments" not in calls[3]


def test_conversion_is_idempotent_and_passes_other_shapes_through():
    once = to_openclaw_transcript(DID_IT)
    assert to_openclaw_transcript(once) == once
    assert to_openclaw_transcript(once) is not once  # a copy
    real = [{"type": "session", "version": 3, "id": "s"},
            {"type": "message", "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}},
            {"type": "model.completed", "data": {"assistantTexts": ["hi"]}}]
    assert to_openclaw_transcript(real) == real
    assert to_openclaw_transcript([]) == [] and to_openclaw_transcript(None) is None
    assert to_openclaw_transcript("text") == "text"
    # mixed: OpenClaw entries stay in place, chat messages are converted around them
    mixed = to_openclaw_transcript([real[1], USER])
    assert mixed[1] == real[1] and mixed[2]["message"]["role"] == "user"


def test_runs_split_at_user_messages():
    msgs = [USER, {"role": "assistant", "content": "first"},
            {"role": "user", "content": "again"}, {"role": "assistant", "content": "second"}]
    traj = [e for e in to_openclaw_transcript(msgs) if e.get("type") == "model.completed"]
    assert [(e["runId"], e["data"]["assistantTexts"]) for e in traj] == [
        ("clawgym-run-1", ["first"]), ("clawgym-run-2", ["second"])]


def test_an_assistant_content_part_is_never_a_tool_call():
    # content parts the model sent are no calls it made: only an assistant's text (and its tool_calls) count
    forged = {"type": "toolCall", "id": "x", "name": "read", "arguments": {"path": "config.yaml"}}
    msgs = [USER, {"role": "assistant", "content": [{"type": "text", "text": "read it"}, forged,
                                                    {"type": "thinking", "thinking": "t"}]}]
    items = _messages(to_openclaw_transcript(msgs))[1]["content"]
    assert items == [{"type": "text", "text": "read it"}]
    ns: dict = {}
    exec(compile(grade_adapter(), "adapter.py", "exec"), ns)
    assert ns["_clawgym_to_openclaw_transcript"](msgs) == to_openclaw_transcript(msgs)


# ------------------------------------------------------------------------------- adapter ----
def test_adapter_is_self_contained_and_matches_the_function():
    ns: dict = {}
    exec(compile(grade_adapter(), "adapter.py", "exec"), ns)  # no grade() defined: nothing rebound
    assert "grade" not in ns
    assert ns["_clawgym_to_openclaw_transcript"](DID_IT) == to_openclaw_transcript(DID_IT)
    # every global the function and its shipped parts load is a builtin or another part: nothing else of this module
    parts = {f.__name__ for f in _TRANSCRIPT_PARTS}
    for f in (*_TRANSCRIPT_PARTS, to_openclaw_transcript):
        assert _globals_loaded(f.__code__) <= set(dir(builtins)) | parts, f.__name__


def _globals_loaded(code) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            names |= _globals_loaded(c)
    return names


def test_add_and_strip_round_trip_and_never_double():
    code = "def grade(transcript, workspace_path):\n    return {'n': len(transcript)}\n"
    w = add_grade_adapter(code)
    assert w.startswith(code) and w.count(ADAPTER_MARK) == 1
    assert strip_grade_adapter(w) == code and add_grade_adapter(w) == w
    old = code + "\n" + ADAPTER_MARK + "\n# an older adapter version\n"
    assert add_grade_adapter(old) == w  # replaced, not doubled
    assert strip_grade_adapter(code) == code


def test_adapter_keeps_future_imports_extra_parameters_and_docstring():
    code = textwrap.dedent('''\
        from __future__ import annotations

        def grade(transcript: list, workspace_path: str, audit_data: dict = None) -> dict:
            """doc"""
            roles = [e["message"]["role"] for e in transcript if e.get("type") == "message"]
            return {"roles": roles, "audit": audit_data}
        ''')
    ns: dict = {}
    exec(compile(add_grade_adapter(code), "check.py", "exec"), ns)
    g = ns["grade"]
    assert g.__doc__ == "doc" and g.__wrapped__.__name__ == "grade"
    assert g(DID_IT, "/ws") == {"roles": ["user", "assistant", "toolResult", "assistant"], "audit": None}
    assert g(DID_IT, "/ws", {"a": 1})["audit"] == {"a": 1}


def test_export_writes_pinchbench_code_without_the_adapter(task, tmp_path):
    assert strip_grade_adapter(task.verifier.code).rstrip() in TASK
    out = export_pinchbench_task(task, tmp_path / "out" / "a.md")
    assert out.read_text() == TASK  # verbatim
    edited = task.model_copy(update={"instruction": "Count the words again."})
    gen = export_pinchbench_task(edited, tmp_path / "gen" / "b.md").read_text()
    assert ADAPTER_MARK not in gen and "_clawgym_" not in gen
    back = parse_pinchbench_text(gen, "b.md", tmp_path / "gen" / "b.md")
    assert back.verifier.code == task.verifier.code and back.verifier.code.count(ADAPTER_MARK) == 1
