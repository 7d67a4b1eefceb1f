"""VerificationResult: what verifying one task produced (scores, per-check and per-rule detail, errors)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class VerificationResult:
    """What verifying one task produced (scores, per-check and per-rule detail, errors)."""

    task_id: str
    score: float  # final task score in [0, 1] (hybrid: weighted code + rubric)
    code_score: float | None = None  # None when the task has no code checks
    rubric_score: float | None = None  # None when the task has no rubric
    subscores: dict[str, float] = field(default_factory=dict)  # per code check (reward_dir: {"reward.sh": x})
    rule_scores: list[dict[str, Any]] = field(default_factory=list)  # {name, file_path, score, reason, error}
    error: str | None = None  # first/main error (code crash, timeout, unparsable output, judge failure)
    errors: list[str] = field(default_factory=list)  # every error, in order
    judge: str | None = None  # "offline", "openai:<model>", None when no rubric
    duration_s: float = 0.0
    code_duration_s: float = 0.0
    rubric_duration_s: float = 0.0
    weights: tuple[float, float] = (1.0, 0.0)
    stdout_tail: str = ""  # last part of the code check's stdout/stderr (debugging)
    stderr_tail: str = ""
    notes: list[str] = field(default_factory=list)  # not errors: clamped scores, neutralised files
    unjudged: bool = False  # the score needs a rubric rule no judge could score: not a score at all
    unjudged_rules: list[str] = field(default_factory=list)
    hardening: list[dict[str, Any]] = field(default_factory=list)  # harness-control files restored/removed
    export: dict[str, Any] | None = None  # clean room: what the agent's workspace export held and dropped

    def add_error(self, msg: str) -> None:
        self.errors.append(msg)
        if self.error is None:
            self.error = msg

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["weights"] = list(self.weights)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "VerificationResult":
        d = {k: v for k, v in dict(d).items() if k in cls.__dataclass_fields__}
        if "weights" in d:
            d["weights"] = tuple(d["weights"])
        return cls(**d)
