"""Scoring one model on bench suites: rollouts (run_suite) -> the rows that count -> per-category statistics.

    scored = score_model({"procedural": tasks}, "oracle", factory, model="oracle", rollout=RolloutSettings(),
                         scoring=ScoreSettings(repeats=3), on_suite=write)

What the `bench_scores` asset does, without Dagster: it reads the suites' tasks, calls this and writes each
suite's `bench_results` and `bench_scores` rows as `on_suite` hands them over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clawgym.bench.stats import OVERALL, ScoreRow, summarize


@dataclass(frozen=True)
class ScoreSettings:
    """How a model's rollouts become bench scores (the rollouts themselves: RolloutSettings)."""

    repeats: int = 1  # >1 gives pass@k
    n_boot: int = 2000  # bootstrap resamples of the CI
    seed: int = 0
    pass_threshold: float = 1.0  # a repeat passes at score >= this
    max_infra_rate: float = 0.05  # above this share of infra rollouts the model is flagged and not ranked
    max_unjudged_rate: float = 1.0  # likewise for unjudged rollouts (1.0 = never flags)
    workers: int = 1  # rollouts in flight at once (a local model server batches them)


@dataclass
class SuiteScores:
    """One suite's outcome for one model."""

    suite: str
    results: list[dict] = field(default_factory=list)  # bench_results rows of this run (every attempt)
    effective: list[dict] = field(default_factory=list)  # the row that counts per task × repeat
    stats: list[ScoreRow] = field(default_factory=list)  # per category, plus OVERALL
    scores: list[dict] = field(default_factory=list)  # bench_scores rows (categories with a mean)

    @property
    def overall(self) -> ScoreRow:
        return next(s for s in self.stats if s.category == OVERALL)


def score_suite(tasks: Sequence, policy, factory, *, model: str, suite: str, parent: str | None = None,
                rollout=None, judge=None, scoring: ScoreSettings | None = None, run_id: str = "",
                log: Callable[[str], Any] | None = None) -> SuiteScores:
    """Roll `model` out on one suite's tasks and score it: means and CIs over scored rollouts only (infra and
    unjudged are counted, never scored as 0); bench_scores rows for the categories with something scored."""
    from clawgym.bench.runner import run_suite
    from clawgym.lake.records import BENCH_RESULT_KEY, effective_rows

    sc = scoring or ScoreSettings()
    rows = run_suite(tasks, policy, factory, model=model, suite=suite, settings=rollout, judge=judge,
                     repeats=sc.repeats, run_id=run_id, pass_threshold=sc.pass_threshold, log=log,
                     workers=sc.workers)
    eff = effective_rows(rows, BENCH_RESULT_KEY)
    stats = summarize(eff, n_boot=sc.n_boot, seed=sc.seed, pass_threshold=sc.pass_threshold,
                      max_infra_rate=sc.max_infra_rate, max_unjudged_rate=sc.max_unjudged_rate)
    srows = [{**s.to_dict(), "model": model, "suite": suite, "parent": parent, "run_id": run_id}
             for s in stats if s.mean is not None]  # a category with nothing scored has no mean to store
    return SuiteScores(suite=suite, results=rows, effective=eff, stats=stats, scores=srows)


def score_model(suite_tasks: Mapping[str, Sequence], policy, factory, *, model: str, parent: str | None = None,
                rollout=None, judge=None, scoring: ScoreSettings | None = None, run_id: str = "",
                log: Callable[[str], Any] | None = None,
                on_suite: Callable[[SuiteScores], Any] | None = None) -> list[SuiteScores]:
    """:func:`score_suite` for every suite in `suite_tasks` (suite -> tasks, in order), handing each result to
    `on_suite` as soon as it is there (the caller writes it: an earlier suite is stored even if a later fails)."""
    out = []
    for suite, tasks in suite_tasks.items():
        ss = score_suite(tasks, policy, factory, model=model, suite=suite, parent=parent, rollout=rollout,
                         judge=judge, scoring=scoring, run_id=run_id, log=log)
        if on_suite is not None:
            on_suite(ss)
        out.append(ss)
    return out


__all__ = ["ScoreSettings", "SuiteScores", "score_model", "score_suite"]
