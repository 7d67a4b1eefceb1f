"""The trajectory rebuild from a recording proxy's JSONL log (clawgym.agent.proxy.RecordingProxy).

The trajectory rule (:func:`rebuild_sessions`) -- the log is append-only and every request is recorded as
sent, but the trajectory is never taken from a client's claims about the past ("longest request wins" was
forgeable). It is the chain of turns the proxy actually answered, in log order:

* assistant turns are only ever the proxy's own responses (as logged from upstream); an assistant message a
  client sends that the proxy never returned is not in the trajectory;
* each answered request contributes only its *new* client messages: the messages after the
  previously-answered conversation it extends (its request messages + the reply the proxy returned, compared
  canonically: internal-context/heartbeat user turns dropped, text content, tool-call ids as OpenClaw
  re-sends them (`_cid`: ``call_ab`` becomes ``callab``, a longer id is cut to 40 characters), JSON
  arguments re-serialised, tool results by tool_call_id and text). A client message, once recorded, is never
  replaced by a later request's version;
* tool results are kept only for tool calls the proxy returned, once each, under the proxy's own call id; a
  result whose id could name more than one returned call (two ids equal after `_cid`, an id repeated in two
  replies) pairs with none (``ambiguous_tool_result``), a second result for a call is not kept
  (``duplicate_tool_result``), both listed in ``divergence``;
* a request that extends no answered conversation (history rewritten, assistant turns forged, fake tool
  calls, a branch off an older turn) is still answered and logged, but only its messages after the longest
  prefix it shares with an answered conversation (and after its last assistant message) are taken, and the
  session's ``divergence`` list says what happened (seq, kind, detail); fake assistant turns and tool
  results are listed there, not kept;
* requests of another conversation (a different first user message and no assistant turn the proxy
  returned in the main conversation: summaries, titles) are side requests: counted, not in the trajectory;
  heartbeat turns, cron sessions and limit answers are dropped as before.
"""

import json
import os
import re
from typing import Any

from clawgym.agent.messages import text_of

HEARTBEAT_MARKERS = ("HEARTBEAT.md", "HEARTBEAT_OK")
INTERNAL_MARKERS = ("<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>", "<internal-context>", "[internal]",
                    "Pre-compaction memory flush", "<system-reminder>")


def read_log(path: str) -> list[dict]:
    """The records of a proxy JSONL log ([] when the file does not exist); lines cut by a crash are skipped."""
    out: list[dict] = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut by a crash
    return out


def _is_heartbeat(text: str) -> bool:
    return any(m in text for m in HEARTBEAT_MARKERS)


def _is_internal(text: str) -> bool:
    return any(m in text for m in INTERNAL_MARKERS)


def _first_user_text(messages: list[dict]) -> str:
    """The conversation's first user message: the task (never taken for a heartbeat, whatever it mentions)."""
    for m in messages:
        if m.get("role") == "user":
            return text_of(m.get("content"))
    return ""


def _is_heartbeat_request(messages: list[dict]) -> bool:
    """A heartbeat poll: its last user message names a heartbeat marker and is not the conversation's first (a task
    that mentions HEARTBEAT.md is a task, not a poll)."""
    users = [m for m in messages if m.get("role") == "user"]
    if len(users) < 2:
        return False
    last = text_of(users[-1].get("content"))
    return _is_heartbeat(last) and not _is_internal(last)


def clean_messages(messages: list[dict]) -> list[dict]:
    """Remove heartbeat prompts with their HEARTBEAT_OK replies and internal-context user turns."""
    out: list[dict] = []
    skip_reply = False
    first_user = True
    for m in messages:
        role, text = m.get("role"), text_of(m.get("content"))
        if role == "user" and first_user and not _is_internal(text):  # the task: never taken for a heartbeat
            first_user = False
            out.append(m)
            continue
        if role == "user" and _is_heartbeat(text):
            skip_reply = True  # the heartbeat's HEARTBEAT_OK answer goes too
            continue
        if role == "user" and _is_internal(text):
            continue
        if skip_reply and role == "assistant" and not m.get("tool_calls"):
            skip_reply = False
            continue
        skip_reply = False
        out.append(m)
    return out


