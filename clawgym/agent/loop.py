"""The builtin runtime: an OpenAI chat-completions tool loop executed inside a sandbox.

One turn = one model request. The loop stops when the model answers without tool calls (ok), when a
limit is hit (turns, total tokens, wall time → `limit`), when the model misbehaves beyond repair (empty
answers, repeated malformed calls, a request the endpoint refuses → `agent_error`) or when the endpoint
or sandbox fails (→ `infra`, raised as InfraError by the client and caught here).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from clawgym.agent.policies import AgentRequestError, ChatClient, Endpoint, InfraError, RetryPolicy
from clawgym.agent.tools import TOOL_SCHEMAS, execute_tool
from clawgym.sandbox.base import Sandbox, SandboxError

SYSTEM_PROMPT = """You are a personal AI assistant (a "Claw") working for the user inside their workspace.
Your workspace is {workspace}; relative paths are relative to it. Use the tools to inspect files, run
commands and create or edit files. Do the whole task yourself, write deliverables exactly where the user
asks, then reply with a short summary of what you did."""


@dataclass
class Limits:
    max_turns: int = 30
    max_total_tokens: int = 400_000  # prompt + completion tokens summed over the rollout
    max_wall_s: float = 900.0
    max_completion_tokens: int = 2048  # per request
    max_bad_calls: int = 5  # consecutive malformed/unknown tool calls before agent_error
    tool_timeout_s: float = 120.0


@dataclass
class LoopResult:
    messages: list[dict] = field(default_factory=list)
    turns: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failure_class: str = "ok"
    error: str | None = None
    tool_durations: list[float] = field(default_factory=list)
    retries: int = 0
    proxy_log: str | None = None  # openclaw runtime: the recording proxy's JSONL log


def _assistant_message(msg: Any) -> dict:
    out: dict[str, Any] = {"role": "assistant", "content": msg.content}
    if getattr(msg, "tool_calls", None):
        out["tool_calls"] = [{"id": tc.id, "type": "function",
                              "function": {"name": tc.function.name, "arguments": tc.function.arguments or "{}"}}
                             for tc in msg.tool_calls]
    return out


def run_builtin(task, endpoint: Endpoint, sandbox: Sandbox, limits: Limits | None = None,
                retry: RetryPolicy | None = None, system_prompt: str | None = None) -> LoopResult:
    limits = limits or Limits()
    res = LoopResult()
    sp = (system_prompt or SYSTEM_PROMPT).format(workspace=sandbox.workspace)
    res.messages = [{"role": "system", "content": sp}, {"role": "user", "content": task.instruction}]
    client = ChatClient(endpoint, retry)
    extra_headers = {"X-Clawgym-Task": task.task_id}
    t0 = time.monotonic()
    bad_streak = 0
    try:
        while True:
            if res.turns >= limits.max_turns:
                res.failure_class, res.error = "limit", f"turn limit ({limits.max_turns}) reached"
                break
            if time.monotonic() - t0 > limits.max_wall_s:
                res.failure_class, res.error = "limit", f"wall-time limit ({limits.max_wall_s:g} s) reached"
                break
            if res.prompt_tokens + res.completion_tokens >= limits.max_total_tokens:
                res.failure_class, res.error = "limit", f"token limit ({limits.max_total_tokens}) reached"
                break
            try:
                resp = client.complete(messages=res.messages, tools=TOOL_SCHEMAS,
                                       max_tokens=limits.max_completion_tokens, temperature=0.0,
                                       extra_headers=extra_headers)
            except AgentRequestError as e:
                res.failure_class, res.error = "agent_error", str(e)
                break
            res.turns += 1
            if resp.usage is not None:
                res.prompt_tokens += resp.usage.prompt_tokens or 0
                res.completion_tokens += resp.usage.completion_tokens or 0
            if not resp.choices:
                raise InfraError("endpoint returned no choices")
            choice = resp.choices[0]
            amsg = _assistant_message(choice.message)
            res.messages.append(amsg)
            calls = amsg.get("tool_calls") or []
            if not calls:
                if not (amsg.get("content") or "").strip():
                    res.failure_class, res.error = "agent_error", "model returned an empty answer"
                elif choice.finish_reason == "length":
                    res.failure_class, res.error = "limit", "completion cut at max_completion_tokens"
                break
            turn_bad = True
            for tc in calls:
                name, args = tc["function"]["name"], tc["function"]["arguments"]
                ts = time.monotonic()
                r = execute_tool(sandbox, name, args)
                res.tool_durations.append(time.monotonic() - ts)
                res.tool_calls += 1
                if not (r.is_error and (r.content.startswith("Unknown tool") or
                                        r.content.startswith("Invalid arguments"))):
                    turn_bad = False
                res.messages.append({"role": "tool", "tool_call_id": tc["id"], "name": name, "content": r.content})
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
    seen: list[str] = []
    for m in messages:
        for tc in m.get("tool_calls") or []:
            n = tc.get("function", {}).get("name")
            if n and n not in seen:
                seen.append(n)
    return seen


def count_tool_calls(messages: list[dict]) -> int:
    return sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)


__all__ = ["Limits", "LoopResult", "run_builtin", "SYSTEM_PROMPT", "tool_types", "count_tool_calls"]
