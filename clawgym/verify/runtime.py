"""Verifier runtime: run a task's code checks and rubric after the agent ends, in the same sandbox.

Semantics (identical to ClawGym's harness for imported folders):
- kind="reward_dir": whatever the agent left at <workspace>/reward is removed, the task's reward files are
  written to reward/, then `bash reward/reward.sh` runs (cwd = workspace, timeout verifier.timeout_s,
  120 s default). The LAST stdout line is the score. rc != 0, a non-float or a timeout -> 0.0 + error.
- kind="grade": python3 runs in the sandbox with a small driver fed on stdin (the code and the transcript
  as JSON); it calls grade(transcript, workspace_path) and prints the dict as JSON. Code score = plain mean
  of the values (bools count 1/0). Crash / timeout / unparsable -> 0.0 + error. The code never touches
  the workspace disk.
- rubric: each rule against its file (missing file -> 0, never sent to the judge); judged on the scale
  {0, .25, .5, .75, 1}; rubric score = mean. No judge -> OfflineJudge (proxies), marked judge="offline".
- final score: code only -> code score; rubric only -> rubric score; both -> weights() (0.7 / 0.3).
- a SandboxError (the sandbox died) propagates: it is an infra failure, never scored as 0.
- before any of it, `guard.prepare_for_verification` stops every agent process, empties /tmp and $HOME,
  neutralises harness-control files the agent added and builds the verifier's environment (see guard.py);
  reward/ and the import guard are sealed (root-owned, read-only for the sandbox user).
- every score is clamped to [0, 1]; a non-finite one is 0 with an error. Rubric rules that no judge can
  score (no judge endpoint and no proxy declared) are *unjudged*: never credit; a task whose score needs
  one is reported with `unjudged=True` (the rollout's class "unjudged", excluded from means).
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Iterable
from typing import Any

from clawgym.sandbox.base import SandboxError
from clawgym.tasks.model import Task
from clawgym.verify.guard import (
    SIDE,
    Prepared,
    UnsafeWorkspace,
    prepare_for_verification,
    seal_reward,
    seal_workspace,
)
from clawgym.verify.judge import Judge, JudgeError, OfflineJudge, RubricContext, RuleInput, make_judge
from clawgym.verify.result import VerificationResult
from clawgym.verify.scoring import mean_of_checks  # noqa: F401  (public here too)

REWARD_DIR = "reward"
RESULT_MARK = "__CLAWGYM_GRADE_RESULT__"
TAIL = 2000

# Runs inside the sandbox: `python3 -c DRIVER` with {"code", "transcript", "workspace", "nonce"} on stdin.
GRADE_DRIVER = (SIDE / "grade_driver.py").read_text()


def _tail(s: str) -> str:
    return s[-TAIL:] if s else ""


def parse_last_float(stdout: str) -> float:
    """The float on the last non-empty line of reward.sh's stdout; ValueError when it is missing or not finite."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("reward.sh printed nothing")
    last = lines[-1].strip()
    try:
        x = float(last)
    except ValueError:
        raise ValueError(f"last stdout line is not a float: {last[:200]!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"last stdout line is not a finite float: {last!r}")
    return x


def clamp_score(x: float, res: VerificationResult, what: str) -> float:
    """A score in [0, 1]: out-of-range values are clamped (noted), non-finite ones are 0 with an error."""
    if not math.isfinite(x):
        res.add_error(f"{what}: non-finite score {x!r} counted as 0")
        return 0.0
    if x < 0.0 or x > 1.0:
        res.notes.append(f"{what}: score {x!r} clamped to [0, 1]")
        return min(1.0, max(0.0, x))
    return float(x)


def _exec_ok(r, res: VerificationResult, what: str, timeout_s: float, failed: str, keep: int) -> bool:
    """Record the output tails of verifier code's exec `r`; False (with an error naming `what`) when it
    timed out or exited non-zero (`failed` formats the rc; the last `keep` chars of stderr follow)."""
    res.stdout_tail, res.stderr_tail = _tail(r.stdout), _tail(r.stderr)
    if r.timed_out:
        res.add_error(f"code: {what} timed out after {timeout_s:g} s")
        return False
    if r.rc != 0:
        res.add_error(f"code: {what} {failed.format(rc=r.rc)}: {_tail(r.stderr.strip())[-keep:]}")
        return False
    return True


def _run_reward_dir(task: Task, sandbox, res: VerificationResult, prep: Prepared) -> float:
    v = task.verifier
    if not any(f.path == "reward.sh" for f in v.reward_files):
        res.add_error("code: task has no reward/reward.sh")
        return 0.0
    ws = sandbox.workspace
    if ws != task.workspace_dir:
        sh = next(f for f in v.reward_files if f.path == "reward.sh").text
        if task.workspace_dir in sh:
            res.add_error(f"code: reward.sh hard-codes {task.workspace_dir} but the sandbox workspace is {ws}")
            return 0.0
    sandbox.remove(REWARD_DIR)
    for f in v.reward_files:
        sandbox.write_file(f"{REWARD_DIR}/{f.path}", f.content, f.mode)
    seal_reward(sandbox, REWARD_DIR)
    r = sandbox.exec([prep.shell, f"{REWARD_DIR}/reward.sh"], timeout=v.timeout_s, workdir=ws, env=prep.env)
    if not _exec_ok(r, res, "reward.sh", v.timeout_s, "exited {rc}", 500):
        return 0.0
    try:
        x = parse_last_float(r.stdout)
    except ValueError as e:
        res.add_error(f"code: {e}")
        return 0.0
    x = clamp_score(x, res, "code")
    res.subscores = {"reward.sh": x}
    return x


def _run_grade(task: Task, sandbox, transcript: list | None, res: VerificationResult, prep: Prepared) -> float:
    v = task.verifier
    if not v.code:
        res.add_error("code: verifier kind 'grade' has no code")
        return 0.0
    nonce = secrets.token_hex(16)
    payload = json.dumps({"code": v.code, "transcript": transcript or [], "workspace": sandbox.workspace,
                          "nonce": nonce}, default=str).encode("utf-8", errors="surrogateescape")
    # -P: the workspace (cwd) is not on sys.path; the check code puts it there itself when it imports by design,
    # and the driver answers such an import with a stand-in whose calls run in a child python
    r = sandbox.exec(["python3", "-P", "-c", GRADE_DRIVER], timeout=v.timeout_s, workdir=sandbox.workspace,
                     stdin=payload, env=prep.env)
    if not _exec_ok(r, res, "grade()", v.timeout_s, "crashed (rc {rc})", 800):
        return 0.0
    mark = RESULT_MARK + nonce
    line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith(mark)), None)
    if line is None:
        res.add_error("code: grade() printed no result (output truncated?)")
        return 0.0
    try:
        score, subs = mean_of_checks(json.loads(line[len(mark):]))
    except (ValueError, json.JSONDecodeError) as e:
        res.add_error(f"code: unparsable grade() result: {e}")
        return 0.0
    res.subscores = subs
    return clamp_score(score, res, "code")


