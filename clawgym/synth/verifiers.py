"""Every task checked on its untouched workspace, and the rows that record it (the `verifiers` asset's work):

- the no-op baseline of every task (`verifications` kind noop);
- tasks with a reference solution: the synthesis gates (oracle 1, no-op/scaffold 0, mutations lower the score,
  deterministic; `verifications` kind oracle, `task_validations`), failing ones rejected (stage ``verifiers``);
- imported tasks: the hacker gate's exploits (flagged in `task_validations`, never dropped).

    report = verify_tasks(tasks, factory, judge=judge, cache_dir=".../cache/gates")
    # report.verifications / .validations / .rejected: lake rows; report.hacks: per task, the exploit scores
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

VERIFIERS_STAGE = "verifiers"  # the `stage` of a rejection by the verifiers (synthesis rejections: the gate's name)


@dataclass
class VerifierReport:
    """The rows of one verifiers run, and what the gates said."""

    verifications: list[dict] = field(default_factory=list)  # `verifications` rows (kind noop | oracle)
    validations: list[dict] = field(default_factory=list)  # `task_validations` rows
    rejected: list[dict] = field(default_factory=list)  # `rejected_tasks` rows (stage VERIFIERS_STAGE)
    hacks: list[dict] = field(default_factory=list)  # {task_id, source, scores: {exploit: score}, hackable: [...]}
    gate_stats: dict = field(default_factory=dict)  # validate_many's stats (cache_hits, timings)

    @property
    def n_validated(self) -> int:
        """Tasks that went through the synthesis gates (imported tasks' hacker rows not counted)."""
        return sum(1 for v in self.validations if v["route"] != "imported")

    @property
    def oracle_pass_rate(self) -> float | None:
        gated = [v for v in self.validations if v["route"] != "imported"]
        return sum(v["passed"] for v in gated) / len(gated) if gated else None


def verify_tasks(tasks: Sequence, factory, *, judge=None, oracle_validation: bool = True,
                 hacker_imported: bool = True, gate_timeout_s: float = 600.0, cache_dir: str | None = None,
                 warn: Callable[[str], Any] | None = None) -> VerifierReport:
    """Check every task (module docstring) in sandboxes of `factory`; `warn` hears each rejection and each
    hackable imported task."""
    from clawgym.lake.records import task_row, verification_row
    from clawgym.lake.schemas import TaskSource
    from clawgym.verify import verify_noop

    rep = VerifierReport()
    for t in tasks:
        rep.verifications.append(verification_row(t, verify_noop(t, factory, judge=judge), "noop"))
    gated = [t for t in tasks if t.reference is not None] if oracle_validation else []
    if gated:
        from clawgym.synth.gates import validate_many

        by_id = {t.task_id: t for t in gated}
        for v in validate_many(gated, factory, timeout=gate_timeout_s, stats=rep.gate_stats, cache_dir=cache_dir):
            t = by_id[v.task_id]
            rep.verifications.append(verification_row(
                t, {"score": v.oracle_score if v.oracle_score is not None else 0.0, "code_score": v.oracle_score,
                    "error": "; ".join(v.errors) or None, "duration_s": v.duration_s, "gates": v.to_dict()},
                "oracle"))
            rep.validations.append({
                "task_id": t.task_id, "route": t.route, "family": t.family, "category": t.category,
                "passed": v.passed, "oracle_score": v.oracle_score, "noop_score": v.noop_score,
                "deterministic": (v.oracle_score == v.oracle_score_2) if v.oracle_score_2 is not None else None,
                "issues_json": [v.reason] if v.reason else []})
            rep.hacks.append({"task_id": t.task_id, "source": t.route or "procedural", "scores": v.exploit_scores,
                              "hackable": v.hackable})
            if not v.passed:
                rep.rejected.append({**task_row(t, TaskSource.SYNTHETIC.value), "stage": VERIFIERS_STAGE,
                                     "reason": v.reason})
                if warn:
                    warn(f"rejected {t.task_id}: {v.reason}")
    if hacker_imported:
        from clawgym.synth.gates import exploit_check

        for t in (t for t in tasks if t.route == "imported"):
            h = exploit_check(t, factory, judge=judge)
            rep.hacks.append({"task_id": t.task_id, "source": "imported", "scores": h["scores"],
                              "hackable": h["hackable"]})
            issues = [f"hackable:{x} ({h['scores'][x]:.2f})" for x in h["hackable"]]
            rep.validations.append({
                "task_id": t.task_id, "route": t.route, "family": t.family, "category": t.category, "passed": True,
                "oracle_score": None, "noop_score": h.get("untouched"), "deterministic": None,
                "issues_json": issues or (h["errors"][-1:] if h.get("infra") else
                                          ["hacker: no expected output found, no exploit run"]
                                          if not h["scores"] else [])})
            if issues and warn:
                warn(f"imported task {t.task_id} is hackable (flagged): {', '.join(issues)}")
    return rep


def hack_summary(hacks: Sequence[dict]) -> list[list]:
    """Per task source: [source, tasks checked, with an exploit run, hackable, rate, by which exploit]."""
    from clawgym.lake.records import counts

    rows = []
    for src in sorted({h["source"] for h in hacks}):
        hs = [h for h in hacks if h["source"] == src]
        bad = [h for h in hs if h["hackable"]]
        by = counts(x for h in bad for x in h["hackable"])
        rows.append([src, len(hs), sum(1 for h in hs if h["scores"]), len(bad),
                     f"{100 * len(bad) / max(1, len(hs)):.1f}%", ", ".join(f"{k} {v}" for k, v in by.items()) or "-"])
    return rows


__all__ = ["VERIFIERS_STAGE", "VerifierReport", "hack_summary", "verify_tasks"]
