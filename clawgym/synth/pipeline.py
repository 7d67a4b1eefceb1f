"""The one synthesis pipeline — used by the `synthetic_tasks` asset, the CLI (through the asset) and the
benchmarks: generate (procedural families + optionally the LLM route) -> gates -> dedupe -> split, keeping every
rejected candidate with the gate that dropped it and why. Library code (no Dagster).

Gates: procedural tasks (and `extra_tasks`) go through `validate_many` (compile, no-op, scaffold, oracle twice,
mutations, hacker); LLM-route candidates are gated inside `generate_llm_tasks` (schema, then the same sandbox
gates batched across candidates, reviewer, auditor, with repairs) and are not validated a second time. Dedupe
runs over all accepted tasks together (workspace fingerprint for procedural tasks; MiniLM cosine >=
`dedupe_threshold` within a
category across LLM tasks and one representative per procedural family). Split: held-out procedural families
are the bench split (`split_by_family`, over the procedural tasks only, so adding LLM tasks never changes the
procedural split; or exactly the `heldout_families` named); other tasks are train. `bench_new_seeds`: that many
new seeds (from `new_seed_start`) of every generated family join the bench split too, so a bench can tell "new
seeds of the training families" (held-in) from "held-out families".

Every procedural task carries its references: `reference` (the replay of the answers the generator computed)
and, where its family has a program solution, `program_reference` (clawgym.synth.solutions.with_program): the
program teacher replays that data and imports nothing from synthesis."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from clawgym.synth.families.base import all_families, generate_procedural, get_family
from clawgym.synth.gates import (
    Rejected,
    TaskValidation,
    dedupe,
    rejected_from_validations,
    split_by_family,
    validate_many,
)
from clawgym.synth.solutions import with_program
from clawgym.tasks.model import Task

# gate names in the order a candidate meets them (rejection `stage` values); "gates" = an unclassified gate
PROCEDURAL_GATES = ("infra", "compile", "noop", "scaffold", "oracle", "determinism", "mutation", "keys", "hacker",
                    "gates")
LLM_GATES = ("llm_error", "schema", "infra", "compile", "noop", "scaffold", "oracle", "determinism", "mutation",
             "keys", "hacker", "review", "audit")
GATE_ORDER = tuple(dict.fromkeys(("llm_error", "schema", *PROCEDURAL_GATES, "review", "audit", "dedupe")))


@dataclass
class LLMPlan:
    """What the LLM route generates inside `synthesize`: `n` candidates, `skill_fraction` of them skill-grounded
    (route "skill", from `skills`), the rest persona-driven (route "persona", from `personas`), over `taxonomy`
    ({category: [subcategory, ...]}; None = clawgym.synth.taxonomy). `generator`, `reviewer`, `auditor` are
    llm_route.ClientConfig (or dicts of its fields); reviewer/auditor default to the generator. `cache_dir` is
    passed to generate_llm_tasks when it takes one."""

    generator: Any
    n: int
    personas: list[Any] = field(default_factory=list)
    skills: list[Any] = field(default_factory=list)
    skill_fraction: float = 0.0
    taxonomy: Any = None
    reviewer: Any = None
    auditor: Any = None
    max_repairs: int = 3
    workers: int | None = None  # candidate threads (None: twice the requests the servers may have in flight)
    cache_dir: str | None = None
    hacker: str = "reject"  # the hacker gate's mode for LLM candidates (a hackable verifier is repaired)
    gate_cache_dir: str | None = None  # gate verdicts (default <cache_dir>/gates)
    shard: int | None = None  # make only candidates i with i % n_shards == shard (per route); None: all
    n_shards: int = 1


@dataclass
class SynthResult:
    """What `synthesize` returns: accepted tasks (split set), every validation, the rejects and timings."""

    tasks: list[Task]  # accepted, with split set
    validations: list[TaskValidation]
    rejected: list[Rejected]
    timings: dict[str, float] = field(default_factory=dict)
    validate_stats: dict[str, float] = field(default_factory=dict)  # validate_many's `stats` (summed over workers)
    rejections: list[dict[str, Any]] = field(default_factory=list)  # every reject: route, gate, reason, task_json
    candidates: list[dict[str, str]] = field(default_factory=list)  # every candidate: task_id, route, category
    llm_stats: dict[str, Any] = field(default_factory=dict)  # the LLM route's requests, cache hits, tokens, cost

    def rejected_table(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.rejected]

    def validation_table(self) -> list[dict[str, Any]]:
        return [v.to_dict() for v in self.validations]

    def gate_counts(self) -> dict[str, dict[str, dict[str, Any]]]:
        """route -> category -> {candidates, rejected: {gate: n}, passed: {gate: n still in after it},
        accepted}; gates in GATE_ORDER (only those that apply to the route)."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for c in self.candidates:
            d = out.setdefault(c["route"], {}).setdefault(c["category"], {"candidates": 0, "rejected": {}})
            d["candidates"] += 1
        for r in self.rejections:
            d = out.setdefault(r["route"], {}).setdefault(r["category"], {"candidates": 0, "rejected": {}})
            d["rejected"][r["stage"]] = d["rejected"].get(r["stage"], 0) + 1
        for route, cats in out.items():
            gates = (LLM_GATES if route != "procedural" else PROCEDURAL_GATES) + ("dedupe",)
            for d in cats.values():
                left, passed = d["candidates"], {}
                for g in GATE_ORDER:
                    if g in gates or g in d["rejected"]:
                        left -= d["rejected"].get(g, 0)
                        passed[g] = left
                d["rejected"] = {g: d["rejected"][g] for g in GATE_ORDER if g in d["rejected"]}
                d["passed"] = passed
                d["accepted"] = left
        return out


