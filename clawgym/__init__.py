"""clawgym: the Dagster-free domain library (tasks, sandboxes, verifiers, agents, training, bench)."""

__version__ = "0.1.0"

DEFAULT_WORKSPACE = "/root/.openclaw/workspace"

# where scripts/install_openclaw.sh installs node + OpenClaw ($CLAWGYM_OPENCLAW_DIR overrides it; only
# resources and entry points read that variable). The one default: every other module imports this.
DEFAULT_OPENCLAW_DIR = "/var/lib/clawgym/openclaw"
