"""The builtin runtime: an OpenAI chat-completions tool loop executed inside a sandbox.

One turn = one model request. The loop stops when the model answers without tool calls (ok), when a
limit is hit (turns, total tokens, wall time, a completion cut at max_completion_tokens → `limit`), when
the model misbehaves beyond repair (empty answers, `max_bad_calls` turns in a row of malformed, unknown or
badly-argued tool calls → `agent_error`) or when our machinery fails (→ `infra`): the endpoint (InfraError
from the client, see clawgym.agent.policies for how HTTP failures are classed) or the sandbox
(SandboxError). Anything else that escapes is a bug of ours and is classed `infra` by the rollout.

Tool calls are the model's output, so nothing in them may crash the loop. A call that is not
``{"id": str, "type": "function", "function": {"name": str, "arguments": "<JSON object>"}}`` (no
``function``, ``function: null``, no name, arguments that are not a string or not a JSON object, no or a
repeated id, another type) is not run: the transcript records it (type-normalised so every consumer can read
it, the original under the assistant message's ``clawgym_malformed_tool_calls``) and answers it with a tool
error, which counts toward ``max_bad_calls``.

Wall time: ``max_wall_s`` bounds the whole rollout, model requests included. Each model request's timeout
is cut to the time left (a request cut that way ends the rollout as `limit`); each exec's timeout is
min(its own ``timeout``, ``tool_timeout_s``, the time left); once the budget is spent the remaining tool
calls of the turn are not run (answered with a limit error) and the rollout ends as `limit`.

Bounded records: nothing the model sends may make the record unbounded. The reply body is read up to
``max_response_bytes`` (ChatClient; past it the rollout ends as `limit` without parsing it); a reply with more
than ``max_tool_calls_per_turn`` calls, text over ``max_message_chars`` or a call whose arguments exceed
``max_argument_chars`` is stored cut to the caps (what was cut under the message's ``clawgym_truncated``),
none of its calls is run (each is answered "Not run") and the rollout ends as `limit` -- scored: the workspace
as it is is verified. The transcript as a whole is kept under ``max_record_bytes`` (:func:`bound_messages`
drops the middle, with a marker; the rollout ends as `limit`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, cast

from clawgym.agent.messages import text_of
from clawgym.agent.policies import AgentRequestError, ChatClient, Endpoint, InfraError, RetryPolicy
from clawgym.agent.tito import KV_FIELD, prompt_ids_for
from clawgym.agent.tools import TOOL_SCHEMAS, execute_tool
from clawgym.sandbox.base import Sandbox, SandboxError
from clawgym.tasks.model import Task

SYSTEM_PROMPT = """You are a personal AI assistant (a "Claw") working for the user inside their workspace.
Your workspace is {workspace}; relative paths are relative to it. Use the tools to inspect files, run
commands and create or edit files. Do the whole task yourself, write deliverables exactly where the user
asks, then reply with a short summary of what you did."""

MALFORMED_KEY = "clawgym_malformed_tool_calls"  # on an assistant message: the original malformed calls
# on an assistant message, when the endpoint returned them (`Endpoint.token_ids`: the embedded server, vLLM):
# {"prompt_token_ids": [...], "token_ids": [...], "logprobs": [...] | None} exactly as sampled
TOKENS_KEY = "clawgym_tokens"
# on a message cut to the caps of Limits: what was cut ({"content": {"chars", "kept"}, "tool_calls": {"received",
# "kept"}, "arguments": [{"index", "chars", "kept"}], "calls": [{"index", "bytes"}]}); on the marker message
# that stands for the dropped middle of a transcript: {"dropped_messages", "dropped_bytes"}
TRUNCATED_KEY = "clawgym_truncated"


@dataclass
class Limits:
    """Budgets of one rollout: turns, tokens, wall time, malformed-call streak, per-exec timeout and the sizes
    of what is recorded (module docstring, "Bounded records")."""

    max_turns: int = 30
    max_total_tokens: int = 400_000  # prompt + completion tokens summed over the rollout
    max_wall_s: float = 900.0  # the whole rollout: model requests and tool calls
    max_completion_tokens: int = 2048  # per request
    max_bad_calls: int = 5  # consecutive turns of malformed/unknown/badly-argued tool calls before agent_error
    tool_timeout_s: float = 120.0  # the most one exec may run, whatever timeout the model asks for
    max_tool_calls_per_turn: int = 32  # tool calls in one reply
    max_message_chars: int = 65_536  # the model's text (content) of one reply
    max_argument_chars: int = 262_144  # one tool call's arguments (JSON text; `write` content rides here)
    max_response_bytes: int = 16 * 2**20  # one reply body as read from the endpoint (or through the proxy)
    max_record_bytes: int = 16 * 2**20  # the whole transcript as stored (the lake row's messages_json, UTF-8)


@dataclass
class LoopResult:
    """What one agent loop produced: the transcript, counters, token usage and how it ended."""

    messages: list[dict] = field(default_factory=list)
    turns: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failure_class: str = "ok"
    error: str | None = None
    tool_durations: list[float] = field(default_factory=list)  # one per tool call of the transcript, in order
    retries: int = 0
    proxy_log: str | None = None  # openclaw runtime: the recording proxy's JSONL log
    meta: dict[str, Any] = field(default_factory=dict)  # openclaw runtime: the forwarder, divergence, refusals


# A reply's JSON may nest without bound, and every later walk of the record (redaction, serialization, graders)
# recurses on it: what a reply holds below this depth is kept as a mark, not as structure.
MAX_REPLY_DEPTH = 40


def _shallow(v: Any, depth: int = MAX_REPLY_DEPTH) -> Any:
    """`v` with every container nested deeper than `depth` replaced by the string "…"."""
    if isinstance(v, dict):
        return {k: _shallow(x, depth - 1) for k, x in v.items()} if depth > 0 else "…"
    if isinstance(v, (list, tuple)):
        return [_shallow(x, depth - 1) for x in v] if depth > 0 else "…"
    return v


def _reply_text(content: Any) -> str | None:
    """A reply's content as the transcript keeps it: its text. Endpoints answer a string (or null); of a list of
    content parts only the text parts' text is kept, joined in order. Other parts are no text the model said, and a
    part shaped like a transcript entry (a tool call, a thinking block) would reach a grader that reads the
    transcript as if it had happened."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    return "".join(p if isinstance(p, str) else p["text"] for p in content
                   if isinstance(p, str) or (isinstance(p, dict) and p.get("type") == "text"
                                             and isinstance(p.get("text"), str)))


