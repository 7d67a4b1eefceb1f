"""clawgym: the Dagster-free domain library (tasks, sandboxes, verifiers, agents, training, bench)."""

__version__ = "0.1.0"

DEFAULT_WORKSPACE = "/root/.openclaw/workspace"