def _read_text(sandbox, path: str) -> str | None:
    try:
        return sandbox.read_file(path).decode("utf-8", errors="replace")
    except Exception:
        return None


def agent_output(transcript: list | None) -> list[dict]:
    """What the agent itself produced: its assistant messages (text and tool calls). Prompts (system,
    user) and tool results (which echo the task's own files) are left out: a whole-run rubric rule must
    never credit text the agent did not write."""
    out = []
    for m in transcript or []:
        if isinstance(m, dict) and m.get("role") == "assistant":
            out.append({k: m[k] for k in ("role", "content", "tool_calls") if k in m})
    return out


def changed_files(task: Task, sandbox) -> set[str]:
    """Workspace files the agent added or modified (regular files, reward/ excluded)."""
    try:
        now = sandbox.list_files(".")
    except SandboxError:
        raise
    except Exception:
        return set()
    before = task.file_map()
    out = set()
    for p in now:
        if p.split("/")[0] == REWARD_DIR:
            continue
        if p not in before:
            out.add(p)
            continue
        try:
            if sandbox.read_file(p) != before[p]:
                out.add(p)
        except SandboxError:
            raise
        except Exception:
            out.add(p)
    return out


def _can_judge(judge: Judge, rule) -> bool:
    can = getattr(judge, "can_judge", None)
    return True if can is None else bool(can(rule))


