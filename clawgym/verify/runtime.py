"""Verifier runtime: run a task's code checks and rubric after the agent ends.

`TaskVerifier` (a task and its options: judge, clean_room) verifies in place, in a fresh sandbox or after an agent
(the clean room); `verify_task` / `verify_after_agent` are thin functions over it. A code check that cannot produce
a score raises a named `VerifierError` (clawgym.verify.errors), recorded on the result as ``code: <message>``.

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from clawgym.sandbox.base import ExecResult, Sandbox, SandboxError, SandboxFactory
from clawgym.tasks.model import RubricRule, Task
from clawgym.verify.errors import (
    CheckFailed,
    CheckTimedOut,
    GradeCodeMissing,
    GradeResultMissing,
    GradeResultUnparsable,
    RewardFileMissing,
    RewardOutputEmpty,
    RewardOutputUnparsable,
    UnsafeWorkspaceError,
    VerifierError,
    WorkspaceMismatch,
)
from clawgym.verify.guard import (
    SIDE,
    Prepared,
    UnsafeWorkspace,
    prepare_for_verification,
    seal_reward,
    seal_workspace,
)
from clawgym.verify.judge import (
    Judge,
    JudgeError,
    OfflineJudge,
    RubricContext,
    RuleInput,
    make_judge,  # noqa: F401  (public here too)
    resolve_judge,
)
from clawgym.verify.result import VerificationResult
from clawgym.verify.scoring import mean_of_checks

if TYPE_CHECKING:
    from clawgym.sandbox.host.export import WorkspaceExport

REWARD_DIR = "reward"
RESULT_MARK = "__CLAWGYM_GRADE_RESULT__"
TAIL = 2000

# Runs inside the sandbox: `python3 -c DRIVER` with {"code", "transcript", "workspace", "nonce"} on stdin.
GRADE_DRIVER = (SIDE / "grade_driver.py").read_text()


def _tail(s: str) -> str:
    return s[-TAIL:] if s else ""


def parse_last_float(stdout: str) -> float:
    """The float on the last non-empty line of reward.sh's stdout; RewardOutputEmpty / RewardOutputUnparsable (both
    ValueErrors) when it is missing or not finite."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        raise RewardOutputEmpty("reward.sh printed nothing")
    last = lines[-1].strip()
    try:
        x = float(last)
    except ValueError:
        raise RewardOutputUnparsable(f"last stdout line is not a float: {last[:200]!r}") from None
    if not math.isfinite(x):
        raise RewardOutputUnparsable(f"last stdout line is not a finite float: {last!r}")
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


def _check_ran(r: ExecResult, res: VerificationResult, what: str, timeout_s: float, failed: str, keep: int) -> None:
    """Record the output tails of verifier code's exec `r`; CheckTimedOut / CheckFailed (naming `what`) when it
    timed out or exited non-zero (`failed` formats the rc; the last `keep` chars of stderr follow)."""
    res.stdout_tail, res.stderr_tail = _tail(r.stdout), _tail(r.stderr)
    if r.timed_out:
        raise CheckTimedOut(f"{what} timed out after {timeout_s:g} s")
    if r.rc != 0:
        raise CheckFailed(f"{what} {failed.format(rc=r.rc)}: {_tail(r.stderr.strip())[-keep:]}")


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


def _judge_name(judge: Any) -> str:
    return getattr(judge, "name", type(judge).__name__)


def _rule_row(rule: RubricRule, judge: Judge, sandbox: Sandbox, changed: set[str], own: list[dict],
              res: VerificationResult) -> tuple[dict[str, Any], RuleInput | None]:
    """One rubric rule's row, and what the judge is sent for it (None: the row is final as it is). First: can
    any judge here score the rule at all? That depends on the task and the judge only, never on what the agent
    wrote -- so no workspace turns a 0 into an excluded (unjudged) rollout."""
    row: dict[str, Any] = {"name": rule.name, "file_path": rule.file_path, "score": 0.0, "reason": "", "error": None}
    if not _can_judge(judge, rule):
        row["unjudged"] = True
        row["score"] = None
        row["reason"] = f"unjudged: {getattr(judge, 'name', 'judge')} cannot score this rule (no proxy declared)"
        res.unjudged_rules.append(rule.name)
        return row, None
    content = None
    if rule.file_path:
        content = _read_text(sandbox, rule.file_path)
        if content is None:
            row["reason"] = "missing file"
            return row, None
        if rule.file_path not in changed:
            row["reason"] = "file not produced by the agent (unchanged from the task's files)"
            return row, None
    if content is None and not own and not changed:
        row["reason"] = "no agent output (no assistant message, tool call or changed file)"
        return row, None
    return row, RuleInput(rule=rule, content=content)