def _as_str(v: Any) -> str:
    if v is None:
        return ""
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)


def _count(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


@dataclass
class _Call:
    record: dict  # {"id", "type": "function", "function": {"name", "arguments"}}: all strings
    problems: list[str]
    args: dict | None  # parsed arguments when well-formed


def _check_call(raw: Any, index: int, turn: int, seen: set[str]) -> _Call:
    """Validate one tool call exactly as the endpoint returned it."""
    problems: list[str] = []
    is_obj = isinstance(raw, dict)
    raw_d: dict = raw if is_obj else {}
    if not is_obj:
        problems.append(f"a tool call must be an object, got {type(raw).__name__}")
    cid = raw_d.get("id")
    if not isinstance(cid, str) or not cid:
        if is_obj:
            problems.append('"id" is missing' if cid is None else '"id" must be a non-empty string')
        cid = f"clawgym_call_{turn}_{index}"
    elif cid in seen:
        problems.append(f'"id" {cid!r} repeats an earlier call\'s id')
        cid = f"{cid}#{index}"
    seen.add(cid)
    if is_obj and raw_d.get("type") != "function":
        problems.append(f'"type" must be "function", got {raw_d.get("type")!r}')
    fn = raw_d.get("function")
    name: Any = None
    arguments: Any = None
    if is_obj and not isinstance(fn, dict):
        problems.append('"function" is missing' if fn is None else '"function" must be an object')
    elif isinstance(fn, dict):
        name, arguments = fn.get("name"), fn.get("arguments")
        if not isinstance(name, str) or not name.strip():
            problems.append('"function.name" is missing' if name is None else
                            '"function.name" must be a non-empty string')
    args = None
    if isinstance(fn, dict):
        if not isinstance(arguments, str):
            problems.append('"function.arguments" is missing' if arguments is None else
                            f'"function.arguments" must be a string of JSON, got {type(arguments).__name__}')
        else:
            try:
                parsed = json.loads(arguments)
            except (ValueError, RecursionError) as e:
                problems.append(f'"function.arguments" is not valid JSON ({str(e)[:200]})')
            else:
                if isinstance(parsed, dict):
                    args = parsed
                else:
                    problems.append('"function.arguments" must be a JSON object')
    record = {"id": cid, "type": "function", "function": {"name": _as_str(name), "arguments": _as_str(arguments)}}
    return _Call(record, problems, args if not problems else None)


def _assistant_message(msg: dict, turn: int, used: set[str] | None = None) -> tuple[dict, list[_Call]]:
    """The transcript entry for the model's reply (a dict from the endpoint's JSON) and its checked calls.
    `used`: the call ids of the rollout's earlier turns; an id seen there is renamed (`<id>~<turn>`, not an error:
    endpoints that number calls per reply repeat ids) so every tool result answers exactly one call."""
    out: dict[str, Any] = {"role": "assistant", "content": _reply_text(msg.get("content"))}
    raw_calls = msg.get("tool_calls")
    if raw_calls is None or raw_calls == []:
        return out, []
    if not isinstance(raw_calls, list):
        raw_calls = [raw_calls]
    seen: set[str] = set()
    calls = [_check_call(raw, i, turn, seen) for i, raw in enumerate(raw_calls)]
    if used is not None:
        for c in calls:
            cid = c.record["id"]
            while cid in used:
                cid = f"{cid}~{turn}"
            c.record["id"] = cid
            used.add(cid)
    out["tool_calls"] = [c.record for c in calls]
    bad = [{"index": i, "problems": c.problems, "raw": raw}
           for i, (c, raw) in enumerate(zip(calls, raw_calls)) if c.problems]
    if bad:
        out[MALFORMED_KEY] = bad
    return out, calls


def token_record(resp: dict, choice: dict) -> dict | None:
    """The sampled tokens of one response (vLLM's / the embedded server's `return_token_ids` and `logprobs`
    fields) as stored under TOKENS_KEY, or None when the endpoint did not return them."""
    prompt, ids = resp.get("prompt_token_ids"), choice.get("token_ids")
    if not (isinstance(prompt, list) and isinstance(ids, list)
            and all(isinstance(i, int) for i in prompt) and all(isinstance(i, int) for i in ids)):
        return None
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    logprobs = None
    if isinstance(content, list) and len(content) == len(ids):
        try:
            logprobs = [float(c["logprob"]) for c in content]
        except (KeyError, TypeError, ValueError):
            logprobs = None
    return {"prompt_token_ids": prompt, "token_ids": ids, "logprobs": logprobs}


def _size(obj: Any) -> int:
    """Bytes of `obj` as the lake stores it (JSON, UTF-8)."""
    return len(json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


_CALL_SLACK = 4096  # a call's id, name and framing beside its (already cut) arguments


def _bound_reply(msg: dict, limits: Limits) -> tuple[dict, dict]:
    """The endpoint's assistant message cut to the caps of `limits`, and what was cut ({} when nothing):
    text over max_message_chars, calls past max_tool_calls_per_turn, arguments over max_argument_chars, and a
    call that is oversized anywhere else (a huge name, non-string arguments, extra fields) replaced by a stub
    that is answered as malformed."""
    cut: dict[str, Any] = {}
    content = msg.get("content")
    if content is not None and not isinstance(content, str) and _size(content) > limits.max_message_chars:
        content = json.dumps(content, ensure_ascii=False, default=str)  # content parts: cut as their JSON
    if isinstance(content, str) and len(content) > limits.max_message_chars:
        cut["content"] = {"chars": len(content), "kept": limits.max_message_chars}
        content = content[:limits.max_message_chars]
    out = {**msg, "content": content}
    raw_calls = msg.get("tool_calls")
    if raw_calls is None or raw_calls == []:
        return out, cut
    if not isinstance(raw_calls, list):
        raw_calls = [raw_calls]
    if len(raw_calls) > limits.max_tool_calls_per_turn:
        cut["tool_calls"] = {"received": len(raw_calls), "kept": limits.max_tool_calls_per_turn}
        raw_calls = raw_calls[:limits.max_tool_calls_per_turn]
    calls = []
    for i, raw in enumerate(raw_calls):
        fn = raw.get("function") if isinstance(raw, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if isinstance(args, str) and len(args) > limits.max_argument_chars:
            cut.setdefault("arguments", []).append({"index": i, "chars": len(args), "kept": limits.max_argument_chars})
            raw = {**raw, "function": {**cast(dict, fn), "arguments": args[:limits.max_argument_chars]}}
        n = _size(raw)
        if n > limits.max_argument_chars + _CALL_SLACK:
            cut.setdefault("calls", []).append({"index": i, "bytes": n})
            raw = {"clawgym_oversized_call": json.dumps(raw, ensure_ascii=False, default=str)[:1000]}
        calls.append(raw)
    out["tool_calls"] = calls
    return out, cut


def _cut_reason(cut: dict, limits: Limits, has_calls: bool) -> str:
    """The rollout's error for a reply cut to the caps: which caps it broke."""
    why = []
    if "tool_calls" in cut:
        why.append(f"{cut['tool_calls']['received']} tool calls in one reply "
                   f"(max_tool_calls_per_turn={limits.max_tool_calls_per_turn})")
    if "content" in cut:
        why.append(f"{cut['content']['chars']} characters of text (max_message_chars={limits.max_message_chars})")
    if "arguments" in cut:
        n = max(a["chars"] for a in cut["arguments"])
        why.append(f"tool call arguments of {n} characters (max_argument_chars={limits.max_argument_chars})")
    if "calls" in cut:
        n = max(a["bytes"] for a in cut["calls"])
        why.append(f"a tool call of {n} bytes (max_argument_chars={limits.max_argument_chars})")
    return "reply size limit: " + "; ".join(why) + \
        (" (stored cut to the caps, its tool calls not run)" if has_calls else " (stored cut to the caps)")


def _shrink(m: dict, max_bytes: int) -> dict:
    """`m` reduced to about `max_bytes`: role, its text cut, the ids that pair it, and a truncation marker."""
    out: dict[str, Any] = {"role": m.get("role")}
    for k in ("tool_call_id", "name"):
        if isinstance(m.get(k), str):
            out[k] = m[k][:200]
    text = text_of(m.get("content")) if m.get("content") is not None else \
        json.dumps(m.get("tool_calls"), ensure_ascii=False, default=str)
    keep = max(0, max_bytes - 1024) // 4  # UTF-8: at most 4 bytes a character
    out["content"] = text[:keep]
    out[TRUNCATED_KEY] = {"message_bytes": _size(m), "kept_chars": len(out["content"])}
    return out


def bound_messages(messages: list[dict], max_bytes: int) -> tuple[list[dict], dict | None]:
    """`messages` kept under `max_bytes` (their JSON, UTF-8): unchanged when they fit; else the leading
    system/user messages, a marker message (role "system", TRUNCATED_KEY {"dropped_messages",
    "dropped_bytes"}) and as many of the last messages as fit, starting at a non-tool message so every
    kept tool result has its call. Messages too big on their own are shrunk (:func:`_shrink`). Returns
    (messages, what was dropped or None)."""
    sizes = [_size(m) + 2 for m in messages]  # + the separating ", " of json.dumps
    total = sum(sizes) + 2
    if total <= max_bytes:
        return messages, None
    budget = max(0, max_bytes - 2 - 600)  # 600: the marker
    head: list[dict] = []
    i = 0
    while i < len(messages) and i < 2 and messages[i].get("role") in ("system", "user"):
        m = messages[i] if sizes[i] <= budget // 4 else _shrink(messages[i], budget // 4)
        head.append(m)
        budget -= _size(m) + 2
        i += 1
    j = len(messages)
    while j > i and sizes[j - 1] <= budget:
        budget -= sizes[j - 1]
        j -= 1
    while j < len(messages) and messages[j].get("role") == "tool":  # its call was dropped
        budget += sizes[j]
        j += 1
    tail = messages[j:]
    if not tail and j > i:  # the last message alone does not fit: shrunk
        tail = [_shrink(messages[-1], budget)]
        j = len(messages) - 1
    dropped = {"dropped_messages": j - i, "dropped_bytes": sum(sizes[i:j])}
    marker = {"role": "system", "content": f"[clawgym] {dropped['dropped_messages']} messages "
              f"({dropped['dropped_bytes']} bytes) dropped here: the transcript exceeded the record limit "
              f"({max_bytes} bytes)", TRUNCATED_KEY: dropped}
    return head + [marker] + tail, dropped


def wire_messages(messages: list[dict]) -> list[dict]:
    """The transcript as sent to the endpoint: without clawgym's own keys, and with the malformed calls'
    arguments replaced by "{}" (servers that re-parse history would refuse the whole request otherwise;
    the model still sees what was wrong in the tool error that answers the call)."""
    out = []
    for m in messages:
        if TOKENS_KEY in m or TRUNCATED_KEY in m:
            m = {k: v for k, v in m.items() if k not in (TOKENS_KEY, TRUNCATED_KEY)}
        bad = m.get(MALFORMED_KEY)
        if not bad:
            out.append(m)
            continue
        idx = {b["index"] for b in bad}
        m = {k: v for k, v in m.items() if k != MALFORMED_KEY}
        m["tool_calls"] = [tc if i not in idx else
                           {**tc, "function": {"name": tc["function"]["name"] or "invalid", "arguments": "{}"}}
                           for i, tc in enumerate(m["tool_calls"])]
        out.append(m)
    return out


def _is_bad(content: str) -> bool:
    return content.startswith(("Unknown tool", "Invalid arguments", "Malformed tool call"))


def _limit_before_turn(res: LoopResult, limits: Limits, deadline: float, wall_error: str,
                       recorded: int) -> str | None:
    """Which limit stops the loop before its next request (turns, wall time, tokens, record size), or None."""
    if res.turns >= limits.max_turns:
        return f"turn limit ({limits.max_turns}) reached"
    if time.monotonic() >= deadline:
        return wall_error
    if res.prompt_tokens + res.completion_tokens >= limits.max_total_tokens:
        return f"token limit ({limits.max_total_tokens}) reached"
    if recorded > limits.max_record_bytes:
        return f"record size limit ({limits.max_record_bytes} bytes) reached"
    return None


def _token_kw(token_kw: dict, tito, wire: list[dict]) -> dict:
    """The request's token fields: `token_kw`, plus the re-sent history as the ids the model sampled when `tito`
    knows them."""
    ids = tito.prompt_ids(wire, TOOL_SCHEMAS) if tito is not None else None
    if ids is not None:
        return {"extra_body": {**token_kw["extra_body"], KV_FIELD: {"prompt_token_ids": ids}}}
    return token_kw


def _add_usage(res: LoopResult, usage) -> None:
    """Count a reply's token usage (what is not a non-negative number counts 0)."""
    if isinstance(usage, dict):
        res.prompt_tokens += _count(usage.get("prompt_tokens"))
        res.completion_tokens += _count(usage.get("completion_tokens"))


def _record_tokens(amsg: dict, resp: dict, choice: dict, tito, wire: list[dict]) -> None:
    """Keep the reply's sampled tokens on its record `amsg` (when the endpoint returned them) and tell `tito`,
    whose next turn re-sends them."""
    toks = token_record(resp, choice)
    if toks is not None:
        amsg[TOKENS_KEY] = toks
        if tito is not None:
            tito.remember(toks["prompt_token_ids"], toks["token_ids"], choice.get("finish_reason"),
                          wire, wire_messages([amsg])[0])  # the next turn re-sends them


def _answer_not_run(res: LoopResult, calls: list) -> int:
    """Answer each of `calls` of a reply that broke a bound as not run; returns the bytes added to the record."""
    added = 0
    for c in calls:
        tmsg = {"role": "tool", "tool_call_id": c.record["id"], "name": c.record["function"]["name"],
                "content": f"Not run: the reply exceeded the rollout's limits ({res.error})."}
        res.messages.append(tmsg)
        added += _size(tmsg) + 2
        res.tool_durations.append(0.0)
        res.tool_calls += 1
    return added


def _run_calls(res: LoopResult, calls: list, sandbox: Sandbox, limits: Limits, deadline: float,
               wall_error: str) -> tuple[int, bool, bool]:
    """Run a reply's tool calls in order and answer each (a malformed one, or one past the deadline, is answered
    as not run). Returns (bytes added to the record, whether every call was bad, whether time ran out)."""
    added = 0
    turn_bad = True
    out_of_time = False
    for c in calls:
        name = c.record["function"]["name"]
        left = deadline - time.monotonic()
        ts = time.monotonic()
        if out_of_time or left <= 0:
            out_of_time = True
            content = f"Not run: the rollout's {wall_error}."
            turn_bad = False
        elif c.problems:
            content = "Malformed tool call, not run: " + "; ".join(c.problems) + "."
        else:
            r = execute_tool(sandbox, name, c.args, max_timeout_s=min(limits.tool_timeout_s, left))
            content = r.content
            if not (r.is_error and _is_bad(content)):
                turn_bad = False
        res.tool_durations.append(time.monotonic() - ts)
        res.tool_calls += 1
        tmsg = {"role": "tool", "tool_call_id": c.record["id"], "name": name, "content": content}
        res.messages.append(tmsg)
        added += _size(tmsg) + 2
    return added, turn_bad, out_of_time


def run_builtin(task: Task, endpoint: Endpoint, sandbox: Sandbox, limits: Limits | None = None,
                retry: RetryPolicy | None = None, system_prompt: str | None = None) -> LoopResult:
    """Run the built-in tool-calling loop for `task` in `sandbox` against `endpoint` until the model
    answers without tool calls or a limit is hit. Never raises for infra/agent failures: they end up in
    `failure_class` / `error` of the returned LoopResult."""
    limits = limits or Limits()
    res = LoopResult()
    call_ids: set[str] = set()  # every tool-call id of the rollout so far (unique across turns)
    sp = (system_prompt or SYSTEM_PROMPT).format(workspace=sandbox.workspace)
    res.messages = [{"role": "system", "content": sp}, {"role": "user", "content": task.instruction}]
    client = ChatClient(endpoint, retry)
    extra_headers = {"X-Clawgym-Task": task.task_id}
    t0 = time.monotonic()
    deadline = t0 + limits.max_wall_s
    wall_error = f"wall-time limit ({limits.max_wall_s:g} s) reached"
    bad_streak = 0
    recorded = _size(res.messages)  # bytes of the transcript so far, as stored
    # the sampled token ids / log-probabilities, when the endpoint can return them (vLLM's request fields)
    token_kw = ({"extra_body": {"return_token_ids": True, "logprobs": True}}
                if getattr(endpoint, "token_ids", False) else {})
    tito = prompt_ids_for(endpoint)  # a re-sent history as the ids the model sampled (clawgym.agent.tito)
    try:
        while True:
            why = _limit_before_turn(res, limits, deadline, wall_error, recorded)
            if why:
                res.failure_class, res.error = "limit", why
                break
            wire = wire_messages(res.messages)
            kw = _token_kw(token_kw, tito, wire)
            try:
                resp = client.complete(messages=wire, tools=TOOL_SCHEMAS,
                                       max_tokens=limits.max_completion_tokens, temperature=0.0,
                                       extra_headers=extra_headers, deadline=deadline,
                                       max_response_bytes=limits.max_response_bytes, **kw)
            except AgentRequestError as e:
                res.failure_class, res.error = e.failure_class, str(e)
                break
            res.turns += 1
            _add_usage(res, resp.get("usage"))
            choice = resp["choices"][0]
            msg = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(msg, dict):  # the endpoint broke the protocol, not the model
                raise InfraError(f"endpoint returned a choice without a message: {str(_shallow(choice, 4))[:300]}")
            msg = _shallow(msg)
            msg, cut = _bound_reply(msg, limits)
            amsg, calls = _assistant_message(msg, res.turns, call_ids)
            if token_kw:
                _record_tokens(amsg, resp, choice, tito, wire)
            finish = choice.get("finish_reason")
            del resp, choice, msg  # the reply as received: only its bounded record is kept
            if cut:
                amsg[TRUNCATED_KEY] = cut
            res.messages.append(amsg)
            recorded += _size(amsg) + 2
            if cut:  # the reply broke a bound: recorded cut to the caps, none of its calls run
                res.failure_class, res.error = "limit", _cut_reason(cut, limits, bool(calls))
                recorded += _answer_not_run(res, calls)
                break
            if not calls:
                if not text_of(amsg.get("content")).strip():
                    res.failure_class, res.error = "agent_error", "model returned an empty answer"
                elif finish == "length":
                    res.failure_class, res.error = "limit", "completion cut at max_completion_tokens"
                break
            added, turn_bad, out_of_time = _run_calls(res, calls, sandbox, limits, deadline, wall_error)
            recorded += added
            if out_of_time or time.monotonic() >= deadline:
                res.failure_class, res.error = "limit", wall_error
                break
            bad_streak = bad_streak + 1 if turn_bad else 0
            if bad_streak >= limits.max_bad_calls:
                res.failure_class, res.error = "agent_error", f"{bad_streak} turns of malformed tool calls"
                break
    except InfraError as e:
        res.failure_class, res.error = "infra", str(e)
    except SandboxError as e:
        res.failure_class, res.error = "infra", f"sandbox: {e}"
    res.retries = client.retries
    bound_result(res, limits)
    return res


def bound_result(res: LoopResult, limits: Limits) -> LoopResult:
    """Keep `res.messages` under ``limits.max_record_bytes`` (:func:`bound_messages`); when they were cut, a
    scored rollout ends as `limit` (the error says so; infra stays infra) and tool_durations keep pace with the
    tool calls still in the transcript. Used by both runtimes."""
    msgs, dropped = bound_messages(res.messages, limits.max_record_bytes)
    if dropped is None:
        return res
    res.messages = msgs
    n_calls = count_tool_calls(msgs)
    if n_calls < len(res.tool_durations):  # the calls kept are the last ones (the head has none)
        res.tool_durations = res.tool_durations[len(res.tool_durations) - n_calls:]
    why = (f"record size limit ({limits.max_record_bytes} bytes): {dropped['dropped_messages']} messages "
           f"({dropped['dropped_bytes']} bytes) dropped from the middle of the transcript")
    if res.failure_class != "infra":
        res.error = why if res.failure_class == "ok" or not res.error or res.error.startswith("record size") \
            else f"{why}; also: {res.error}"
        res.failure_class = "limit"
    return res


def tool_types(messages: list[dict]) -> list[str]:
    """Names of the tools called in `messages`, each once, in order of first use."""
    seen: list[str] = []
    for m in messages:
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") if isinstance(tc, dict) else None
            n = fn.get("name") if isinstance(fn, dict) else None
            if n and n not in seen:
                seen.append(n)
    return seen


def count_tool_calls(messages: list[dict]) -> int:
    """Number of tool calls made by assistant messages in `messages`."""
    return sum(len(m.get("tool_calls") or []) for m in messages
               if m.get("role") == "assistant" and isinstance(m.get("tool_calls"), list))


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)


__all__ = ["Limits", "LoopResult", "run_builtin", "SYSTEM_PROMPT", "tool_types", "count_tool_calls", "wire_messages",
           "MALFORMED_KEY", "TOKENS_KEY", "TRUNCATED_KEY", "token_record", "bound_messages", "bound_result"]
