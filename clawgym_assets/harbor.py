"""`clawgym_assets.harbor`, kept as an import path (tests, scripts, the CLI import it):
the code lives in `clawgym_assets/defs/harbor/assets.py`, its domain's folder."""

from clawgym_assets.defs.harbor.assets import *  # noqa: F401,F403
