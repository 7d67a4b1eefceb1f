"""Bench: suites, scoring, statistics, plots (no Dagster)."""

from clawgym.bench.stats import *  # noqa: F403  (the score statistics, as clawgym.bench.stats names them)
