"""`clawgym_assets.bench`, kept as an import path (tests, scripts, the CLI import it):
the code lives in `clawgym_assets/defs/bench/assets.py`, its domain's folder."""

from clawgym_assets.defs.bench.assets import *  # noqa: F401,F403
