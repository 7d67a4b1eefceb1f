"""The graph by domain, one folder each (synthesis, rollouts, training, bench, harbor, and lake for the storage every
domain shares): its assets, checks and automation, the resources it owns with the environment variables that set
them, and a `definitions.py` whose `defs(settings)` is merged into the one code location by
clawgym_assets.definitions."""
