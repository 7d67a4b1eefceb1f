"""`clawgym_assets.automation`, kept as an import path (tests, scripts, the CLI import it):
the code lives in `clawgym_assets/defs/bench/automation.py`, its domain's folder."""

from clawgym_assets.defs.bench.automation import *  # noqa: F401,F403
