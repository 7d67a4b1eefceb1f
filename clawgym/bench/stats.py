"""Re-export: the score statistics live in clawgym.stats (below the agent: the demo's learning report in
clawgym.agent uses them too, and the agent is below the bench)."""

from clawgym.stats import (  # noqa: F401
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

__all__ = ["OVERALL", "Comparison", "ScoreRow", "bootstrap_ci", "compare", "flag_reason", "pass_at_k", "summarize",
           "task_means"]
