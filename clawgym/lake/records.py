"""Row builders between domain objects and lake tables (Task <-> tasks rows, VerificationResult -> rows)."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Rollout failure classes (clawgym.agent.rollout.FailureClass) by what they mean for a score:
SCORED_CLASSES = ("ok", "agent_error", "limit")  # the model's own result: scored (failures normally 0)
UNSCORED_CLASSES = ("infra", "unjudged")  # our machinery failed / no rubric judge: score None, never in a mean
FINISHED = ("ok", "agent_error", "limit", "unjudged")  # done for resume; infra is retried
TRAJECTORY_KEY = ("policy", "task_id", "repeat")
BENCH_RESULT_KEY = ("model", "suite", "task_id", "repeat")
_MIN_TS = _dt.datetime.min.replace(tzinfo=_dt.UTC)


def task_row(task, source: str) -> dict[str, Any]:
    """The `tasks` lake row of `task` read from `source` (summary columns + the full task JSON)."""
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
    """The Tasks stored in the `task_json` column of a lake `tasks` table."""
    from clawgym.tasks.model import Task

    return [Task.from_json(s) for s in table.column("task_json").to_pylist()]


def verification_row(task, result: Any, kind: str) -> dict[str, Any]:
    """The `verifications` lake row of one verification `result` (a VerificationResult or dict) of `task`."""
    d = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    return {
        "task_id": task.task_id, "suite": task.suite, "category": task.category, "route": task.route,
        "family": task.family, "kind": kind, "score": d.get("score"), "code_score": d.get("code_score"),
        "rubric_score": d.get("rubric_score"), "error": d.get("error"), "duration_s": d.get("duration_s"),
        "details_json": json.dumps(d, default=str),
    }


def counts(values: Iterable[Any]) -> dict[str, int]:
    """How often each value occurs (None counted as ""), keys sorted."""
    out: dict[str, int] = {}
    for v in values:
        k = "" if v is None else str(v)
        out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items()))


def group_mean(rows: Iterable[Mapping], key: str, value: str) -> dict[str, float]:
    """Mean of `value` per `key` over `rows`, ignoring rows where `value` is None; keys sorted."""
    acc: dict[str, list[float]] = {}
    for r in rows:
        if r.get(value) is not None:
            acc.setdefault(str(r.get(key)), []).append(float(r[value]))
    return {k: sum(v) / len(v) for k, v in sorted(acc.items())}


def outcome(row: Mapping) -> str:
    """"scored" | "infra" | "unjudged" for a trajectories / bench_results row. A row of a scored class without a
    score (which the rollout code never writes) is our machinery's failure: "infra". Rows without a
    failure_class are scored when they have a score."""
    fc = row.get("failure_class")
    if fc in UNSCORED_CLASSES:
        return str(fc)
    if row.get("score") is None:
        return "infra"
    return "scored"


def is_finished(row: Mapping) -> bool:
    """A rollout that resume must not run again: any outcome but infra."""
    return outcome(row) != "infra"


def _key(row: Mapping, keys: Sequence[str]) -> tuple:
    return tuple((row.get(k) or 0) if k == "repeat" else row.get(k) for k in keys)


def _when(row: Mapping) -> _dt.datetime:
    t = row.get("created_at")
    if isinstance(t, _dt.datetime):
        return t if t.tzinfo else t.replace(tzinfo=_dt.UTC)
    return _MIN_TS


def effective_rows(rows: Iterable[Mapping], keys: Sequence[str] = TRAJECTORY_KEY) -> list[dict]:
    """The row that counts per key (default policy, task, repeat; a missing repeat is 0): the latest finished
    (non-infra) row, or the latest row when every attempt was infra. The lake keeps every row (retried infra
    rows are history); readers, bench scores and the SFT export use these. "Latest" = created_at, then read
    order (part files sort in write order). Output keeps the order in which keys first appear."""
    groups: dict[tuple, list[tuple[int, Mapping]]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(_key(r, keys), []).append((i, r))
    out = []
    for items in groups.values():
        items.sort(key=lambda ir: (_when(ir[1]), ir[0]))
        done = [r for _, r in items if is_finished(r)]
        out.append(dict(done[-1] if done else items[-1][1]))
    return out


def finished_keys(rows: Iterable[Mapping], keys: Sequence[str] = ("task_id",)) -> set:
    """Keys (default: task_id) that have a finished rollout: what resume skips."""
    out = set()
    for r in rows:
        if is_finished(r):
            k = _key(r, keys)
            out.add(k[0] if len(keys) == 1 else k)
    return out


def outcome_counts(rows: Iterable[Mapping]) -> dict[str, Any]:
    """n_rollouts, n_scored, n_infra, n_unjudged, infra_rate, unjudged_rate of (effective) rows."""
    c = {"scored": 0, "infra": 0, "unjudged": 0}
    for r in rows:
        c[outcome(r)] += 1
    n = sum(c.values())
    return {"n_rollouts": n, "n_scored": c["scored"], "n_infra": c["infra"], "n_unjudged": c["unjudged"],
            "infra_rate": c["infra"] / n if n else 0.0, "unjudged_rate": c["unjudged"] / n if n else 0.0}


def lake_tasks(lake, source: str, split: str = "") -> list:
    """Tasks of the lake for an export: `synthetic` (accepted: rejected ones left out) or `bench:<suite>`."""
    from clawgym.lake import TaskSource

    if source == "synthetic":
        rejected = lake.rejected_task_ids()
        tasks = [t for t in tasks_from_table(lake.tasks(TaskSource.SYNTHETIC)) if t.task_id not in rejected]
    elif source.startswith("bench:"):
        tasks = tasks_from_table(lake.bench_tasks(source.split(":", 1)[1]))
    else:
        raise ValueError(f"unknown source {source!r} (synthetic | bench:<suite>)")
    return [t for t in tasks if not split or t.split == split]
