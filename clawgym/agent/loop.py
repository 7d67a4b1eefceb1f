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
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from clawgym.agent.messages import text_of
from clawgym.agent.policies import AgentRequestError, ChatClient, Endpoint, InfraError, RetryPolicy
from clawgym.agent.tools import TOOL_SCHEMAS, execute_tool
from clawgym.sandbox.base import Sandbox, SandboxError

SYSTEM_PROMPT = """You are a personal AI assistant (a "Claw") working for the user inside their workspace.
Your workspace is {workspace}; relative paths are relative to it. Use the tools to inspect files, run
commands and create or edit files. Do the whole task yourself, write deliverables exactly where the user
asks, then reply with a short summary of what you did."""

MALFORMED_KEY = "clawgym_malformed_tool_calls"  # on an assistant message: the original malformed calls
# on an assistant message, when the endpoint returned them (`Endpoint.token_ids`: the embedded server, vLLM):
# {"prompt_token_ids": [...], "token_ids": [...], "logprobs": [...] | None} exactly as sampled
TOKENS_KEY = "clawgym_tokens"


@dataclass
class Limits:
    """Budgets of one rollout: turns, tokens, wall time, malformed-call streak and per-exec timeout."""

    max_turns: int = 30
    max_total_tokens: int = 400_000  # prompt + completion tokens summed over the rollout
    max_wall_s: float = 900.0  # the whole rollout: model requests and tool calls
    max_completion_tokens: int = 2048  # per request
    max_bad_calls: int = 5  # consecutive turns of malformed/unknown/badly-argued tool calls before agent_error
    tool_timeout_s: float = 120.0  # the most one exec may run, whatever timeout the model asks for


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


def _assistant_message(msg: dict, turn: int) -> tuple[dict, list[_Call]]:
    """The transcript entry for the model's reply (a dict from the endpoint's JSON) and its checked calls."""
    out: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
    raw_calls = msg.get("tool_calls")
    if raw_calls is None or raw_calls == []:
        return out, []
    if not isinstance(raw_calls, list):
        raw_calls = [raw_calls]
    seen: set[str] = set()
    calls = [_check_call(raw, i, turn, seen) for i, raw in enumerate(raw_calls)]
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


def wire_messages(messages: list[dict]) -> list[dict]:
    """The transcript as sent to the endpoint: without clawgym's own keys, and with the malformed calls'
    arguments replaced by "{}" (servers that re-parse history would refuse the whole request otherwise;
    the model still sees what was wrong in the tool error that answers the call)."""
    out = []
    for m in messages:
        if TOKENS_KEY in m:
            m = {k: v for k, v in m.items() if k != TOKENS_KEY}
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


def run_builtin(task, endpoint: Endpoint, sandbox: Sandbox, limits: Limits | None = None,
                retry: RetryPolicy | None = None, system_prompt: str | None = None) -> LoopResult:
    """Run the built-in tool-calling loop for `task` in `sandbox` against `endpoint` until the model
    answers without tool calls or a limit is hit. Never raises for infra/agent failures: they end up in
    `failure_class` / `error` of the returned LoopResult."""
    limits = limits or Limits()
    res = LoopResult()
    sp = (system_prompt or SYSTEM_PROMPT).format(workspace=sandbox.workspace)
    res.messages = [{"role": "system", "content": sp}, {"role": "user", "content": task.instruction}]
    client = ChatClient(endpoint, retry)
    extra_headers = {"X-Clawgym-Task": task.task_id}
    t0 = time.monotonic()
    deadline = t0 + limits.max_wall_s
    wall_error = f"wall-time limit ({limits.max_wall_s:g} s) reached"
    bad_streak = 0
    # the sampled token ids / log-probabilities, when the endpoint can return them (vLLM's request fields)
    token_kw = ({"extra_body": {"return_token_ids": True, "logprobs": True}}
                if getattr(endpoint, "token_ids", False) else {})
    try:
        while True:
            if res.turns >= limits.max_turns:
                res.failure_class, res.error = "limit", f"turn limit ({limits.max_turns}) reached"
                break
            if time.monotonic() >= deadline:
                res.failure_class, res.error = "limit", wall_error
                break
            if res.prompt_tokens + res.completion_tokens >= limits.max_total_tokens:
                res.failure_class, res.error = "limit", f"token limit ({limits.max_total_tokens}) reached"
                break
            try:
                resp = client.complete(messages=wire_messages(res.messages), tools=TOOL_SCHEMAS,
                                       max_tokens=limits.max_completion_tokens, temperature=0.0,
                                       extra_headers=extra_headers, deadline=deadline, **token_kw)
            except AgentRequestError as e:
                res.failure_class, res.error = e.failure_class, str(e)
                break
            res.turns += 1
            usage = resp.get("usage")
            if isinstance(usage, dict):
                res.prompt_tokens += _count(usage.get("prompt_tokens"))
                res.completion_tokens += _count(usage.get("completion_tokens"))
            choice = resp["choices"][0]
            msg = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(msg, dict):  # the endpoint broke the protocol, not the model
                raise InfraError(f"endpoint returned a choice without a message: {str(choice)[:300]}")
            amsg, calls = _assistant_message(msg, res.turns)
            toks = token_record(resp, choice) if token_kw else None
            if toks is not None:
                amsg[TOKENS_KEY] = toks
            res.messages.append(amsg)
            if not calls:
                if not text_of(amsg.get("content")).strip():
                    res.failure_class, res.error = "agent_error", "model returned an empty answer"
                elif choice.get("finish_reason") == "length":
                    res.failure_class, res.error = "limit", "completion cut at max_completion_tokens"
                break
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
                res.messages.append({"role": "tool", "tool_call_id": c.record["id"], "name": name,
                                     "content": content})
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
           "MALFORMED_KEY", "TOKENS_KEY", "token_record"]
