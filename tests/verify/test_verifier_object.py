"""The verifier as an object (clawgym.verify.runtime.TaskVerifier) and its named errors (clawgym.verify.errors).

Each named error is raised by a real bad check (a reward.sh / grade() code) in a real bwrap sandbox, and recorded on
the result exactly as before the split: the result's error strings are what stored data and other tests read."""

from __future__ import annotations

import pytest

from clawgym.sandbox.base import SandboxError
from clawgym.tasks.model import File, RubricProxy, RubricRule, Task, Verifier
from clawgym.verify import (
    CheckFailed,
    CheckTimedOut,
    GradeCodeMissing,
    GradeResultMissing,
    GradeResultUnparsable,
    RewardFileMissing,
    RewardOutputEmpty,
    RewardOutputUnparsable,
    TaskVerifier,
    UnsafeWorkspaceError,
    VerificationResult,
    VerifierError,
    WorkspaceMismatch,
    verify_after_agent,
    verify_task,
)
from clawgym.verify.guard import UnsafeWorkspace
from clawgym.verify.runtime import parse_last_float

FILES = [File(path="input/a.txt", content=b"a\n")]


def reward_task(sh: bytes | None, timeout_s: float = 60.0, **kw) -> Task:
    rf = [File(path="check.py", content=b"print(1)\n")]
    if sh is not None:
        rf.insert(0, File(path="reward.sh", content=sh, mode=0o755))
    return Task(task_id="rd", instruction="x", files=FILES,
                verifier=Verifier(kind="reward_dir", reward_files=rf, timeout_s=timeout_s), **kw)


def grade_task(code: str | None, timeout_s: float = 60.0) -> Task:
    return Task(task_id="gr", instruction="x", files=FILES,
                verifier=Verifier(kind="grade", code=code, timeout_s=timeout_s))


def _raised(task: Task, sb) -> VerifierError:
    """The named error the task's code check raises in `sb` (the code part run on its own, unrecorded)."""
    v = TaskVerifier(task)
    prep = v._prepare(sb)
    res = VerificationResult(task_id=task.task_id, score=0.0)
    with pytest.raises(VerifierError) as ei:
        if task.verifier.kind == "reward_dir":
            v._code_reward_dir(sb, res, prep)
        else:
            v._code_grade(sb, [], res, prep)
    return ei.value


