"""The task contract and its importers/exporters."""

from clawgym.tasks.model import (  # noqa: F401
    CATEGORIES, CATEGORY_LABELS, RUBRIC_SCALE, File, RubricRule, Task, TaskError, ToolCall, Verifier,
)