# OpenClaw (2026.9.6, src/agents/tool-call-id.ts) re-sends every tool-call id of its openai-completions history
# through its "strict" transcript policy: `sanitizeToolCallId(id, "strict")` (a missing / non-string / empty id
# becomes "defaulttoolid"; a native Kimi id ``functions.<name>:<n>`` is kept as is; any other keeps only its ASCII
# letters and digits, "sanitizedtoolid" when none are left), then `makeUniqueToolId` cuts it to 40 characters.
# The cut matters: vLLM's ids (``chatcmpl-tool-`` + 32 hex digits: 44 letters and digits) come back 40 long.
# Only the renames `makeUniqueToolId` makes for uniqueness within one transcript (two ids equal after the cut, an
# id repeated in two turns) are not mirrored: a renamed result pairs with no call (fake_tool_result), and one named
# by the shared form could be either call's, so it pairs with none either (ambiguous_tool_result, `_named`).
_OPENCLAW_ID_MAX = 40
_KIMI_TOOL_CALL_ID = re.compile(r"functions\.[A-Za-z0-9_-]+:[0-9]+")
# what OpenClaw re-sends for a Kimi id over 40 characters (a long tool name:
# "functions.mcp__filesystem__read_text_file:0") is its first 40, no longer a whole Kimi id: `_cid` keeps it as
# is, so that what OpenClaw sends names the call it came from
_KIMI_CUT = re.compile(r"functions\.[A-Za-z0-9_-]+(:[0-9]*)?")


def _cid(call_id: Any) -> str:
    """A tool-call id as OpenClaw sends it back (its strict rule, above): two ids name the same call when their
    `_cid`s are equal (what OpenClaw sends is its own `_cid`)."""
    if not isinstance(call_id, str) or not call_id:
        return "defaulttoolid"
    if _KIMI_TOOL_CALL_ID.fullmatch(call_id) or (len(call_id) == _OPENCLAW_ID_MAX and _KIMI_CUT.fullmatch(call_id)):
        return call_id[:_OPENCLAW_ID_MAX]
    return (re.sub(r"[^A-Za-z0-9]", "", call_id) or "sanitizedtoolid")[:_OPENCLAW_ID_MAX]


def _named(raw: str, returned: list[tuple]) -> list[int]:
    """The returned tool calls (indices into `returned`: (the proxy's id, its `_cid`) of each, in log order) that a
    result's tool_call_id `raw` may name. An id equal to a call's own id names that call, and any other call whose
    `_cid` it is (what OpenClaw would send for that one); else it names every call with its `_cid`. More than one
    is ambiguous: the caller pairs it with none."""
    exact = [i for i, (pid, _) in enumerate(returned) if isinstance(pid, str) and pid == raw]
    if exact:
        return exact + [i for i, (_, c) in enumerate(returned) if i not in exact and c == raw]
    cid = _cid(raw)
    return [i for i, (_, c) in enumerate(returned) if c == cid]


