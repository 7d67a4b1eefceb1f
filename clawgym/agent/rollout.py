"""Rollouts: one task × one policy × one runtime → a Rollout record (trajectory, diff, verification, score).

    run_rollout(task, policy, factory, RolloutSettings(limits=..., runtime="builtin"|"openclaw"), judge=None)
        -> Rollout

The agent phase is the runtime's (clawgym.agent.runtimes: get_runtime(settings.runtime)); run_rollout closes a
runtime it made itself, a caller running many rollouts passes one (``runtime=``) and closes it (run_rollouts does).

Failure classes (what a score means):
- ``ok``: the agent ended on its own; scored.
- ``agent_error`` / ``limit``: the model's own failure (malformed or unknown tool calls, empty answers, a
  limit hit); scored like any other run (normally low), never excluded.
- ``infra``: OUR machinery failed — decided structurally by which component raised: the endpoint client
  (InfraError: unreachable, 5xx/429 after retries), the sandbox (SandboxError: could not start, died,
  could not be prepared for verification) or a bug in the harness (any other exception outside the
  verifier's own checks). Never by matching text in what the agent or the verifier printed. Retried at
  rollout level (`attempts`); if it persists, stored with ``score=None`` — never 0, excluded from means.
- ``unjudged``: the task's score needs a rubric rule no available judge can score (offline, no proxy);
  ``score=None``, counted and excluded from means.
Everything stored is passed through secret redaction.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from clawgym.agent.loop import Limits, bound_messages, count_tool_calls, tool_types
from clawgym.agent.messages import text_of
from clawgym.agent.policies import Endpoint, PolicySpec, get_policy, open_endpoint
from clawgym.agent.runtimes import AgentRuntime, get_runtime
from clawgym.agent.secrets import redact, redact_obj
from clawgym.agent.settings import RolloutSettings, Runtime
from clawgym.agent.tools import TOOL_SCHEMAS
from clawgym.sandbox.base import SandboxError, SandboxFactory
from clawgym.verify.result import VerificationResult

FailureClass = Literal["ok", "agent_error", "limit", "infra", "unjudged"]
SCORED_CLASSES = ("ok", "agent_error", "limit")


class Rollout(BaseModel):
    """One rollout of a policy on a task: transcript, usage, workspace changes, verification and score."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    rollout_id: str = Field(default_factory=lambda: uuid.uuid4().hex[:16])
    """This rollout's id (16 hex digits)."""
    task_id: str
    """The task rolled out."""
    suite: str = "default"
    """The task's suite (procedural, clawgym, pinchbench, harbor, ...)."""
    category: str = ""
    """The task's category."""
    family: str = ""
    """The task's family (procedural tasks)."""
    route: str = ""
    """How the task was made (persona, skill, procedural, imported)."""
    policy: str
    """The policy's (model's) name."""
    runtime: str = "builtin"
    """The agent runtime that ran the agent phase (builtin, openclaw)."""
    messages: list[dict] = Field(default_factory=list)
    """The transcript: OpenAI-style chat messages."""
    tools: list[dict] = Field(default_factory=list)
    """The tool schemas the agent was offered."""
    turns: int = 0
    """Model turns taken."""
    tool_calls: int = 0
    """Tool calls made."""
    tool_types: list[str] = Field(default_factory=list)
    """The distinct tools called."""
    prompt_tokens: int = 0
    """Prompt tokens over all turns (the endpoint's usage)."""
    completion_tokens: int = 0
    """Completion tokens over all turns (the endpoint's usage)."""
    wall_s: float = 0.0
    """Wall time of the rollout, in seconds."""
    failure_class: FailureClass = "ok"
    """ok | agent_error | limit | infra | unjudged: infra and unjudged are counted, never scored."""
    error: str | None = None
    """What went wrong, if anything."""
    workspace_diff: list[dict] = Field(default_factory=list)
    """The files the agent changed: {path, change: added | modified | deleted, size}."""
    verification: VerificationResult | None = None
    """The verification; None when not verified (infra before the check)."""
    score: float | None = None
    """The task score in [0, 1]; None when not scored."""
    attempt: int = 1
    """Which try this is (infra failures are retried)."""
    infra_errors: list[str] = Field(default_factory=list)
    """Errors of earlier, retried attempts."""
    proxy_log: str | None = None
    """openclaw runtime: path of the recording proxy's log."""
    tool_durations: list[float] = Field(default_factory=list)
    """builtin runtime: seconds per tool call, in order."""
    meta: dict = Field(default_factory=dict)
    """Runtime facts (openclaw: proxy divergence, refused requests)."""
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    """When the rollout was made (UTC)."""

    def to_row(self, shard: int = 0, run_id: str = "", max_record_bytes: int | None = None) -> dict[str, Any]:
        """A flat row in the lake's `trajectories` schema (nested values as JSON text). Never unbounded: a
        transcript over `max_record_bytes` (default Limits().max_record_bytes) is stored with its middle
        dropped (clawgym.agent.loop.bound_messages) and a scored rollout is stored as `limit`
        (:func:`bound_record` does the same on the Rollout itself)."""
        cap = max_record_bytes or Limits().max_record_bytes
        fc, err, n_calls = self.failure_class, self.error, self.tool_calls
        messages_json = json.dumps(self.messages, ensure_ascii=False, default=str)
        if len(messages_json) > cap // 4 and len(messages_json.encode("utf-8", "surrogatepass")) > cap:
            msgs, dropped = bound_messages(self.messages, cap)
            messages_json = json.dumps(msgs, ensure_ascii=False, default=str)
            n_calls = count_tool_calls(msgs)
            fc, err = _record_limit(fc, err, cap, dropped)
        return {
            "rollout_id": self.rollout_id, "task_id": self.task_id, "suite": self.suite, "policy": self.policy,
            "shard": shard, "category": self.category, "family": self.family, "route": self.route,
            "score": self.score, "failure_class": fc, "n_turns": self.turns,
            "n_tool_calls": n_calls, "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens, "duration_s": self.wall_s, "error": err,
            "messages_json": messages_json,
            "tools_json": json.dumps(self.tools, ensure_ascii=False),
            "diff_json": json.dumps(self.workspace_diff, ensure_ascii=False, default=_fsdecode),
            "verification_json": self.verification_json(),
            "run_id": run_id, "created_at": self.created_at,
            "meta_json": json.dumps(self.meta, ensure_ascii=False, default=str) if self.meta else None,
        }

    def verification_json(self) -> str | None:
        """The verification's record (VerificationResult.to_dict) as JSON text: the lake's `verification_json`."""
        if self.verification is None:
            return None
        return json.dumps(self.verification.to_dict(), ensure_ascii=False, default=str)

    def steps(self, shard: int = 0) -> list[dict[str, Any]]:
        """One row per tool call in the lake's `steps` schema (call, arguments and its result)."""
        # each call is answered by the first tool message after it with its id (ids can repeat across turns in
        # records of other runtimes: a later answer never pairs with an earlier call)
        answer: dict[int, dict] = {}
        pending: dict[str, list[int]] = {}
        for i, m in enumerate(self.messages):
            if m.get("role") == "assistant":
                for j, tc in enumerate(m.get("tool_calls") or []):
                    pending.setdefault(str(tc.get("id")), []).append(i * 100_000 + j)
            elif m.get("role") == "tool":
                q = pending.get(str(m.get("tool_call_id")))
                if q:
                    answer[q.pop(0)] = m
        rows: list[dict[str, Any]] = []
        for i, m in enumerate(self.messages):
            if m.get("role") != "assistant":
                continue
            for j, tc in enumerate(m.get("tool_calls") or []):
                fn = tc.get("function") or {}
                res = answer.get(i * 100_000 + j) or {}
                rows.append({"rollout_id": self.rollout_id, "task_id": self.task_id, "policy": self.policy,
                             "shard": shard, "step": len(rows), "role": "assistant",
                             "content": m.get("content") or "", "tool_name": fn.get("name"),
                             "tool_args_json": fn.get("arguments") if isinstance(fn.get("arguments"), str)
                             else json.dumps(fn.get("arguments")),
                             "tool_result": text_of(res.get("content")),
                             "duration_s": self.tool_durations[len(rows)]
                             if len(rows) < len(self.tool_durations) else None})
        return rows




