"""The `synthetic_tasks` step without Dagster: the chosen route(s) through the pipeline, the accepted tasks labelled
with their suite, and the figures it reports (gate counts, diversity).

    run = synthesize_tasks("procedural", 24, factory=factory, personas=persona_dicts, embed=embed)
    run.tasks          # accepted (split set; suite procedural | llm)
    run.result         # the pipeline's SynthResult (rejections: rejected_tasks rows, stage = the gate)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ROUTES = ("procedural", "llm", "both")


@dataclass
class SynthesisRun:
    """What one synthetic_tasks run made."""

    tasks: list  # accepted tasks, suite and split set
    result: Any  # clawgym.synth.pipeline.SynthResult
    gate_counts: dict = field(default_factory=dict)  # SynthResult.gate_counts()
    diversity: list[dict] = field(default_factory=list)  # clawgym.synth.diversity.diversity rows

    @property
    def bench_families(self) -> list[str]:
        return sorted({t.family for t in self.tasks if t.split == "bench"})


def personas_from_dicts(rows: Sequence[Mapping[str, Any]]) -> list:
    """Persona objects from `personas` lake rows' persona_json (lists back to tuples)."""
    from clawgym.synth.personas import Persona

    return [Persona(**{**d, "goals": tuple(d["goals"]), "tools": tuple(d["tools"])}) for d in rows]


def synthesize_tasks(route: str, n: int, *, seed: int = 0, factory: Any = None,
                     personas: Sequence[Mapping[str, Any]] = (), families: Sequence[str] = (), workers: int = 1,
                     heldout_per_category: int = 1, heldout_families: Sequence[str] = (), bench_new_seeds: int = 0,
                     dedupe_threshold: float = 0.90, gates: bool = True, embed: Any = None, llm: Any = None,
                     gate_cache_dir: str | None = None, new_seed_families: Sequence[str] = ()) -> SynthesisRun:
    """`n` procedural tasks (route procedural | both) and, with `llm` (an LLMPlan; route llm | both), the LLM
    route's, through clawgym.synth.pipeline.synthesize (gates -> dedupe -> held-out split); `personas` are
    persona dicts. Empty sequences mean the pipeline's defaults (all families, the default held-out draw, new
    seeds of every family)."""
    from clawgym.synth.diversity import diversity
    from clawgym.synth.pipeline import synthesize

    if route not in ROUTES:
        raise ValueError(f"route: {route!r} is not one of {', '.join(ROUTES)}")
    people = personas_from_dicts(personas)
    res = synthesize(n if route in ("procedural", "both") else 0, seed=seed, factory=factory,
                     families=list(families) or None, personas=people or None, workers=workers,
                     held_out_per_category=heldout_per_category, dedupe_threshold=dedupe_threshold, embed=embed,
                     validate=gates, llm=llm if route in ("llm", "both") else None, gate_cache_dir=gate_cache_dir,
                     heldout_families=list(heldout_families) or None, bench_new_seeds=bench_new_seeds,
                     new_seed_families=list(new_seed_families) or None)
    for t in res.tasks:
        t.suite = "procedural" if t.route == "procedural" else "llm"
    return SynthesisRun(tasks=res.tasks, result=res, gate_counts=res.gate_counts(),
                        diversity=diversity(res.tasks, embed, seed=seed))


__all__ = ["ROUTES", "SynthesisRun", "personas_from_dicts", "synthesize_tasks"]