def _cargs(args: Any) -> str:
    if isinstance(args, str):
        try:
            return json.dumps(json.loads(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except (ValueError, TypeError):
            return args.strip()
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def canonical(m: dict) -> tuple:
    """What two versions of a message must share to count as the same message (see the module docstring)."""
    role = m.get("role")
    if role == "tool":  # its text too: a result edited in a re-sent history is another message
        return ("tool", _cid(m.get("tool_call_id")), text_of(m.get("content")))
    if role == "assistant":
        calls = tuple((_cid(tc.get("id")), tc["function"].get("name"), _cargs(tc["function"].get("arguments")))
                      for tc in _calls_of(m.get("tool_calls")))
        return ("assistant", text_of(m.get("content")).strip(), calls)
    return (str(role), text_of(m.get("content")).strip())


def _usage_tokens(v: Any) -> int:
    """A usage count as the token limit adds it: the endpoint's claim, so never negative (a refund of the budget)
    and never an exception (a string, a float, a list: 0)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return 0
    return max(0, min(int(v), 2**62)) if abs(v) != float("inf") else 0


def _calls_of(calls: Any) -> list[dict]:
    """A reply's tool calls as objects with a function object: the endpoint's JSON is any shape (a call that is
    not an object is dropped, a function that is not an object becomes an empty one: answered as malformed)."""
    if not isinstance(calls, list):
        return []
    out = []
    for tc in calls:
        if isinstance(tc, dict):
            out.append(tc if isinstance(tc.get("function"), dict)
                       else {**tc, "function": {"name": "", "arguments": ""}})
    return out


def _reply_of(e: dict) -> dict:
    choices = e["response"].get("choices")
    choice: dict = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    given = choice.get("message")
    msg: dict = given if isinstance(given, dict) else {}
    final: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
    calls = _calls_of(msg.get("tool_calls"))
    if calls:
        final["tool_calls"] = calls
    # the sampled tokens, when the upstream returned them (streamed or not): from the proxy's own record of the
    # upstream response, never from a request; not part of `canonical` (the chain is matched on text)
    from clawgym.agent.loop import TOKENS_KEY, token_record

    toks = token_record(e["response"], choice) if choice else None
    if toks is not None and any(type(i) is not int or i < 0 for k in ("prompt_token_ids", "token_ids")
                                for i in toks[k]):
        toks = None  # not token ids (bools, negatives): nothing token-exact to keep
    if toks is not None and toks["logprobs"] and not all(-1e30 < x <= 0.0 for x in toks["logprobs"]):
        toks = {**toks, "logprobs": None}  # not log-probabilities (NaN, inf, positive): the ids alone are kept
    if toks is not None and e.get("limit") is None and not e["response"].get("clawgym_other_choices"):
        final[TOKENS_KEY] = toks
    return final


def _lcp(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _is_side(msgs: list[dict], main_first: str, main_replies: set) -> bool:
    if _first_user_text(msgs) == main_first:
        return False
    return not any(m.get("role") == "assistant" and canonical(m) in main_replies for m in msgs)


TOKEN_RECORD_SHARE = 4  # a session's sampled-token records may take 1/4 of Limits().max_record_bytes


def _drop_token_records(messages: list[dict], max_bytes: int) -> str | None:
    """Strip the sampled-token records (TOKENS_KEY) of `messages` in place when together they are over
    `max_bytes` of JSON: they are bookkeeping (a row without them is re-tokenized from its text) and must never
    push the transcript itself over the record cap. Returns why, or None when they fit."""
    from clawgym.agent.loop import TOKENS_KEY

    with_tokens = [m for m in messages if isinstance(m.get(TOKENS_KEY), dict)]
    n = 0
    for m in with_tokens:
        t = m[TOKENS_KEY]
        # ints only (checked in _reply_of): at most 21 characters and a separator each
        n += sum(len(str(i)) + 2 for k in ("prompt_token_ids", "token_ids") for i in t.get(k) or [])
        n += 24 * len(t.get("logprobs") or [])
        if n > max_bytes:
            break
    if n <= max_bytes:
        return None
    for m in with_tokens:
        del m[TOKENS_KEY]
    return f"sampled-token records over {max_bytes} bytes: dropped from {len(with_tokens)} turns (re-tokenized)"


def _by_session(entries: list[dict]) -> tuple[dict[str, list[dict]], dict[str, int]]:
    """The request records of the log by session, and the number of refusals of each session."""
    by_session: dict[str, list[dict]] = {}
    refused: dict[str, int] = {}
    for e in entries:
        if e.get("kind"):  # refusals and other non-request lines
            if e.get("kind") == "refused":
                s = str(e.get("session", ""))
                refused[s] = refused.get(s, 0) + 1
            continue
        by_session.setdefault(str(e.get("session", "default")), []).append(e)
    return by_session, refused


def _main_turns(es: list[dict]) -> tuple[list[tuple[dict, list[dict]]], int, int]:
    """The answered requests of one session's main conversation, in seq order, each with its request messages:
    (kept, how many were dropped, how many of those were side requests). Failed, limit-answered, heartbeat and
    side requests are dropped."""
    ok = [e for e in es if e.get("status") == 200 and isinstance(e.get("response"), dict)
          and isinstance(e.get("request"), dict) and not e.get("limit")]
    dropped = len(es) - len(ok)
    main_first: str | None = None
    main_replies: set = set()
    side = 0
    kept = []
    for e in sorted(ok, key=lambda e: e.get("seq", 0)):
        msgs = [m for m in (e["request"].get("messages") or []) if isinstance(m, dict)]
        if _is_heartbeat_request(msgs):
            dropped += 1
            continue
        if main_first is None:
            main_first = _first_user_text(msgs)
        elif _is_side(msgs, main_first, main_replies):  # a side conversation (summary, title …)
            dropped += 1
            side += 1
            continue
        kept.append((e, msgs))
        main_replies.add(canonical(_reply_of(e)))
    return kept, dropped, side


class _Chain:
    """The trajectory of one session as its answered turns are added in order (the rule of the module
    docstring): the messages kept, and the divergence of each request from the conversation answered so far."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.divergence: list[dict] = []
        self.chain: list[tuple] = []  # (seq, canonical request, canonical reply) of each answered turn
        self.returned: list[tuple] = []  # (the proxy's id, its canonical id) of every tool call it returned, in order
        self.answered: set = set()  # indices into `returned` whose result is in the trajectory
        self.call_names: list = []  # the function name of each returned call (parallel to `returned`)

    def add(self, e: dict, msgs: list[dict]) -> None:
        """One answered request (`e`, its request messages `msgs`): its new client messages, then its reply."""
        seq = e.get("seq", 0)
        req = clean_messages(msgs)
        creq = [canonical(m) for m in req]
        reply = _reply_of(e)
        start = self._start(seq, req, creq)
        for i, m in enumerate(req[start:], start):
            role = m.get("role")
            if role == "assistant":
                self.divergence.append({"seq": seq, "kind": "forged_assistant",
                                        "detail": f"message {i}: an assistant turn the proxy never returned"})
                continue
            if role == "tool":
                paired = self._tool_result(seq, i, m)
                if paired is None:
                    continue
                m = paired
            self.messages.append(m)
        for tc in reply.get("tool_calls") or []:  # an id-less call too: it makes the default id ambiguous
            self.returned.append((tc.get("id"), _cid(tc.get("id"))))
            fn = tc.get("function")
            self.call_names.append(fn.get("name") if isinstance(fn, dict) else None)
        self.messages.append(reply)
        self.chain.append((seq, creq, canonical(reply)))

    def _start(self, seq: int, req: list[dict], creq: list) -> int:
        """Where the new messages of request `req` (canonical: `creq`) start: after the answered conversation it
        extends; a branch off an older turn or a rewritten history is listed in `divergence`."""
        chain = self.chain
        start, parent = 0, None
        for t in reversed(chain):
            exp = t[1] + [t[2]]
            if creq[:len(exp)] == exp:
                parent, start = t, len(exp)
                break
        if parent is not None and parent is not chain[-1]:
            latest = chain[-1][0]
            self.divergence.append({"seq": seq, "kind": "branch",
                                    "detail": f"continues the turn of seq {parent[0]}, not the latest ({latest})"})
        elif parent is None and chain:
            best = max(_lcp(creq, t[1] + [t[2]]) for t in chain)
            last_a = max((i for i, m in enumerate(req) if m.get("role") == "assistant"), default=-1)
            start = max(best, last_a + 1)
            self.divergence.append({"seq": seq, "kind": "rewritten_history",
                                    "detail": f"does not extend an answered conversation (differs at message "
                                              f"{best}); messages before {start} ignored"})
        return start

    def _tool_result(self, seq: int, i: int, m: dict) -> dict | None:
        """Tool result `m` (message `i` of request `seq`) under the proxy's own call id and name, or None when it
        answers no call the proxy returned, could answer several, or answers one already answered (listed in
        `divergence`)."""
        returned = self.returned
        raw: Any = m.get("tool_call_id")
        # a client always names the call (OpenClaw sends a string): a result naming none pairs with
        # no call, even one whose id `_cid` maps to the same default
        named = _named(raw, returned) if isinstance(raw, str) and raw else []
        if len(named) > 1:  # fail closed: which call it answers is not known
            self.divergence.append({"seq": seq, "kind": "ambiguous_tool_result",
                                    "detail": f"message {i}: result id {raw[:80]!r} names {len(named)} "
                                              f"tool calls the proxy returned; paired with none"})
            return None
        if not named or not returned[named[0]][0]:
            self.divergence.append({"seq": seq, "kind": "fake_tool_result",
                                    "detail": f"message {i}: result for a tool call the proxy never "
                                              f"returned ({str(raw)[:80]})"})
            return None
        if named[0] in self.answered:
            self.divergence.append({"seq": seq, "kind": "duplicate_tool_result",
                                    "detail": f"message {i}: another result for tool call "
                                              f"{str(returned[named[0]][0])[:80]}; the first one is kept"})
            return None
        self.answered.add(named[0])
        m = {**m, "tool_call_id": returned[named[0]][0]}
        if "name" in m:  # the client writes it: the returned call's own name, never the client's
            m["name"] = self.call_names[named[0]]
        return m


def rebuild_sessions(entries: list[dict], max_token_bytes: int | None = None) -> dict[str, dict]:
    """One trajectory per session, built by the rule of the module docstring: {session: {messages, tools,
    n_requests, prompt_tokens, completion_tokens, dropped, model, divergence, side_requests, refused,
    tokens_dropped}}.
    `divergence` lists the requests that did not extend the conversation the proxy had answered
    ({seq, kind, detail}); an empty list means the client's view and the proxy's agree. The assistant turns'
    sampled-token records together stay under `max_token_bytes` (default: a TOKEN_RECORD_SHARE-th of
    Limits().max_record_bytes) or are all dropped, `tokens_dropped` saying why (None when kept)."""
    if max_token_bytes is None:
        from clawgym.agent.loop import Limits

        max_token_bytes = Limits().max_record_bytes // TOKEN_RECORD_SHARE
    by_session, refused = _by_session(entries)
    out: dict[str, dict] = {}
    for session, es in by_session.items():
        if session.startswith("cron:") or ":cron:" in session:
            continue
        kept, dropped, side = _main_turns(es)
        if not kept:
            continue
        chain = _Chain()
        for e, msgs in kept:
            chain.add(e, msgs)
        first = kept[0][0]
        messages = clean_messages(chain.messages)
        tokens_dropped = _drop_token_records(messages, max_token_bytes)
        usages = [u if isinstance(u := e["response"].get("usage"), dict) else {} for e, _ in kept]
        pt = sum(_usage_tokens(u.get("prompt_tokens")) for u in usages)
        ct = sum(_usage_tokens(u.get("completion_tokens")) for u in usages)
        out[session] = {"messages": messages, "tools": first["request"].get("tools") or [],
                        "n_requests": len(kept), "prompt_tokens": pt, "completion_tokens": ct,
                        "dropped": dropped, "model": first["request"].get("model"),
                        "divergence": chain.divergence, "side_requests": side, "refused": refused.get(session, 0),
                        "tokens_dropped": tokens_dropped}
    return out


__all__ = ["read_log", "rebuild_sessions", "clean_messages", "canonical", "HEARTBEAT_MARKERS", "INTERNAL_MARKERS"]
