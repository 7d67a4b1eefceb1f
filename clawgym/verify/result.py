"""VerificationResult: what verifying one task produced (scores, per-check and per-rule detail, errors).

Its record (``to_dict``: the lake's ``verification_json`` / ``details_json``) has one key per field, plus the keys
of ``extra`` (what a record held beyond the fields, kept and written back as it was). Pydantic models can hold it
as a typed field (``Rollout.verification``): a record dict is validated into the dataclass, an instance is kept
as is, and it serializes as its record.
"""

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
    extra: dict[str, Any] = field(default_factory=dict)  # a record's keys that are no field (written back flat)

    def add_error(self, msg: str) -> None:
        self.errors.append(msg)
        if self.error is None:
            self.error = msg

    def to_dict(self) -> dict[str, Any]:
        """The record: one key per field (``weights`` as a list), then the keys of ``extra`` (flat)."""
        d = asdict(self)
        d["weights"] = list(self.weights)
        for k, v in d.pop("extra").items():
            d.setdefault(k, v)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VerificationResult:
        """The result a record (``to_dict``) holds; its keys that are no field go to ``extra``."""
        d = _fields_of(d)
        if "weights" in d:
            d["weights"] = tuple(d["weights"])
        return cls(**d)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """As a pydantic field: a record dict is validated field by field (its other keys into ``extra``), an
        instance is kept as it is; dumped as its record (``to_dict``)."""
        from pydantic_core import core_schema

        return core_schema.no_info_before_validator_function(
            lambda v: _fields_of(v) if isinstance(v, dict) else v, handler(source),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda v: v.to_dict()))


def _fields_of(record: dict[str, Any]) -> dict[str, Any]:
    """A record's keys as VerificationResult's arguments: the fields, and every other key in ``extra``."""
    names = VerificationResult.__dataclass_fields__
    out = {k: v for k, v in record.items() if k in names}
    other = {k: v for k, v in record.items() if k not in names}
    if other:
        out["extra"] = {**other, **(out.get("extra") or {})}
    return out
