"""The procedural synthesis pipeline: generate -> validate (gates) -> dedupe -> split, keeping every rejected
task in a table with its reason. Library code (no Dagster); the synthetic_tasks asset calls `synthesize`."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from clawgym.synth.families.base import generate_procedural
from clawgym.synth.gates import (
    Rejected, TaskValidation, dedupe, rejected_from_validations, split_by_family, validate_many,
)
from clawgym.tasks.model import Task


@dataclass
class SynthResult:
    """What `synthesize` returns: accepted tasks (split set), every validation, the rejects and timings."""

    tasks: list[Task]  # accepted, with split set
    validations: list[TaskValidation]
    rejected: list[Rejected]
    timings: dict[str, float] = field(default_factory=dict)
    validate_stats: dict[str, float] = field(default_factory=dict)  # validate_many's `stats` (summed over workers)

    def rejected_table(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.rejected]

    def validation_table(self) -> list[dict[str, Any]]:
        return [v.to_dict() for v in self.validations]


def synthesize(n: int, seed: int = 0, factory: Any = None, families: list[str] | None = None,
               personas: list[Any] | None = None, workers: int = 1, chunk: int = 100,
               held_out_per_category: int = 1, dedupe_threshold: float = 0.90, embed: Any = None,
               extra_tasks: list[Task] | None = None, validate: bool = True, forkserver: bool = True) -> SynthResult:
    """n procedural tasks (+ `extra_tasks`, e.g. from the LLM route, which must carry their own verifiers)
    through the gates, dedupe and the held-out-family split. factory=None validates on the host (dev only).
    forkserver=False replays/grades with real python3 processes only (same results, slower)."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    tasks = generate_procedural(n, seed=seed, families=families, personas=personas) + list(extra_tasks or [])
    timings["generate_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    vstats: dict[str, float] = {}
    vals = validate_many(tasks, factory, workers=workers, chunk=chunk, forkserver=forkserver,
                         stats=vstats) if validate else []
    timings["validate_s"] = time.perf_counter() - t1
    rejected = rejected_from_validations(vals)
    bad = {r.task_id for r in rejected}
    ok = [t for t in tasks if t.task_id not in bad]
    t2 = time.perf_counter()
    kept, dup = dedupe(ok, threshold=dedupe_threshold, embed=embed)
    timings["dedupe_s"] = time.perf_counter() - t2
    t3 = time.perf_counter()
    final = split_by_family(kept, held_out_per_category=held_out_per_category, seed=seed)
    timings["split_s"] = time.perf_counter() - t3
    timings["total_s"] = time.perf_counter() - t0
    return SynthResult(final, vals, rejected + dup, timings, vstats)


__all__ = ["SynthResult", "synthesize"]