MAX_ERROR_CHARS = 8192  # a stored error message
UNLISTED_DIFF = "unlisted"  # the `change` of a workspace_diff entry standing for entries not listed


def _record_limit(failure_class: FailureClass, error: str | None, cap: int,
                  dropped: dict | None) -> tuple[FailureClass, str | None]:
    """(class, error) of a rollout whose transcript was cut to `cap` bytes: a scored class becomes `limit`
    (infra and unjudged keep theirs: their score is None, `limit` is scored)."""
    why = (f"record size limit ({cap} bytes): {(dropped or {}).get('dropped_messages', 0)} messages "
           f"({(dropped or {}).get('dropped_bytes', 0)} bytes) dropped from the middle of the transcript")
    if error and error.startswith("record size limit"):
        why = error
    elif error and failure_class != "ok":
        why = f"{why}; also: {error}"
    return ("limit" if failure_class in SCORED_CLASSES else failure_class), why[:MAX_ERROR_CHARS]


def bound_record(ro: Rollout, limits: Limits | None = None) -> Rollout:
    """Bound what `ro` will store (in place; returns it), whatever its runtime produced: the transcript under
    ``limits.max_record_bytes`` (bytes of its JSON; the middle dropped with a marker message,
    clawgym.agent.loop.bound_messages; a scored rollout becomes `limit` with an error saying so, its score kept:
    the workspace was verified as it was), the workspace diff under an eighth of it (the entries past that
    replaced by one ``unlisted`` entry), and the error under MAX_ERROR_CHARS. Call it on every attempt's
    Rollout before it is redacted or stored."""
    limits = limits or Limits()
    cap = limits.max_record_bytes
    if ro.error and len(ro.error) > MAX_ERROR_CHARS:
        ro.error = ro.error[:MAX_ERROR_CHARS - 20] + " …[cut]"
    diff_cap = cap // 8
    if len(ro.workspace_diff) * 64 > diff_cap // 4 and _json_bytes(ro.workspace_diff) > diff_cap:
        kept, size = [], 2
        for d in ro.workspace_diff:
            n = _json_bytes(d) + 2  # + ", "
            if size + n > diff_cap - 300:
                break
            kept.append(d)
            size += n
        left = len(ro.workspace_diff) - len(kept)
        ro.workspace_diff = kept + [{"path": "", "change": UNLISTED_DIFF, "size": 0,
                                     "error": f"{left} more entries not listed (record size limit)"}]
    msgs, dropped = bound_messages(ro.messages, cap)
    if dropped is not None:
        ro.messages = msgs
        ro.tool_calls = count_tool_calls(msgs)
        if ro.tool_calls < len(ro.tool_durations):  # the calls kept are the last ones
            ro.tool_durations = ro.tool_durations[len(ro.tool_durations) - ro.tool_calls:]
        ro.failure_class, ro.error = _record_limit(ro.failure_class, ro.error, cap, dropped)
    return ro


