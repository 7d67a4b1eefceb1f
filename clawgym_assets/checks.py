"""`clawgym_assets.checks`, kept as an import path (tests and the demo import it): each domain keeps its checks
(clawgym_assets/defs/<domain>/checks.py); CHECKS is every one of them."""

from clawgym_assets.defs.bench.checks import bench_scores_gx, bench_tasks_gx, no_regression_vs_parent
from clawgym_assets.defs.rollouts.checks import sft_gx, trajectories_gx
from clawgym_assets.defs.synthesis.checks import imported_tasks_gx, synthetic_tasks_gx, verifications_gx

CHECKS = [synthetic_tasks_gx, imported_tasks_gx, verifications_gx, bench_tasks_gx, trajectories_gx, sft_gx,
          bench_scores_gx, no_regression_vs_parent]
