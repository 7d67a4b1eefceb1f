"""The task contract: one `Task` is enough to run, verify and export a task."""

from __future__ import annotations

import base64
import hashlib
import math
import posixpath
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from clawgym import DEFAULT_WORKSPACE
from clawgym.tasks.names import check_name

CATEGORIES: tuple[str, ...] = (
    "productivity_collaboration",
    "systems_automation",
    "analysis_reasoning",
    "content_domain_support",
    "planning_knowledge",
    "software_development",
)
CATEGORY_LABELS: dict[str, str] = {
    "productivity_collaboration": "Productivity & Collaboration",
    "systems_automation": "Systems & Automation",
    "analysis_reasoning": "Analysis & Reasoning",
    "content_domain_support": "Content & Domain Support",
    "planning_knowledge": "Planning & Knowledge Management",
    "software_development": "Software Development",
}

Route = Literal["persona", "skill", "procedural", "imported"]
Split = Literal["train", "bench"]
RUBRIC_SCALE = ("0", "0.25", "0.5", "0.75", "1")
TOOL_NAMES = ("read", "write", "edit", "exec", "ls", "apply_patch")  # the agent's tools (clawgym.agent.toolcore)


class TaskError(ValueError):
    """Bad task input. The message always names the file and the field, e.g.
    ``task_0042/data_entry.json: missing "user_query"``."""

    def __init__(self, file: str, field: str | None, problem: str):
        self.file, self.field, self.problem = file, field, problem
        where = f'{file}: ' if file else ""
        what = f'"{field}" ' if field else ""
        if field and problem == "missing":  # reads as: task_0042/data_entry.json: missing "user_query"
            super().__init__(f'{where}missing "{field}"')
        else:
            super().__init__(f"{where}{what}{problem}".strip())


class File(BaseModel):
    """One file of a mock workspace (or of a verifier's reward/ folder). `path` is relative, POSIX."""

    model_config = ConfigDict(frozen=True)
    path: str
    content: bytes
    mode: int = 0o644

    @field_validator("path")
    @classmethod
    def _relative(cls, v: str) -> str:
        if not v or v.startswith("/") or "\x00" in v or any(p in ("..", ".", "") for p in v.split("/")):
            raise ValueError(f"file path must be relative and normalised: {v!r}")
        return v

    @field_validator("mode", mode="before")
    @classmethod
    def _clean_mode(cls, v: Any) -> int:
        """Only 0o755 (any exec bit) or 0o644: no set-id, sticky or world-writable bits from any source."""
        try:
            m = int(v)
        except (TypeError, ValueError):
            raise ValueError(f"file mode must be an integer, got {v!r}") from None
        return 0o755 if m >= 0 and m & 0o111 else 0o644

    @field_serializer("content")
    def _b64(self, v: bytes) -> str:  # JSON form only; Parquet stores raw bytes
        return base64.b64encode(v).decode()

    @field_validator("content", mode="before")
    @classmethod
    def _from_any(cls, v: Any) -> bytes:
        if isinstance(v, str):
            try:
                return base64.b64decode(v, validate=True)
            except Exception:
                return v.encode()
        return v

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


class RubricProxy(BaseModel):
    """Deterministic stand-in for the LLM judge, used when no judge is configured (judge="offline").

    Every declared check is pass/fail; the rule's offline score is the fraction passed, floored to the
    rubric scale. Checks on the text of the rule's `file_path` unless noted.
    """

    required_files: list[str] = Field(default_factory=list)  # workspace paths that must exist
    required_phrases: list[str] = Field(default_factory=list)  # each must appear (case-insensitive)
    any_phrases: list[str] = Field(default_factory=list)  # at least one must appear (case-insensitive)
    forbidden_phrases: list[str] = Field(default_factory=list)  # none may appear (case-insensitive)
    min_words: int | None = None
    max_words: int | None = None
    required_headings: list[str] = Field(default_factory=list)  # markdown headings containing these


class RubricRule(BaseModel):
    """One rubric rule: judged on its own against `file_path` on the {0,0.25,0.5,0.75,1} scale.

    `file_path` "" means the rule is about the whole run (PinchBench-style): the judge sees the transcript.
    `proxy` (optional) declares the deterministic offline checks (see RubricProxy).
    The rubric score is the mean over rules, weighted by `weight` when any rule sets one (ClawGym: plain mean).
    """

    name: str
    file_path: str
    scores: dict[str, str]
    proxy: RubricProxy | None = None
    weight: float | None = None  # relative weight in the rubric mean (PinchBench "Weight: 25%"); None = 1


