"""Named verifier errors: one class per way a task's code check can fail to produce a score.

Each is raised inside the verifier (`clawgym.verify.runtime.TaskVerifier`) where the problem is detected and
caught at one place, which records it on the result as ``f"code: {error}"`` (``VerifierError.recorded``) and
scores the code check 0. They are the agent's or the task's doing, never infra: a dying sandbox is a
`SandboxError` and a failing judge a `JudgeError`, and both propagate instead (the rollout retries the
attempt). The messages are the result's error strings as stored data reads them: they must not change.

    VerifierError
    ├── RewardFileMissing        reward_dir task without reward/reward.sh
    ├── WorkspaceMismatch        reward.sh hard-codes the task's workspace; the sandbox's is another
    ├── RewardOutputEmpty        reward.sh printed nothing (also a ValueError)
    ├── RewardOutputUnparsable   reward.sh's last stdout line is no finite float (also a ValueError)
    ├── CheckTimedOut            reward.sh / grade() ran past verifier.timeout_s
    ├── CheckFailed              reward.sh exited non-zero / grade() crashed
    ├── GradeCodeMissing         grade task without code
    ├── GradeResultMissing       grade() printed no result line
    ├── GradeResultUnparsable    grade()'s result is no JSON dict of scores
    └── UnsafeWorkspaceError     preparation could not neutralise what the agent left (also guard.UnsafeWorkspace)
"""

from __future__ import annotations

from clawgym.verify.guard import UnsafeWorkspace


class VerifierError(Exception):
    """A problem with a task's code check that scores it 0 (never infra). ``str(error)`` is the message; the
    result records it as ``recorded``."""

    @property
    def recorded(self) -> str:
        """The error string as VerificationResult.errors holds it."""
        return f"code: {self}"


class RewardFileMissing(VerifierError):
    """A reward_dir task whose reward files hold no reward.sh."""


class WorkspaceMismatch(VerifierError):
    """reward.sh hard-codes the task's workspace path, but the sandbox's workspace is another one (it would
    silently score 0, so it is reported instead)."""


class RewardOutputEmpty(VerifierError, ValueError):
    """reward.sh printed no non-empty line (the score is its last stdout line)."""


class RewardOutputUnparsable(VerifierError, ValueError):
    """reward.sh's last non-empty stdout line is not a float, or not a finite one."""


class CheckTimedOut(VerifierError):
    """The check's process (reward.sh, the grade driver) ran past verifier.timeout_s."""


class CheckFailed(VerifierError):
    """The check's process exited non-zero: reward.sh failed, or grade() crashed."""


class GradeCodeMissing(VerifierError):
    """A grade task without code."""


class GradeResultMissing(VerifierError):
    """The grade driver printed no result line with this run's nonce (crashed silently, output truncated)."""


class GradeResultUnparsable(VerifierError):
    """grade()'s result is not JSON, or not a dict of numeric / boolean scores (mean_of_checks refused it)."""


class UnsafeWorkspaceError(VerifierError, UnsafeWorkspace):
    """Preparation could not neutralise something the agent left (guard.UnsafeWorkspace): the verifier fails
    closed, every part the task has (code, rubric) scoring 0."""


__all__ = ["VerifierError", "RewardFileMissing", "WorkspaceMismatch", "RewardOutputEmpty", "RewardOutputUnparsable",
           "CheckTimedOut", "CheckFailed", "GradeCodeMissing", "GradeResultMissing", "GradeResultUnparsable",
           "UnsafeWorkspaceError"]