def _apply_verdicts(judge: Judge, ctx: RubricContext, items: list[RuleInput], rows: list[dict[str, Any]],
                    slots: list[int]) -> None:
    """Judge `items` in one call and write each verdict into its row (`slots`: the row of each item). A JudgeError
    propagates (our failure, never a 0 for the agent): the judge failed, or returned the wrong number of scores,
    or a score that is no finite number."""
    jname = _judge_name(judge)
    out = judge.score_rules(ctx, items)
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


def _rubric_mean(rules: list[RubricRule], rows: list[dict[str, Any]]) -> float:
    """The rubric score: the mean of the judged rows (unjudged ones left out; none judged: 0), weighted by the
    rules' weights when any rule has one (no weight: 1; the weights used are noted on the rows)."""
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


@dataclass(frozen=True)
class TaskVerifier:
    """Verifies one task: its code check (reward_dir or grade) and its rubric, in a sandbox.

    Three ways in, one per place the workspace sits: `in_place` (a sandbox whose workspace is the one to score),
    `in_fresh_sandbox` (a sandbox opened for the purpose, holding given files) and `after_agent` (the clean room:
    the agent's workspace moved into a room no agent ran in). A problem with the code check is a named
    VerifierError (clawgym.verify.errors), recorded on the result as ``code: <message>`` and scored 0; a
    SandboxError (infra) and a JudgeError propagate. (`clawgym.tasks.model.Verifier` is the task's declaration of
    its checks; this object runs them.)"""

    task: Task
    """The task to score; ``task.verifier`` declares the checks."""
    judge: Judge | str | Mapping[str, Any] | None = None
    """Who scores the rubric: a Judge, or a spec for make_judge (None: OfflineJudge). Resolved when a rubric
    runs, so a task without one never needs a working spec."""
    clean_room: bool = False
    """`in_place`'s sandbox is a room no agent ran in (a clean-room export): preparation skips stopping
    processes and emptying HOME and /tmp, and a grade check runs on a sealed workspace."""

    def in_place(self, sandbox: Sandbox, transcript: list | None = None) -> VerificationResult:
        """Score the task on the sandbox's current workspace. After an agent phase use `after_agent` instead: in
        place is for sandboxes only the host wrote to (no-op scores, synthesis gates) and clean rooms."""
        t0 = time.perf_counter()
        v = self.task.verifier
        res = VerificationResult(task_id=self.task.task_id, score=0.0, weights=v.weights())
        if v.kind == "none" and not v.rubric:
            res.duration_s = time.perf_counter() - t0
            return res
        try:
            prep = self._prepare(sandbox)  # SandboxError: infra
        except UnsafeWorkspaceError as e:
            self._fail_closed(res, e)
            res.duration_s = time.perf_counter() - t0
            return res
        res.hardening = prep.actions
        if prep.errors:
            res.notes.append(f"preparation: {len(prep.errors)} entries could not be removed: {prep.errors[:3]}")
        if v.kind != "none":
            self._code(sandbox, transcript, res, prep)
        if v.rubric:
            self._rubric(sandbox, transcript, res)
        self._final_score(res)
        res.duration_s = time.perf_counter() - t0
        return res

    def in_fresh_sandbox(self, factory: SandboxFactory | None = None, files: Iterable | None = None,
                         transcript: list | None = None) -> VerificationResult:
        """Open a sandbox from `factory` (None: get_factory("auto"), closed afterwards) holding `files` (None:
        task.files), score it in place and close it."""
        own = factory is None
        if factory is None:
            from clawgym.sandbox import get_factory

            factory = get_factory("auto")
        try:
            with factory.open(list(self.task.files if files is None else files)) as sb:
                return self.in_place(sb, transcript)
        finally:
            if own:
                factory.close()

    def after_agent(self, sandbox: Sandbox, rooms: SandboxFactory, transcript: list | None = None,
                    export: WorkspaceExport | None = None) -> VerificationResult:
        """The clean room: `sandbox` (the agent's) gives up its workspace as data (`export_workspace`, or `export`
        when the caller made it already) and is closed; a room of `rooms` receives the export and the task is
        scored there in place (clean_room set whatever this object says). `res.export` summarises the export. A
        SandboxError (export or room failed) propagates: infra."""
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
            res = replace(self, clean_room=True).in_place(room, transcript)
        res.export = export.summary()
        return res

    def _prepare(self, sandbox: Sandbox) -> Prepared:
        """guard.prepare_for_verification; what the agent left that it cannot neutralise is an
        UnsafeWorkspaceError (a SandboxError propagates)."""
        try:
            return prepare_for_verification(self.task, sandbox, clean_room=self.clean_room)
        except UnsafeWorkspace as e:
            raise UnsafeWorkspaceError(f"workspace could not be made safe to verify: {e}") from e

    def _fail_closed(self, res: VerificationResult, e: UnsafeWorkspaceError) -> None:
        """The workspace could not be made safe: the error recorded, every part the task has scored 0."""
        v = self.task.verifier
        res.add_error(e.recorded)
        if v.kind != "none":
            res.code_score = 0.0
        if v.rubric:
            res.rubric_score = 0.0

    def _code(self, sandbox: Sandbox, transcript: list | None, res: VerificationResult, prep: Prepared) -> None:
        """The code part: res.code_score (and its time). A VerifierError is recorded and scores 0, as does any
        other unexpected error (recorded with its type's name); a SandboxError propagates: infra, never a 0."""
        tc = time.perf_counter()
        try:
            if self.task.verifier.kind == "reward_dir":
                code = self._code_reward_dir(sandbox, res, prep)
            else:
                if self.clean_room:  # nothing writes the room's workspace after the export: sealed for the check
                    seal_workspace(sandbox)
                code = self._code_grade(sandbox, transcript, res, prep)
        except SandboxError:
            raise
        except VerifierError as e:
            res.add_error(e.recorded)
            code = 0.0
        except Exception as e:
            res.add_error(f"code: {type(e).__name__}: {e}")
            code = 0.0
        res.code_score = code
        res.code_duration_s = time.perf_counter() - tc

    def _code_reward_dir(self, sandbox: Sandbox, res: VerificationResult, prep: Prepared) -> float:
        """kind="reward_dir": the task's reward files written (sealed) to reward/, `bash reward/reward.sh` run in
        the workspace; its last stdout line is the score (clamped)."""
        v = self.task.verifier
        sh = next((f for f in v.reward_files if f.path == "reward.sh"), None)
        if sh is None:
            raise RewardFileMissing("task has no reward/reward.sh")
        ws = sandbox.workspace
        if ws != self.task.workspace_dir and self.task.workspace_dir in sh.text:
            raise WorkspaceMismatch(f"reward.sh hard-codes {self.task.workspace_dir} but the sandbox workspace is {ws}")
        sandbox.remove(REWARD_DIR)
        for f in v.reward_files:
            sandbox.write_file(f"{REWARD_DIR}/{f.path}", f.content, f.mode)
        seal_reward(sandbox, REWARD_DIR)
        r = sandbox.exec([prep.shell, f"{REWARD_DIR}/reward.sh"], timeout=v.timeout_s, workdir=ws, env=prep.env)
        _check_ran(r, res, "reward.sh", v.timeout_s, "exited {rc}", 500)
        x = clamp_score(parse_last_float(r.stdout), res, "code")
        res.subscores = {"reward.sh": x}
        return x

    def _code_grade(self, sandbox: Sandbox, transcript: list | None, res: VerificationResult, prep: Prepared
                    ) -> float:
        """kind="grade": the grade driver runs the code's grade(transcript, workspace) in the sandbox and prints
        its dict behind a per-run nonce; the score is the mean of its checks (clamped)."""
        v = self.task.verifier
        if not v.code:
            raise GradeCodeMissing("verifier kind 'grade' has no code")
        nonce = secrets.token_hex(16)
        payload = json.dumps({"code": v.code, "transcript": transcript or [], "workspace": sandbox.workspace,
                              "nonce": nonce}, default=str).encode("utf-8", errors="surrogateescape")
        # -P: the workspace (cwd) is not on sys.path; the check code puts it there itself when it imports by design,
        # and the driver answers such an import with a stand-in whose calls run in a child python
        r = sandbox.exec(["python3", "-P", "-c", GRADE_DRIVER], timeout=v.timeout_s, workdir=sandbox.workspace,
                         stdin=payload, env=prep.env)
        _check_ran(r, res, "grade()", v.timeout_s, "crashed (rc {rc})", 800)
        mark = RESULT_MARK + nonce
        line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith(mark)), None)
        if line is None:
            raise GradeResultMissing("grade() printed no result (output truncated?)")
        try:
            score, subs = mean_of_checks(json.loads(line[len(mark):]))
        except (ValueError, json.JSONDecodeError) as e:
            raise GradeResultUnparsable(f"unparsable grade() result: {e}") from e
        res.subscores = subs
        return clamp_score(score, res, "code")

    def _rubric(self, sandbox: Sandbox, transcript: list | None, res: VerificationResult) -> None:
        """The rubric part: res.judge, res.rubric_score (and its time). The judge spec is resolved here
        (JudgeConfigError, a ValueError naming the field, when it makes no judge)."""
        judge = resolve_judge(self.judge)
        res.judge = _judge_name(judge)
        tr = time.perf_counter()
        res.rubric_score = self._rubric_score(sandbox, transcript, judge, res)
        res.rubric_duration_s = time.perf_counter() - tr

    def _rubric_score(self, sandbox: Sandbox, transcript: list | None, judge: Judge, res: VerificationResult
                      ) -> float:
        """Each rule: its file missing or not produced by the agent -> 0 (never judged); a rule the judge cannot
        score -> unjudged (never credit, flagged on the result); a whole-run rule when the agent produced nothing
        (no assistant message or tool call, no changed file) -> 0 (never judged); the rest are judged in one call.
        A judge failure (JudgeError / JudgeUnavailable: endpoint down, bad or foreign verdicts, the wrong number
        of scores) is never scored: it propagates, and the rollout records the attempt as infra (score None,
        retried)."""
        rules = self.task.verifier.rubric or []
        changed = changed_files(self.task, sandbox)
        own = agent_output(transcript)
        ctx = RubricContext(task_id=self.task.task_id, instruction=self.task.instruction, transcript=own,
                            existing_files=changed,
                            read_text=lambda p: _read_text(sandbox, p) if p in changed else None)
        rows: list[dict[str, Any]] = []
        items: list[RuleInput] = []
        slots: list[int] = []
        for rule in rules:
            row, item = _rule_row(rule, judge, sandbox, changed, own, res)
            rows.append(row)
            if item is not None:
                slots.append(len(rows) - 1)
                items.append(item)
        if items:
            _apply_verdicts(judge, ctx, items, rows, slots)
        res.rule_scores = rows
        res.unjudged = bool(res.unjudged_rules)
        return _rubric_mean(rules, rows)

    def _final_score(self, res: VerificationResult) -> None:
        """res.score from the parts: code only -> code score; rubric only -> rubric score; both -> weights()."""
        if res.code_score is not None and res.rubric_score is not None:
            wc, wr = self.task.verifier.weights()
            res.score = wc * res.code_score + wr * res.rubric_score
        elif res.code_score is not None:
            res.score = res.code_score
        elif res.rubric_score is not None:
            res.score = res.rubric_score
        res.score = clamp_score(res.score, res, "task")