class ToolCall(BaseModel):
    """An OpenClaw tool call: name in read|write|edit|exec|ls|apply_patch, arguments as in formats.md."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


MAX_TIMEOUT_S = 86_400.0
WORKSPACE_RE = re.compile(r"^(/[A-Za-z0-9._+-]+)+$")


def check_timeout(v: float, field: str) -> float:
    """A timeout is a finite number of seconds in (0, one day]: `inf` never kills, `nan` crashes timers."""
    if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 or v > MAX_TIMEOUT_S:
        raise ValueError(f"{field} must be a finite number of seconds in (0, {MAX_TIMEOUT_S:g}], got {v!r}")
    return float(v)


class Verifier(BaseModel):
    """How a task is scored.

    kind="grade": `code` is python source defining grade(transcript, workspace_path) -> dict[str, float];
        the code score is the plain mean of the values (bools count 1/0).
    kind="reward_dir": `reward_files` is a ClawGym reward/ folder (reward.sh + check.py); reward.sh is run
        after the agent with the folder copied to <workspace>/reward; its LAST stdout line is the score.
    rubric: optional rules for what code cannot check; weights code 0.7 / rubric 0.3 when both exist.
    """

    kind: Literal["grade", "reward_dir", "none"] = "grade"
    code: str | None = None
    reward_files: list[File] = Field(default_factory=list)
    rubric: list[RubricRule] | None = None
    code_weight: float | None = None
    rubric_weight: float | None = None
    timeout_s: float = 120.0

    @field_validator("timeout_s")
    @classmethod
    def _timeout(cls, v: float) -> float:
        return check_timeout(v, "verifier.timeout_s")

    def weights(self) -> tuple[float, float]:
        has_code = self.kind != "none"
        has_rubric = bool(self.rubric)
        if self.code_weight is not None and self.rubric_weight is not None:
            return self.code_weight, self.rubric_weight
        if has_code and has_rubric:
            return 0.7, 0.3
        return (1.0, 0.0) if has_code else (0.0, 1.0)


class Task(BaseModel):
    """One task: the instruction, the workspace files, the verifier, an optional reference solution and
    metadata (suite, split, route, family, category, ...)."""

    task_id: str
    suite: str = "default"
    split: Split = "train"
    route: Route = "procedural"
    family: str = ""
    category: str = ""
    subcategory: str = ""
    persona_id: str | None = None
    skill_ids: list[str] = Field(default_factory=list)
    difficulty: int = 2
    seed: int | None = None
    instruction: str
    files: list[File] = Field(default_factory=list)
    verifier: Verifier = Field(default_factory=Verifier)
    reference: list[ToolCall] | None = None
    # the program teacher's solution: one generic program of the task's family that computes every
    # deliverable from the workspace (clawgym.synth.solutions), recorded by synthesis; None = the family has none.
    # `reference` replays the answers the generator computed; this shows *how* to get them.
    program_reference: list[ToolCall] | None = None
    workspace_dir: str = DEFAULT_WORKSPACE
    timeout_s: float = 600.0
    # source-format details needed for byte-exact export (e.g. ClawGym data_entry.json text, PinchBench sections)
    source: dict[str, Any] = Field(default_factory=dict)

    # Names are identifiers (clawgym.tasks.names): a task id, suite or family becomes a path
    # component (data/workspaces/<task_id>/, lake partitions, export folders), so it must be one plain name.
    @field_validator("task_id", "suite")
    @classmethod
    def _name(cls, v: str, info) -> str:
        return check_name(v, info.field_name)

    @field_validator("family")
    @classmethod
    def _family(cls, v: str) -> str:
        return v if v == "" else check_name(v, "family")

    @field_validator("timeout_s")
    @classmethod
    def _timeout(cls, v: float) -> float:
        return check_timeout(v, "timeout_s")

    @field_validator("workspace_dir")
    @classmethod
    def _workspace(cls, v: str) -> str:
        """An absolute, normalised path of plain characters: it is written into reward.sh, Dockerfiles and
        task.toml files, so no newline, quote, space or `..` may ride in it."""
        v = v.rstrip("/") or "/" if isinstance(v, str) else v
        if not isinstance(v, str) or not WORKSPACE_RE.match(v) or posixpath.normpath(v) != v or v == "/":
            raise ValueError(f"workspace_dir must be an absolute, normalised path of [A-Za-z0-9._+-] parts, "
                             f"got {v[:200]!r}")
        return v

    @field_validator("program_reference")
    @classmethod
    def _program_reference(cls, v: list[ToolCall] | None) -> list[ToolCall] | None:
        """None, or a non-empty list of tool calls, each naming an agent tool."""
        if v is None:
            return v
        if not v:
            raise ValueError("program_reference must be null or a non-empty list of tool calls")
        for i, c in enumerate(v):
            if c.name not in TOOL_NAMES:
                raise ValueError(f"program_reference[{i}].name: {c.name!r} is not one of {', '.join(TOOL_NAMES)}")
        return v

    @field_validator("files")
    @classmethod
    def _one_tree(cls, v: list[File]) -> list[File]:
        """Workspace paths form one tree: no path twice, no file that is also another's folder."""
        paths = set()
        for f in v:
            if f.path in paths:
                raise ValueError(f"files: {f.path!r} occurs twice")
            paths.add(f.path)
        for p in paths:
            parts = p.split("/")
            for i in range(1, len(parts)):
                if "/".join(parts[:i]) in paths:
                    raise ValueError(f"files: {'/'.join(parts[:i])!r} is a file and a folder of {p!r}")
        return v

    def file_map(self) -> dict[str, bytes]:
        return {f.path: f.content for f in self.files}

    def fingerprint(self) -> str:
        """Content hash of what the agent sees (instruction + workspace): used for exact dedupe."""
        h = hashlib.sha256(self.instruction.encode())
        for f in sorted(self.files, key=lambda f: f.path):
            h.update(f.path.encode() + b"\0" + f.content + b"\0")
        return h.hexdigest()

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, s: str | bytes) -> Task:
        return cls.model_validate_json(s)


def task_ids_unique(tasks: list[Task]) -> None:
    """Raise TaskError on the first task_id that occurs twice in `tasks`."""
    seen: set[str] = set()
    for t in tasks:
        if t.task_id in seen:
            raise TaskError("", "task_id", f"duplicate task_id {t.task_id!r}")
        seen.add(t.task_id)


__all__ = [
    "CATEGORIES", "CATEGORY_LABELS", "File", "RubricProxy", "RubricRule", "ToolCall", "Verifier", "Task", "TaskError",
    "RUBRIC_SCALE", "task_ids_unique",
]
