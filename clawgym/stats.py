"""Bench statistics: per-category means on the 0–100 scale, seeded bootstrap CIs, pass@k, paired
regression test against a parent checkpoint. Pure numpy; no Dagster."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from math import comb
from typing import Any

import numpy as np

OVERALL = "overall"


def bootstrap_ci(values: Sequence[float], *, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
                 ) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean. Deterministic for a given seed. One value → (v, v)."""
    x = np.asarray(list(values), dtype=float)
    if x.size == 0:
        return (float("nan"), float("nan"))
    if x.size == 1 or np.all(x == x[0]):
        return (float(x.mean()), float(x.mean()))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    means = x[idx].mean(axis=1)
    return (float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2)))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), for n samples of which c passed."""
    if n < 1 or k < 1:
        raise ValueError(f"need n >= 1 and k >= 1, got n={n} k={k}")
    if c < 0 or c > n:
        raise ValueError(f"c must be in [0, n], got c={c} n={n}")
    k = min(k, n)
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


@dataclass
class ScoreRow:
    """One category's (or overall) bench score for a model × suite: mean with bootstrap CI, pass@1/pass@k
    and the trust counts (infra / unjudged rollouts are counted, never scored)."""

    category: str
    n: int  # tasks in the mean (with at least one scored rollout)
    mean: float | None  # 0–100 over scored tasks; None when no task of the category was scored
    ci_low: float | None
    ci_high: float | None
    pass_at_1: float | None  # 0–1
    pass_at_k: float | None  # 0–1
    k: int
    n_tasks: int = 0  # tasks attempted
    n_rollouts: int = 0  # rollouts (task × repeat) attempted
    n_scored: int = 0  # rollouts scored (ok, agent_error, limit)
    n_infra: int = 0  # rollouts our machinery broke: not scored, not in the mean
    n_unjudged: int = 0  # rollouts whose rubric judge was absent: not scored, not in the mean
    infra_rate: float = 0.0  # n_infra / n_rollouts
    unjudged_rate: float = 0.0
    flagged: bool = False  # the model × suite result is not trustworthy (see flag_reason): not ranked
    flag_reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def flag_reason(n_rollouts: int, n_scored: int, n_infra: int, n_unjudged: int, *, max_infra_rate: float | None = 0.05,
                max_unjudged_rate: float | None = None) -> str:
    """Why a model's suite result is not trustworthy ("" = it is): no scored rollout, or an infra (unjudged)
    rate above its bound (None = no bound)."""
    if n_rollouts and not n_scored:
        return f"no scored rollouts ({n_infra} infra, {n_unjudged} unjudged of {n_rollouts})"
    why = []
    if max_infra_rate is not None and n_rollouts and n_infra / n_rollouts > max_infra_rate + 1e-12:
        why.append(f"infra_rate {100 * n_infra / n_rollouts:.1f}% > {100 * max_infra_rate:.1f}% "
                   f"({n_infra} of {n_rollouts} rollouts)")
    if max_unjudged_rate is not None and n_rollouts and n_unjudged / n_rollouts > max_unjudged_rate + 1e-12:
        why.append(f"unjudged_rate {100 * n_unjudged / n_rollouts:.1f}% > {100 * max_unjudged_rate:.1f}% "
                   f"({n_unjudged} of {n_rollouts} rollouts)")
    return "; ".join(why)


def summarize(results: Iterable[Mapping], *, k: int | None = None, pass_threshold: float = 1.0,
              n_boot: int = 2000, seed: int = 0, max_infra_rate: float | None = None,
              max_unjudged_rate: float | None = None) -> list[ScoreRow]:
    """Aggregate per-task results (dicts with task_id, category, score in [0,1], optional repeat and
    failure_class) into one row per category plus ``overall``. Only scored rollouts (ok, agent_error, limit:
    ``clawgym.lake.records.outcome``) enter means, CIs and pass@k; infra and unjudged rollouts are counted
    (n_infra, n_unjudged, rates) and never scored as 0. A task's score is the mean over its scored repeats; the
    bench score is 100 × the mean task score (ClawGym-Bench). A repeat passes when score >= pass_threshold.
    k defaults to the smallest number of scored repeats any scored task has. A category whose tasks were all
    unscored gets mean/CI/pass None. With a bound, every row of the result carries the overall flag
    (:func:`flag_reason`). Rows are taken as given: pass `clawgym.lake.records.effective_rows` first when the
    input holds retried history."""
    from clawgym.lake.records import outcome

    by_task: dict[str, list[float]] = defaultdict(list)
    cat_of: dict[str, str] = {}
    per_cat: dict[str, dict[str, int]] = defaultdict(lambda: {"scored": 0, "infra": 0, "unjudged": 0})
    tasks_of: dict[str, set] = defaultdict(set)
    for r in results:
        tid = str(r["task_id"])
        cat = cat_of.setdefault(tid, str(r.get("category") or "uncategorized"))
        o = outcome(r)
        for c in (cat, OVERALL):
            per_cat[c][o] += 1
            tasks_of[c].add(tid)
        if o == "scored":
            by_task[tid].append(float(r["score"]))
    if not cat_of:
        return []
    kk = k or min((len(v) for v in by_task.values()), default=1)
    rows: list[ScoreRow] = []
    for cat in sorted(c for c in per_cat if c != OVERALL) + [OVERALL]:
        tids = sorted(t for t in tasks_of[cat] if t in by_task)
        pc = per_cat[cat]
        n_roll = sum(pc.values())
        counts: dict[str, Any] = dict(
            n_tasks=len(tasks_of[cat]), n_rollouts=n_roll, n_scored=pc["scored"], n_infra=pc["infra"],
            n_unjudged=pc["unjudged"], infra_rate=pc["infra"] / n_roll if n_roll else 0.0,
            unjudged_rate=pc["unjudged"] / n_roll if n_roll else 0.0)
        if not tids:
            rows.append(ScoreRow(cat, 0, None, None, None, None, None, kk, **counts))
            continue
        task_means_ = [float(np.mean(by_task[t])) * 100 for t in tids]
        lo, hi = bootstrap_ci(task_means_, n_boot=n_boot, seed=seed)
        p1 = [pass_at_k(len(by_task[t]), sum(s >= pass_threshold - 1e-9 for s in by_task[t]), 1) for t in tids]
        pk = [pass_at_k(len(by_task[t]), sum(s >= pass_threshold - 1e-9 for s in by_task[t]), kk) for t in tids]
        rows.append(ScoreRow(cat, len(tids), float(np.mean(task_means_)), lo, hi, float(np.mean(p1)),
                             float(np.mean(pk)), kk, **counts))
    ov = rows[-1]
    why = flag_reason(ov.n_rollouts, ov.n_scored, ov.n_infra, ov.n_unjudged, max_infra_rate=max_infra_rate,
                      max_unjudged_rate=max_unjudged_rate)
    if why:
        for row in rows:
            row.flagged, row.flag_reason = True, why
    return rows


@dataclass
class Comparison:
    """Paired-bootstrap delta (0–100 scale) of a model vs its parent over the tasks both were scored on."""

    n_common: int
    delta: float  # mean(current - parent) on the 0–100 scale over common tasks
    ci_low: float
    ci_high: float

    @property
    def significant_regression(self) -> bool:
        return self.n_common > 0 and self.ci_high < 0

    @property
    def significant_improvement(self) -> bool:
        return self.n_common > 0 and self.ci_low > 0


def compare(current: Mapping[str, float], parent: Mapping[str, float], *, n_boot: int = 2000, seed: int = 0
            ) -> Comparison:
    """Paired bootstrap over the tasks both were scored on (build the inputs with :func:`task_means`, which
    leaves infra/unjudged out); inputs map task_id -> score in [0,1]. n_common says on how many tasks."""
    common = sorted(set(current) & set(parent))
    if not common:
        return Comparison(0, float("nan"), float("nan"), float("nan"))
    d = [100 * (float(current[t]) - float(parent[t])) for t in common]
    lo, hi = bootstrap_ci(d, n_boot=n_boot, seed=seed)
    return Comparison(len(common), float(np.mean(d)), lo, hi)


def task_means(results: Iterable[Mapping]) -> dict[str, float]:
    """task_id -> mean score over scored repeats. Infra and unjudged rows are not scores: they are left out, and
    a task with no scored row is absent (so comparisons between models use tasks both actually scored)."""
    from clawgym.lake.records import outcome

    acc: dict[str, list[float]] = defaultdict(list)
    for r in results:
        if outcome(r) == "scored":
            acc[str(r["task_id"])].append(float(r["score"]))
    return {t: float(np.mean(v)) for t, v in acc.items()}