# (task, the named error, the recorded error string: unchanged from the one-function verify_task)
CASES = {
    "no reward.sh": (lambda: reward_task(None), RewardFileMissing, "code: task has no reward/reward.sh"),
    "printed nothing": (lambda: reward_task(b"#!/bin/bash\ntrue\n"), RewardOutputEmpty,
                        "code: reward.sh printed nothing"),
    "not a float": (lambda: reward_task(b"#!/bin/bash\necho 1.0\necho done\n"), RewardOutputUnparsable,
                    "code: last stdout line is not a float: 'done'"),
    "not finite": (lambda: reward_task(b"#!/bin/bash\necho nan\n"), RewardOutputUnparsable,
                   "code: last stdout line is not a finite float: 'nan'"),
    "reward.sh fails": (lambda: reward_task(b"#!/bin/bash\necho 1.0\necho boom >&2\nexit 3\n"), CheckFailed,
                        "code: reward.sh exited 3: boom"),
    "reward.sh hangs": (lambda: reward_task(b"#!/bin/bash\nsleep 30\necho 1\n", timeout_s=1), CheckTimedOut,
                        "code: reward.sh timed out after 1 s"),
    "no grade code": (lambda: grade_task(None), GradeCodeMissing, "code: verifier kind 'grade' has no code"),
    "grade crashes": (lambda: grade_task("def grade(t, w):\n    raise SystemExit('nope')\n"), CheckFailed,
                      "code: grade() crashed (rc 3): "),
    "grade hangs": (lambda: grade_task("import time\ndef grade(t, w):\n    time.sleep(30)\n", timeout_s=1),
                    CheckTimedOut, "code: grade() timed out after 1 s"),
    "grade prints no result": (lambda: grade_task("import os\ndef grade(t, w):\n    os._exit(0)\n"),
                               GradeResultMissing, "code: grade() printed no result (output truncated?)"),
    "grade result not numeric": (lambda: grade_task("def grade(t, w):\n    return {'a': 'x'}\n"),
                                 GradeResultUnparsable,
                                 "code: unparsable grade() result: check 'a' has non-numeric value 'x'"),
    "grade result empty": (lambda: grade_task("def grade(t, w):\n    return {}\n"), GradeResultUnparsable,
                           "code: unparsable grade() result: grade() returned an empty dict"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_named_error_raised_and_recorded(case, bwrap_factory):
    make, err, recorded = CASES[case]
    task = make()
    with bwrap_factory.open(task.files) as sb:
        e = _raised(task, sb)
    assert type(e) is err and e.recorded == f"code: {e}"
    with bwrap_factory.open(task.files) as sb:
        res = verify_task(task, sb, [])
    assert res.code_score == 0.0 and res.score == 0.0
    assert len(res.errors) == 1 and res.error == res.errors[0]
    if err is CheckFailed and task.verifier.kind == "grade":  # the traceback's tail follows
        assert res.error.startswith(recorded) and "SystemExit: nope" in res.error
    else:
        assert res.error == recorded
    assert e.recorded.startswith(recorded)


def test_workspace_mismatch(bwrap_factory):
    """reward.sh hard-coding the task's workspace when the sandbox's is another: reported, not a silent 0."""
    with bwrap_factory.open(FILES) as sb:
        other = "/srv/elsewhere/workspace"
        assert sb.workspace != other
        task = reward_task(f"#!/bin/bash\ncd {other} && echo 1\n".encode(), workspace_dir=other)
        e = _raised(task, sb)
        res = verify_task(task, sb, [])
    assert type(e) is WorkspaceMismatch
    assert res.errors == [f"code: reward.sh hard-codes {other} but the sandbox workspace is {sb.workspace}"]
    assert res.score == 0.0 and res.code_score == 0.0


def test_unsafe_workspace_fails_closed(bwrap_factory):
    """What the agent left that preparation cannot neutralise (a directory on the way to the workspace swapped for
    a symlink): UnsafeWorkspaceError, recorded as before; every part scores 0; never a SandboxError (infra)."""
    task = Task(task_id="swap", instruction="x", files=[File(path="a.txt", content=b"a")],
                verifier=Verifier(kind="grade", code="def grade(t, w):\n    return {'a': 1}\n", rubric=[
                    RubricRule(name="r", file_path="a.txt", scores={"0": "no", "1": "yes"},
                               proxy=RubricProxy(min_words=1))]))
    swap = ("mkdir -p /tmp/fake/workspace && cp -r ~/.openclaw/workspace/. /tmp/fake/workspace/ && "
            "mv ~/.openclaw ~/.moved && ln -s /tmp/fake ~/.openclaw")
    with bwrap_factory.open(task.files) as sb:
        assert sb.exec(swap, timeout=20).rc == 0
        with pytest.raises(UnsafeWorkspaceError) as ei:
            TaskVerifier(task)._prepare(sb)
    assert isinstance(ei.value, UnsafeWorkspace) and isinstance(ei.value.__cause__, UnsafeWorkspace)
    with bwrap_factory.open(task.files) as sb:
        assert sb.exec(swap, timeout=20).rc == 0
        res = verify_task(task, sb, [], judge="offline")
    head = "code: workspace could not be made safe to verify: HOME and /tmp could not be emptied: [Errno 2] "
    assert len(res.errors) == 1 and res.error.startswith(head) and ei.value.recorded.startswith(head)
    assert res.score == 0.0 and res.code_score == 0.0 and res.rubric_score == 0.0
    assert res.judge is None and res.rule_scores == []  # the rubric never ran


def test_sandbox_error_still_propagates(bwrap_factory):
    """A dying sandbox is infra: no VerifierError, no recorded 0."""
    task = reward_task(b"#!/bin/bash\necho 1\n")

    class Dying:
        def __init__(self, sb):
            self._sb = sb

        def __getattr__(self, name):
            return getattr(self._sb, name)

        def exec(self, *a, **k):
            raise SandboxError("the sandbox died")

    with bwrap_factory.open(task.files) as sb, pytest.raises(SandboxError, match="died"):
        verify_task(task, Dying(sb), [])


def test_parse_last_float_errors_are_value_errors():
    """parse_last_float's contract (ValueError) holds: the named errors are ValueErrors too."""
    for out, err in (("", RewardOutputEmpty), ("x\n", RewardOutputUnparsable), ("inf\n", RewardOutputUnparsable)):
        with pytest.raises(err):
            parse_last_float(out)
        with pytest.raises(ValueError):
            parse_last_float(out)
    assert parse_last_float("log\n0.5\n\n") == 0.5


def test_hierarchy():
    named = [RewardFileMissing, WorkspaceMismatch, RewardOutputEmpty, RewardOutputUnparsable, CheckTimedOut,
             CheckFailed, GradeCodeMissing, GradeResultMissing, GradeResultUnparsable, UnsafeWorkspaceError]
    assert all(issubclass(c, VerifierError) and c.__doc__ for c in named)
    assert not issubclass(SandboxError, VerifierError)
    import clawgym.verify.errors as errors

    assert sorted(errors.__all__) == sorted(["VerifierError", *(c.__name__ for c in named)])


def _same(a: VerificationResult, b: VerificationResult) -> None:
    da, db = a.to_dict(), b.to_dict()
    for k in ("duration_s", "code_duration_s", "rubric_duration_s", "stdout_tail"):  # the nonce differs per run
        da.pop(k), db.pop(k)
    assert da == db


def test_modes_agree_with_the_public_functions(bwrap_factory):
    """in_place / in_fresh_sandbox / after_agent give what verify_task / verify_after_agent give (they delegate)."""
    code = ("import os\ndef grade(t, w):\n    p = os.path.join(w, 'out.txt')\n"
            "    return {'made': os.path.isfile(p), 'saw': len(t) == 1}\n")
    task = Task(task_id="m", instruction="x", files=FILES, verifier=Verifier(kind="grade", code=code, rubric=[
        RubricRule(name="says", file_path="out.txt", scores={"0": "no", "1": "yes"},
                   proxy=RubricProxy(required_phrases=["done"]))]))
    tr = [{"role": "assistant", "content": "ok"}]
    with bwrap_factory.open(FILES + [File(path="out.txt", content=b"done\n")]) as sb:
        a = TaskVerifier(task, "offline").in_place(sb, tr)
    with bwrap_factory.open(FILES + [File(path="out.txt", content=b"done\n")]) as sb:
        b = verify_task(task, sb, tr, "offline")
    _same(a, b)
    assert a.score == pytest.approx(1.0) and a.judge == "offline" and a.error is None
    c = TaskVerifier(task).in_fresh_sandbox(bwrap_factory, transcript=tr)
    d = verify_task(task, None, tr, factory=bwrap_factory)
    _same(c, d)
    assert c.code_score == pytest.approx(0.5) and c.rubric_score == 0.0
    rooms = bwrap_factory.rooms()
    sb = bwrap_factory.open(FILES)
    sb.write_file("out.txt", b"done\n")
    e = TaskVerifier(task).after_agent(sb, rooms, tr)
    sb = bwrap_factory.open(FILES)
    sb.write_file("out.txt", b"done\n")
    f = verify_after_agent(task, sb, rooms, tr)
    _same(e, f)
    assert e.score == pytest.approx(1.0) and e.export is not None