def _json_bytes(obj: Any) -> int:
    return len(json.dumps(obj, ensure_ascii=False, default=_fsdecode).encode("utf-8", "surrogatepass"))


def _fsdecode(x: Any) -> str:
    import os

    # fsdecode takes bytes, not a bytearray: a bytearray is copied to bytes first
    return os.fsdecode(bytes(x)) if isinstance(x, (bytes, bytearray)) else str(x)


def workspace_diff(before: dict[str, bytes], after: dict[str, bytes]) -> list[dict]:
    """The files added, modified or deleted between two workspace snapshots (path -> bytes), sorted by path."""
    out = []
    for p in sorted(set(before) | set(after)):
        if p not in after:
            out.append({"path": p, "change": "deleted", "size": 0})
        elif p not in before:
            out.append({"path": p, "change": "added", "size": len(after[p])})
        elif before[p] != after[p]:
            out.append({"path": p, "change": "modified", "size": len(after[p])})
    return out


def _endpoint_cm(spec: PolicySpec | Endpoint, task):
    if isinstance(spec, Endpoint):
        if spec.kind in ("oracle", "noop"):
            from clawgym.agent.servers import shared_policy_server

            shared_policy_server().register(task)
        return contextlib.nullcontext(spec)
    return open_endpoint(spec, tasks=[task])


def _attempt(task, spec: PolicySpec | Endpoint, factory: SandboxFactory, settings: RolloutSettings,
             judge, runtime: AgentRuntime) -> Rollout:
    limits = settings.limits
    t0 = time.monotonic()
    ro = Rollout(task_id=task.task_id, suite=task.suite, category=task.category, family=task.family,
                 route=task.route, policy=getattr(spec, "name", None) or cast(Endpoint, spec).policy,
                 runtime=runtime.name, tools=TOOL_SCHEMAS)
    rooms = factory.rooms()  # the clean rooms: a pool of the same backend that never holds an agent phase
    factory = runtime.prepare(factory, settings.runtime_options)  # where the agent phase runs
    try:
        sandbox = factory.open(task.files)
    except Exception as e:
        ro.failure_class, ro.error = "infra", f"sandbox could not start: {type(e).__name__}: {e}"
        ro.wall_s = time.monotonic() - t0
        return ro
    try:
        with _endpoint_cm(spec, task) as ep:
            lr, ro.tools = runtime.run(task, ep, sandbox, limits, settings)
        ro.messages = lr.messages
        ro.turns, ro.prompt_tokens, ro.completion_tokens = lr.turns, lr.prompt_tokens, lr.completion_tokens
        ro.tool_calls = count_tool_calls(lr.messages)
        ro.tool_types = tool_types(lr.messages)
        ro.failure_class, ro.error = cast(FailureClass, lr.failure_class), lr.error  # LoopResult's: a str
        ro.proxy_log = lr.proxy_log
        ro.meta = dict(getattr(lr, "meta", None) or {})
        ro.tool_durations = [round(x, 4) for x in lr.tool_durations]
        if ro.failure_class != "infra":
            from clawgym.verify import verify_after_agent

            # the clean room: the workspace leaves as data (SandboxError: infra), the agent's sandbox closes,
            # a fresh room receives the export and the verifier runs there
            export = sandbox.export_workspace()
            ro.workspace_diff = workspace_diff(task.file_map(), export.files)
            v = verify_after_agent(task, sandbox, rooms, ro.messages, judge, export=export)
            ro.verification = v
            ro.score = float(v.score)
            if v.unjudged:
                ro.failure_class = "unjudged"
                ro.error = "unjudged rubric rules: " + ", ".join(v.unjudged_rules[:10])
    except SandboxError as e:
        ro.failure_class, ro.error = "infra", f"sandbox: {e}"
    except Exception as e:  # a bug or an unexpected failure in our own machinery: not the agent's
        ro.failure_class, ro.error = "infra", f"{type(e).__name__}: {e}"
    finally:
        try:
            sandbox.close()
        except Exception:
            pass
    if ro.failure_class in ("infra", "unjudged"):
        ro.score = None
    ro.wall_s = time.monotonic() - t0
    return ro