def _run_rubric(task: Task, sandbox, transcript: list | None, judge: Judge, res: VerificationResult) -> float:
    """Each rule: its file missing or not produced by the agent -> 0 (never judged); a rule the judge cannot
    score -> unjudged (never credit, flagged on the result); a whole-run rule when the agent produced nothing
    (no assistant message or tool call, no changed file) -> 0 (never judged); the rest are judged in one call.
    `judge` may be a spec (a dict, a string): it is resolved by make_judge (JudgeConfigError, a ValueError
    naming the field, when it makes no judge). A judge failure (JudgeError / JudgeUnavailable: endpoint down,
    bad or foreign verdicts, a judge returning the wrong number of scores) is never scored: it propagates
    out of verify_task, and the rollout records the attempt as infra (score None, retried)."""
    if not hasattr(judge, "score_rules"):
        judge = make_judge(judge)
        res.judge = getattr(judge, "name", type(judge).__name__)
    rules = task.verifier.rubric or []
    changed = changed_files(task, sandbox)
    own = agent_output(transcript)
    ctx = RubricContext(task_id=task.task_id, instruction=task.instruction, transcript=own,
                        existing_files=changed,
                        read_text=lambda p: _read_text(sandbox, p) if p in changed else None)
    rows: list[dict[str, Any]] = []
    items: list[RuleInput] = []
    slots: list[int] = []
    for rule in rules:
        row = {"name": rule.name, "file_path": rule.file_path, "score": 0.0, "reason": "", "error": None}
        rows.append(row)
        # first: can any judge here score this rule at all? That depends on the task and the judge only, never
        # on what the agent wrote -- so no workspace turns a 0 into an excluded (unjudged) rollout
        if not _can_judge(judge, rule):
            row["unjudged"] = True
            row["score"] = None
            row["reason"] = f"unjudged: {getattr(judge, 'name', 'judge')} cannot score this rule (no proxy declared)"
            res.unjudged_rules.append(rule.name)
            continue
        if rule.file_path:
            content = _read_text(sandbox, rule.file_path)
            if content is None:
                row["reason"] = "missing file"
                continue
            if rule.file_path not in changed:
                row["reason"] = "file not produced by the agent (unchanged from the task's files)"
                continue
        else:
            content = None
        if content is None and not own and not changed:
            row["reason"] = "no agent output (no assistant message, tool call or changed file)"
            continue
        slots.append(len(rows) - 1)
        items.append(RuleInput(rule=rule, content=content))
    if items:
        jname = getattr(judge, "name", type(judge).__name__)
        out = judge.score_rules(ctx, items)  # a JudgeError propagates: our failure, never a 0 for the agent
        if not isinstance(out, list) or len(out) != len(items):
            raise JudgeError(f"judge {jname} returned {len(out) if isinstance(out, list) else type(out).__name__}"
                             f" scores for {len(items)} rules")
        for i, o in zip(slots, out):
            try:
                x = float(o["score"])
            except (TypeError, KeyError, ValueError):
                raise JudgeError(f"judge {jname} returned no numeric score for rule {rows[i]['name']!r}") from None
            if not math.isfinite(x):
                raise JudgeError(f"judge {jname} returned a non-finite score for rule {rows[i]['name']!r}")
            rows[i]["score"] = min(1.0, max(0.0, x))
            rows[i]["reason"] = str(o.get("reason", "")) if isinstance(o, dict) else ""
    res.rule_scores = rows
    res.unjudged = bool(res.unjudged_rules)
    judged = [(r, row) for r, row in zip(rules, rows) if not row.get("unjudged")]
    if not judged:
        return 0.0
    if any(r.weight is not None for r, _ in judged):
        ws = [1.0 if r.weight is None else max(0.0, float(r.weight)) for r, _ in judged]
        if sum(ws) > 0:
            for (_, row), w in zip(judged, ws):
                row["weight"] = w
            return sum(w * row["score"] for w, (_, row) in zip(ws, judged)) / sum(ws)
    return sum(row["score"] for _, row in judged) / len(judged)