def verify_task(task: Task, sandbox: Sandbox | None = None, transcript: list | None = None,
                judge: Judge | str | None = None, *, files: Iterable | None = None,
                factory: SandboxFactory | None = None, clean_room: bool = False) -> VerificationResult:
    """Score `task` on the sandbox's current workspace, in place (`TaskVerifier.in_place`). After an agent phase
    use `verify_after_agent` (the clean room) instead: in place is for sandboxes only the host wrote to (no-op
    scores, synthesis gates). `clean_room`: `sandbox` is a room no agent ran in (skips quiesce/scrub).

    Convenience: without a sandbox, a fresh one is opened from `factory` (default: get_factory("auto"))
    holding `files` (default task.files), verified and closed (`TaskVerifier.in_fresh_sandbox`)."""
    if sandbox is None:
        return TaskVerifier(task, judge).in_fresh_sandbox(factory, files, transcript)
    return TaskVerifier(task, judge, clean_room=clean_room).in_place(sandbox, transcript)


def verify_after_agent(task: Task, sandbox: Sandbox, rooms: SandboxFactory, transcript: list | None = None,
                       judge: Judge | str | None = None, export: WorkspaceExport | None = None
                       ) -> VerificationResult:
    """Verify in a clean room (`TaskVerifier.after_agent`): the agent's sandbox `sandbox` gives up its workspace
    *as data* (`Sandbox.export_workspace`: regular files and directories, links resolved inside the workspace as
    they are now or dropped, special files dropped; or `export` when the caller made it already), the agent's
    sandbox is closed (its processes, IPC, HOME, /tmp, caches and mounts go with it), and a room of `rooms`
    (`SandboxFactory.rooms()`: a pool that only ever holds verifications) receives the export; the verifier
    then runs there. A SandboxError (export or room failed) propagates: infra."""
    return TaskVerifier(task, judge).after_agent(sandbox, rooms, transcript, export)


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


__all__ = ["TaskVerifier", "verify_task", "verify_after_agent", "verify_noop", "verify_noop_many", "mean_of_checks",
           "parse_last_float", "GRADE_DRIVER", "OfflineJudge", "clamp_score", "agent_output", "changed_files"]