def run_rollout(task, policy: str | PolicySpec | Endpoint, factory: SandboxFactory,
                settings: RolloutSettings | None = None, judge=None, runtime: AgentRuntime | None = None) -> Rollout:
    """Run one rollout as `settings` say (limits, runtime and its options, retries); infra failures are tried
    up to `settings.attempts` times (score None if they persist). `runtime`: an instance of the runtime
    `settings.runtime` names, owned (closed) by the caller; None: one made for this rollout and closed after it."""
    spec = policy if isinstance(policy, Endpoint) else get_policy(policy)
    settings = settings or RolloutSettings()
    limits, attempts = settings.limits, settings.attempts
    if runtime is not None and runtime.name != settings.runtime:
        raise ValueError(f"run_rollout: runtime {runtime.name!r} given, settings.runtime is {settings.runtime!r}")
    if judge is not None and not hasattr(judge, "score_rules"):  # a spec (dict / str): resolved, or a clear
        from clawgym.verify.judge import make_judge  # error now -- never at scoring time

        judge = make_judge(judge)
    errors: list[str] = []
    ro: Rollout | None = None
    with contextlib.nullcontext(runtime) if runtime is not None else \
            get_runtime(settings.runtime) as rt:
        for i in range(1, max(1, attempts) + 1):
            ro = _attempt(task, spec, factory, settings, judge, rt)
            ro.attempt = i
            ro.infra_errors = list(errors)
            if ro.failure_class != "infra":
                break
            errors.append(ro.error or "infra")
            if i < attempts:
                time.sleep(settings.retry_wait_s * i)
    assert ro is not None
    bound_record(ro, limits)  # before model_dump: an unbounded transcript is never copied
    extra = [spec.api_key_env] if spec.api_key_env else []
    data = redact_obj(ro.model_dump(mode="python"), extra)
    out = Rollout.model_validate(data)
    out.error = redact(out.error, extra) if out.error else out.error
    return out


def run_rollouts(tasks, policy: str | PolicySpec | Endpoint, factory: SandboxFactory, workers: int = 4,
                 settings: RolloutSettings | None = None, judge=None) -> list[Rollout]:
    """Many rollouts with one endpoint (a `local` model server is started once) and one runtime instance
    (closed at the end) over `workers` threads, each `run_rollout(task, endpoint, factory, settings, judge,
    runtime)`. Results keep the order of `tasks`."""
    from concurrent.futures import ThreadPoolExecutor

    tasks = list(tasks)
    spec = policy if isinstance(policy, Endpoint) else get_policy(policy)
    settings = settings or RolloutSettings()
    cm = contextlib.nullcontext(spec) if isinstance(spec, Endpoint) else open_endpoint(spec, tasks=tasks)
    with cm as ep, get_runtime(settings.runtime) as rt:
        if isinstance(spec, PolicySpec):
            ep.policy = spec.name
            ep.api_key_env = spec.api_key_env
        if workers <= 1:
            return [run_rollout(t, ep, factory, settings, judge, rt) for t in tasks]
        with ThreadPoolExecutor(workers) as ex:
            return list(ex.map(lambda t: run_rollout(t, ep, factory, settings, judge, rt), tasks))


def rollout_id_for(task_id: str, policy: str, repeat: int = 0) -> str:
    """A deterministic 16-hex-digit rollout id for (task, policy, repeat)."""
    return hashlib.sha1(f"{task_id}|{policy}|{repeat}".encode()).hexdigest()[:16]


__all__ = ["Rollout", "run_rollout", "run_rollouts", "workspace_diff", "Limits", "FailureClass", "rollout_id_for",
           "SCORED_CLASSES", "bound_record", "RolloutSettings", "Runtime"]
