"""VerificationResult: what verifying one task produced (scores, per-check and per-rule detail, errors).

Its record (``to_dict``: the lake's ``verification_json`` / ``details_json``) has one key per field, plus the keys
of ``extra`` (what a record held beyond the fields, kept and written back as it was). Pydantic models can hold it
as a typed field (``Rollout.verification``): a record dict is validated into the model (its other keys into
``extra``), an instance is kept as is, and it serializes as its record.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator


class VerificationResult(BaseModel):
    """What verifying one task produced (scores, per-check and per-rule detail, errors).

    Mutable (the verifier fills it in as it goes; assignments are not validated). Made with keywords, or from a
    record dict (``from_dict``, ``model_validate``, a pydantic field holding one): keys that are no field go to
    ``extra``."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    task_id: str
    """The task verified."""
    score: float
    """Final task score in [0, 1] (hybrid: ``weights``-weighted code + rubric score)."""
    code_score: float | None = None
    """Score of the code checks; None when the task has no code checks."""
    rubric_score: float | None = None
    """Score of the rubric; None when the task has no rubric."""
    subscores: dict[str, float] = Field(default_factory=dict)
    """Score per code check (reward_dir: ``{"reward.sh": x}``)."""
    rule_scores: list[dict[str, Any]] = Field(default_factory=list)
    """One entry per rubric rule: ``{name, file_path, score, reason, error}``."""
    error: str | None = None
    """The first/main error (code crash, timeout, unparsable output, judge failure); None when none."""
    errors: list[str] = Field(default_factory=list)
    """Every error, in order (``add_error``)."""
    judge: str | None = None
    """Who scored the rubric: "offline", "openai:<model>"; None when there is no rubric."""
    duration_s: float = 0.0
    """Wall time of the whole verification, in seconds."""
    code_duration_s: float = 0.0
    """Wall time of the code checks, in seconds."""
    rubric_duration_s: float = 0.0
    """Wall time of the rubric's judging, in seconds."""
    weights: tuple[float, float] = (1.0, 0.0)
    """(code weight, rubric weight) of ``score``; a list in the record."""
    stdout_tail: str = ""
    """The last part of the code check's stdout (debugging)."""
    stderr_tail: str = ""
    """The last part of the code check's stderr (debugging)."""
    notes: list[str] = Field(default_factory=list)
    """What is worth knowing and no error: clamped scores, neutralised files."""
    unjudged: bool = False
    """The score needs a rubric rule no judge could score: it is not a score at all."""
    unjudged_rules: list[str] = Field(default_factory=list)
    """The names of the rubric rules no judge could score."""
    hardening: list[dict[str, Any]] = Field(default_factory=list)
    """The harness-control files restored or removed before the check."""
    export: dict[str, Any] | None = None
    """Clean room: what the agent's workspace export held and dropped; None when verified in place."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """A record's keys that are no field, kept and written back flat (after the fields) by ``to_dict``."""

    def add_error(self, msg: str) -> None:
        """Record an error: appended to ``errors``, and ``error`` when it is the first."""
        self.errors.append(msg)
        if self.error is None:
            self.error = msg

    def to_dict(self) -> dict[str, Any]:
        """The record: one key per field (``weights`` as a list; values deep-copied), then the keys of ``extra``
        (flat; a key that is a field's keeps the field's value)."""
        d = {name: copy.deepcopy(getattr(self, name)) for name in VerificationResult.model_fields}
        d["weights"] = list(self.weights)
        for k, v in d.pop("extra").items():
            d.setdefault(k, v)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VerificationResult:
        """The result a record (``to_dict``) holds, its values taken as they are (neither validated nor coerced: an
        int score stays an int, so the record writes back as it was); its keys that are no field go to ``extra``.
        ``model_validate`` (and a pydantic field holding one) validates instead."""
        d = _fields_of(d)
        if "weights" in d:
            d["weights"] = tuple(d["weights"])
        missing = [k for k, f in cls.model_fields.items() if f.is_required() and k not in d]
        if missing:
            raise TypeError(f"VerificationResult.from_dict: the record has no {', '.join(map(repr, missing))}")
        return cls.model_construct(**d)

    @model_validator(mode="before")
    @classmethod
    def _from_record(cls, data: Any) -> Any:
        """A record dict: its fields as they are, every other key in ``extra``."""
        return _fields_of(data) if isinstance(data, dict) else data

    @model_serializer
    def _as_record(self) -> dict[str, Any]:
        """Dumped (``model_dump``, a pydantic model holding it) as its record (``to_dict``)."""
        return self.to_dict()


def _fields_of(record: dict[str, Any]) -> dict[str, Any]:
    """A record's keys as VerificationResult's arguments: the fields, and every other key in ``extra``."""
    names = VerificationResult.model_fields
    out = {k: v for k, v in record.items() if k in names}
    other = {k: v for k, v in record.items() if k not in names}
    if other:
        out["extra"] = {**other, **(out.get("extra") or {})}
    return out
