"""Verifier runtime: code checks, rubric judges, hybrid scoring."""

from clawgym.verify.errors import (  # noqa: F401
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
from clawgym.verify.judge import (  # noqa: F401
    Judge,
    JudgeError,
    OfflineJudge,
    OpenAIJudge,
    RubricContext,
    RuleInput,
    floor_to_scale,
    make_judge,
)
from clawgym.verify.result import VerificationResult  # noqa: F401
from clawgym.verify.runtime import (  # noqa: F401
    TaskVerifier,
    mean_of_checks,
    parse_last_float,
    verify_after_agent,
    verify_noop,
    verify_noop_many,
    verify_task,
)
