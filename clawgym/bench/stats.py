"""Bench statistics: per-category means on the 0–100 scale, seeded bootstrap CIs, pass@k, paired
regression test against a parent checkpoint. Pure numpy; no Dagster."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from math import comb
from typing import Iterable, Mapping, Sequence

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
    category: str
    n: int  # tasks
    mean: float  # 0–100
    ci_low: float
    ci_high: float
    pass_at_1: float  # 0–1
    pass_at_k: float  # 0–1
    k: int

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(results: Iterable[Mapping], *, k: int | None = None, pass_threshold: float = 1.0,
              n_boot: int = 2000, seed: int = 0) -> list[ScoreRow]:
    """Aggregate per-task results (dicts with task_id, category, score in [0,1], optional repeat) into
    one row per category plus ``overall``. A task's score is the mean over its repeats; the bench score
    is 100 × the mean task score (ClawGym-Bench). A repeat passes when score >= pass_threshold.
    k defaults to the smallest number of repeats any task has."""
    by_task: dict[str, list[float]] = defaultdict(list)
    cat_of: dict[str, str] = {}
    for r in results:
        tid = str(r["task_id"])
        by_task[tid].append(float(r["score"]))
        cat_of[tid] = str(r.get("category") or "uncategorized")
    if not by_task:
        return []
    kk = k or min(len(v) for v in by_task.values())
    groups: dict[str, list[str]] = defaultdict(list)
    for tid in sorted(by_task):
        groups[cat_of[tid]].append(tid)
    groups[OVERALL] = sorted(by_task)
    rows = []
    for cat in sorted(c for c in groups if c != OVERALL) + [OVERALL]:
        tids = groups[cat]
        task_means = [float(np.mean(by_task[t])) * 100 for t in tids]
        lo, hi = bootstrap_ci(task_means, n_boot=n_boot, seed=seed)
        p1 = [pass_at_k(len(by_task[t]), sum(s >= pass_threshold - 1e-9 for s in by_task[t]), 1) for t in tids]
        pk = [pass_at_k(len(by_task[t]), sum(s >= pass_threshold - 1e-9 for s in by_task[t]), kk) for t in tids]
        rows.append(ScoreRow(cat, len(tids), float(np.mean(task_means)), lo, hi, float(np.mean(p1)),
                             float(np.mean(pk)), kk))
    return rows


@dataclass
class Comparison:
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
    """Paired bootstrap over the tasks both were scored on; inputs map task_id -> score in [0,1]."""
    common = sorted(set(current) & set(parent))
    if not common:
        return Comparison(0, float("nan"), float("nan"), float("nan"))
    d = [100 * (float(current[t]) - float(parent[t])) for t in common]
    lo, hi = bootstrap_ci(d, n_boot=n_boot, seed=seed)
    return Comparison(len(common), float(np.mean(d)), lo, hi)


def task_means(results: Iterable[Mapping]) -> dict[str, float]:
    """task_id -> mean score over repeats. Infra rows (score None) are not scores: they are left out, and a task
    with only infra rows is absent (so parent/child comparisons use tasks both actually scored)."""
    acc: dict[str, list[float]] = defaultdict(list)
    for r in results:
        if r.get("score") is not None:
            acc[str(r["task_id"])].append(float(r["score"]))
    return {t: float(np.mean(v)) for t, v in acc.items()}