def procedural_gate(v: TaskValidation) -> str:
    """The first gate a failed procedural validation did not pass (a procedural task always has its reference)."""
    from clawgym.synth.llm_gates import llm_gate_of

    return llm_gate_of(v, has_reference=True)


def _task_json(t: Task | None) -> str | None:
    return t.model_dump_json() if t is not None else None


def _merge_stats(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Sum the counters of two generate_llm_tasks stats dicts (max for peaks; per-task ratios recomputed)."""
    out = dict(a)
    for k, v in b.items():
        if k in ("peak_in_flight", "max_in_flight", "servers"):
            out[k] = max(out.get(k) or 0, v or 0)
        elif isinstance(v, dict):
            out[k] = _merge_stats(out.get(k) or {}, v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and not k.endswith(("_per_accepted_task",
                                                                                           "_per_s")):
            out[k] = (out.get(k) or 0) + v
    acc = out.get("accepted") or 0
    for k, tot in (("tokens_per_accepted_task", "total_tokens"), ("cost_per_accepted_task", "cost")):
        if tot in out:
            out[k] = (out[tot] / acc) if acc else None
    return out


def generate_llm(plan: LLMPlan, factory: Any = None, seed: int = 0
                 ) -> tuple[list[Task], list[dict[str, Any]], dict[str, Any]]:
    """The LLM route's persona and skill candidates (accepted tasks, rejection records with `route`, stats:
    requests, cache hits, tokens, cost, gate batches — summed over both routes)."""
    from clawgym.synth.llm_route import generate_llm_tasks

    n_skill = round(plan.n * plan.skill_fraction) if plan.skills else 0
    n_persona = plan.n - n_skill
    if n_persona and not plan.personas:
        raise ValueError("LLM route: persona-driven candidates asked for but no personas given")
    from clawgym.synth.llm_route import ClientConfig

    gen = ClientConfig.coerce(plan.generator)
    rev = ClientConfig.coerce(plan.reviewer) if plan.reviewer is not None else None
    aud = ClientConfig.coerce(plan.auditor) if plan.auditor is not None else rev
    accepted: list[Task] = []
    rejected: list[dict[str, Any]] = []
    stats: dict[str, Any] = {}
    for route, k in (("persona", n_persona), ("skill", n_skill)):
        if k <= 0:
            continue
        idx = [i for i in range(k) if plan.shard is None or i % max(1, plan.n_shards) == plan.shard]
        if not idx:
            continue
        res = generate_llm_tasks(plan.personas, plan.skills, plan.taxonomy, gen, k, route=route,
                                 indices=idx, max_repairs=plan.max_repairs, factory=factory, seed=seed,
                                 reviewer=rev, auditor=aud, cache_dir=plan.cache_dir,
                                 workers=plan.workers, hacker=plan.hacker,
                                 gate_cache_dir=plan.gate_cache_dir, return_stats=True)
        acc, rej, st = cast("tuple[list[Task], list[dict[str, Any]], dict[str, Any]]", res)  # return_stats: a 3-tuple
        accepted += acc
        rejected += [{**r, "route": r.get("route") or route} for r in rej]
        stats = _merge_stats(stats, {kk: vv for kk, vv in st.items() if kk != "rejected_by_reason"})
    return accepted, rejected, stats


def rejection_stage_counts(rejected: list[dict[str, Any]]) -> dict[str, int]:
    """{gate: count} of LLM-route rejection records (their `reason`), in GATE_ORDER."""
    c: dict[str, int] = {}
    for r in rejected:
        c[r.get("reason") or "gates"] = c.get(r.get("reason") or "gates", 0) + 1
    return {g: c[g] for g in sorted(c, key=lambda g: GATE_ORDER.index(g) if g in GATE_ORDER else len(GATE_ORDER))}


def _procedural(n: int, seed: int, families: list[str] | None, personas: list[Any] | None, bench_new_seeds: int,
                new_seed_start: int, new_seed_families: list[str] | None) -> tuple[list[Task], set[str]]:
    """(the n procedural tasks plus `bench_new_seeds` new seeds per generated family from `new_seed_start`, the ids
    of those new-seed tasks)."""
    proc = generate_procedural(n, seed=seed, families=families, personas=personas) if n > 0 else []
    if proc and bench_new_seeds > 0:
        if new_seed_start <= max(t.seed or 0 for t in proc):
            raise ValueError(f"new_seed_start {new_seed_start} must be above the training seeds "
                             f"(up to {max(t.seed or 0 for t in proc)})")
        fams = sorted({t.family for t in proc} & set(new_seed_families) if new_seed_families is not None
                      else {t.family for t in proc})
        proc += [get_family(f).generate(new_seed_start + i) for i in range(bench_new_seeds) for f in fams]
    new_ids = {t.task_id for t in proc if (t.seed or 0) >= new_seed_start} if bench_new_seeds > 0 else set()
    return proc, new_ids


def _add_llm_rejections(llm_rej: list[dict[str, Any]], seed: int, candidates: list[dict[str, Any]],
                        rejections: list[dict[str, Any]]) -> None:
    """Each LLM-route rejection record as a candidate and a rejection row (its id names the candidate's index)."""
    for r in llm_rej:
        route = r.get("route", "persona")
        tid = f"llm-{route}-{seed}-{int(r.get('index', 0)):05d}-rejected"
        candidates.append({"task_id": tid, "route": route, "category": r.get("category") or ""})
        rejections.append({"task_id": tid, "route": route, "family": f"llm_{route}",
                           "category": r.get("category") or "", "stage": r.get("reason") or "gates",
                           "reason": r.get("detail") or "",
                           "task_json": json.dumps({k: v for k, v in r.items()}, default=str)})


def _split(kept: list[Task], heldout_families: list[str] | None, held_out_per_category: int, seed: int,
           new_ids: set[str]) -> list[Task]:
    """`kept` with their splits: procedural tasks of the held-out families (`heldout_families`, else drawn per
    category; compositions by the composer's rule) and the new-seed tasks `new_ids` in bench, the rest in train."""
    proc = [t for t in kept if t.route == "procedural"]
    if heldout_families is not None:
        held = set(heldout_families)
        split_tasks = [t.model_copy(update={"split": "bench" if t.family in held else "train"}) for t in proc]
    else:
        # a composed family's split is the composer's rule on its name, never a draw: the hand-written families
        # are drawn per category, the compositions follow clawgym.synth.compose.heldout_composition
        from clawgym.synth.compose import heldout_composition, is_composed

        comp = [t.model_copy(update={"split": "bench" if heldout_composition(t.family or "") else "train"})
                for t in proc if is_composed(t.family)]
        split_tasks = split_by_family([t for t in proc if not is_composed(t.family)],
                                      held_out_per_category=held_out_per_category, seed=seed) + comp
    split = {t.task_id: t.model_copy(update={"split": "bench"}) if t.task_id in new_ids else t for t in split_tasks}
    return [split.get(t.task_id) or t.model_copy(update={"split": "train"}) for t in kept]


def synthesize(n: int, seed: int = 0, factory: Any = None, families: list[str] | None = None,
               personas: list[Any] | None = None, workers: int = 1, chunk: int = 100,
               held_out_per_category: int = 1, dedupe_threshold: float = 0.90, embed: Any = None,
               extra_tasks: list[Task] | None = None, validate: bool = True, forkserver: bool = True,
               llm: LLMPlan | None = None, gate_cache_dir: str | None = None,
               heldout_families: list[str] | None = None, bench_new_seeds: int = 0,
               new_seed_start: int = 1000, new_seed_families: list[str] | None = None) -> SynthResult:
    """n procedural tasks (n=0: none) + `extra_tasks` (which must carry their own verifiers) through the gates,
    plus — with `llm` — the LLM route's candidates (gated by the LLM route), then dedupe over all of them and the
    held-out-family split. factory=None validates on the host (dev only). forkserver=False replays/grades with
    real python3 processes only (same results, slower). `gate_cache_dir`: gate results cached by content
    (clawgym.synth.gates.GateCache; the `verifiers` asset reads the same cache). `heldout_families`: exactly these
    procedural families are the bench split (default: `held_out_per_category` per category, drawn by `seed`);
    `bench_new_seeds`: per generated family, that many more tasks of seeds `new_seed_start`, ... in the bench
    split (new seeds of the training families); `new_seed_families`: only these families get them (None: every
    generated family)."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    unknown = sorted(set(heldout_families or []) - set(families or [f.name for f in all_families()]))
    if unknown:
        raise ValueError(f"heldout_families: {unknown} are not among the generated families")
    proc, new_ids = _procedural(n, seed, families, personas, bench_new_seeds, new_seed_start, new_seed_families)
    tasks = [with_program(t) for t in proc] + list(extra_tasks or [])
    timings["generate_s"] = time.perf_counter() - t0
    llm_tasks: list[Task] = []
    llm_rej: list[dict[str, Any]] = []
    llm_stats: dict[str, Any] = {}
    if llm is not None and llm.n > 0:
        t_llm = time.perf_counter()
        llm_tasks, llm_rej, llm_stats = generate_llm(llm, factory=factory, seed=seed)
        timings["llm_s"] = time.perf_counter() - t_llm
    candidates = [{"task_id": t.task_id, "route": t.route or "procedural", "category": t.category}
                  for t in tasks + llm_tasks]
    by_id = {t.task_id: t for t in tasks + llm_tasks}
    rejections: list[dict[str, Any]] = []
    _add_llm_rejections(llm_rej, seed, candidates, rejections)
    t1 = time.perf_counter()
    vstats: dict[str, float] = {}
    vals = validate_many(tasks, factory, workers=workers, chunk=chunk, forkserver=forkserver,
                         stats=vstats, cache_dir=gate_cache_dir) if validate and tasks else []
    timings["validate_s"] = time.perf_counter() - t1
    rejected = rejected_from_validations(vals)
    gate_of = {v.task_id: procedural_gate(v) for v in vals if not v.passed}
    for r in rejected:
        t = by_id[r.task_id]
        rejections.append({"task_id": r.task_id, "route": t.route or "procedural", "family": r.family,
                           "category": r.category, "stage": gate_of[r.task_id], "reason": r.reason,
                           "task_json": _task_json(t)})
    bad = {r.task_id for r in rejected}
    ok = [t for t in tasks if t.task_id not in bad] + llm_tasks
    t2 = time.perf_counter()
    kept, dup = dedupe(ok, threshold=dedupe_threshold, embed=embed)
    timings["dedupe_s"] = time.perf_counter() - t2
    for r in dup:
        t = by_id[r.task_id]
        rejections.append({"task_id": r.task_id, "route": t.route or "procedural", "family": r.family,
                           "category": r.category, "stage": "dedupe", "reason": r.reason, "task_json": _task_json(t)})
    t3 = time.perf_counter()
    final = _split(kept, heldout_families, held_out_per_category, seed, new_ids)
    timings["split_s"] = time.perf_counter() - t3
    timings["total_s"] = time.perf_counter() - t0
    llm_rejected = [Rejected(r["task_id"], "gates", f"{r['stage']}: {r['reason']}", r["family"], r["category"])
                    for r in rejections[:len(llm_rej)]]
    return SynthResult(final, vals, rejected + llm_rejected + dup, timings, vstats, rejections, candidates,
                       llm_stats)


__all__ = ["GATE_ORDER", "LLMPlan", "SynthResult", "generate_llm", "procedural_gate", "rejection_stage_counts",
           "synthesize"]