def verify_task(task: Task, sandbox=None, transcript: list | None = None, judge: Judge | str | None = None, *,
                files: Iterable | None = None, factory=None, clean_room: bool = False) -> VerificationResult:
    """Score `task` on the sandbox's current workspace, in place. After an agent phase use
    `verify_after_agent` (the clean room) instead: in place is for sandboxes only the host wrote to (no-op
    scores, synthesis gates). `clean_room`: `sandbox` is a room no agent ran in (skips quiesce/scrub).

    Convenience: without a sandbox, a fresh one is opened from `factory` (default: get_factory("auto"))
    holding `files` (default task.files), verified and closed."""
    if sandbox is None:
        own = factory is None
        if own:
            from clawgym.sandbox import get_factory

            factory = get_factory("auto")
        try:
            with factory.open(list(task.files if files is None else files)) as sb:
                return verify_task(task, sb, transcript, judge)
        finally:
            if own:
                factory.close()
    t0 = time.perf_counter()
    v = task.verifier
    res = VerificationResult(task_id=task.task_id, score=0.0, weights=v.weights())
    if v.kind == "none" and not v.rubric:
        res.duration_s = time.perf_counter() - t0
        return res
    try:
        prep = prepare_for_verification(task, sandbox, clean_room=clean_room)  # SandboxError: infra
    except UnsafeWorkspace as e:  # the agent left something we could not neutralise: fail closed
        res.add_error(f"code: workspace could not be made safe to verify: {e}")
        if v.kind != "none":
            res.code_score = 0.0
        if v.rubric:
            res.rubric_score = 0.0
        res.duration_s = time.perf_counter() - t0
        return res
    res.hardening = prep.actions
    if prep.errors:
        res.notes.append(f"preparation: {len(prep.errors)} entries could not be removed: {prep.errors[:3]}")
    if v.kind != "none":
        tc = time.perf_counter()
        try:
            if v.kind == "reward_dir":
                code = _run_reward_dir(task, sandbox, res, prep)
            else:
                if clean_room:  # nothing writes the room's workspace after the export: sealed for the check
                    seal_workspace(sandbox)
                code = _run_grade(task, sandbox, transcript, res, prep)
        except SandboxError:  # the sandbox itself failed: an infra failure, never a score of 0
            raise
        except Exception as e:  # anything else unexpected while checking: recorded, scores 0
            res.add_error(f"code: {type(e).__name__}: {e}")
            code = 0.0
        res.code_score = code
        res.code_duration_s = time.perf_counter() - tc
    if v.rubric:
        j = judge if (judge is not None and not isinstance(judge, str)) else make_judge(judge)
        res.judge = getattr(j, "name", type(j).__name__)
        tr = time.perf_counter()
        res.rubric_score = _run_rubric(task, sandbox, transcript, j, res)
        res.rubric_duration_s = time.perf_counter() - tr
    if res.code_score is not None and res.rubric_score is not None:
        wc, wr = v.weights()
        res.score = wc * res.code_score + wr * res.rubric_score
    elif res.code_score is not None:
        res.score = res.code_score
    elif res.rubric_score is not None:
        res.score = res.rubric_score
    res.score = clamp_score(res.score, res, "task")
    res.duration_s = time.perf_counter() - t0
    return res


def verify_after_agent(task: Task, sandbox, rooms, transcript: list | None = None,
                       judge: Judge | str | None = None, export=None) -> VerificationResult:
    """Verify in a clean room: the agent's sandbox `sandbox` gives up its workspace *as data*
    (`Sandbox.export_workspace`: regular files and directories, links resolved inside the workspace as they
    are now or dropped, special files dropped; or `export` when the caller made it already), the agent's
    sandbox is closed (its processes, IPC, HOME, /tmp, caches and mounts go with it), and a room of `rooms`
    (`SandboxFactory.rooms()`: a pool that only ever holds verifications) receives the export; the verifier
    then runs there. A SandboxError (export or room failed) propagates: infra."""
    if export is None:
        export = sandbox.export_workspace()
    try:
        sandbox.close()
    except Exception:  # the agent's sandbox is done with either way; its pool resets or destroys it
        pass
    with rooms.open(export.file_objects()) as room:
        empty = export.empty_dirs()
        if empty:
            room.make_dirs(empty)
        res = verify_task(task, room, transcript, judge, clean_room=True)
    res.export = export.summary()
    return res


def verify_noop(task: Task, factory, judge: Judge | str | None = None) -> VerificationResult:
    """The no-op score: open a sandbox holding task.files, verify without any agent action."""
    with factory.open(task.files) as sb:
        return verify_task(task, sb, transcript=[], judge=judge)


def verify_noop_many(tasks: Iterable[Task], factory, judge: Judge | str | None = None, workers: int = 1
                     ) -> list[VerificationResult]:
    """No-op scores of many tasks, in input order. workers > 1 verifies that many tasks at once (the
    factories are thread-safe; each task gets its own sandbox)."""
    tasks = list(tasks)
    if workers <= 1 or len(tasks) <= 1:
        return [verify_noop(t, factory, judge) for t in tasks]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="clawgym-verify") as ex:
        return list(ex.map(lambda t: verify_noop(t, factory, judge), tasks))


__all__ = ["verify_task", "verify_after_agent", "verify_noop", "verify_noop_many", "mean_of_checks", "parse_last_float",
           "GRADE_DRIVER", "OfflineJudge", "clamp_score", "agent_output", "changed_files"]
