"""`clawgym_assets.rollout_config`, kept as an import path (tests, scripts, the CLI import it):
the code lives in `clawgym_assets/defs/rollouts/config.py`, its domain's folder."""

from clawgym_assets.defs.rollouts.config import *  # noqa: F401,F403
