"""Bench: suites, scoring, statistics, plots (no Dagster)."""

from clawgym.bench.stats import (  # noqa: F401
    OVERALL,
    Comparison,
    ScoreRow,
    bootstrap_ci,
    compare,
    flag_reason,
    pass_at_k,
    summarize,
    task_means,
)
