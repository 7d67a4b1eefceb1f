"""Row builders between domain objects and lake tables (Task <-> tasks rows, VerificationResult -> rows)."""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping


def task_row(task, source: str) -> dict[str, Any]:
    v = task.verifier
    return {
        "source": source, "task_id": task.task_id, "suite": task.suite, "split": task.split, "route": task.route,
        "family": task.family, "category": task.category, "subcategory": task.subcategory,
        "persona_id": task.persona_id, "skill_ids": list(task.skill_ids), "difficulty": task.difficulty,
        "seed": task.seed, "instruction": task.instruction, "n_files": len(task.files),
        "workspace_bytes": sum(len(f.content) for f in task.files), "verifier_kind": v.kind,
        "has_rubric": bool(v.rubric), "has_reference": task.reference is not None, "task_json": task.to_json(),
    }


def tasks_from_table(table) -> list:
    from clawgym.tasks.model import Task

    return [Task.from_json(s) for s in table.column("task_json").to_pylist()]


def verification_row(task, result: Any, kind: str) -> dict[str, Any]:
    d = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    return {
        "task_id": task.task_id, "suite": task.suite, "category": task.category, "route": task.route,
        "family": task.family, "kind": kind, "score": d.get("score"), "code_score": d.get("code_score"),
        "rubric_score": d.get("rubric_score"), "error": d.get("error"), "duration_s": d.get("duration_s"),
        "details_json": json.dumps(d, default=str),
    }


def counts(values: Iterable[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        k = "" if v is None else str(v)
        out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items()))


def group_mean(rows: Iterable[Mapping], key: str, value: str) -> dict[str, float]:
    acc: dict[str, list[float]] = {}
    for r in rows:
        if r.get(value) is not None:
            acc.setdefault(str(r.get(key)), []).append(float(r[value]))
    return {k: sum(v) / len(v) for k, v in sorted(acc.items())}
