"""The synthesis domain's definitions: its assets and their quality gates."""

import dagster as dg

from clawgym_assets.defs.synthesis import assets, checks
from clawgym_assets.settings import GraphSettings

CHECKS = checks.CHECKS

ASSETS = [assets.personas, assets.skills, assets.imported_tasks, assets.llm_candidates, assets.synthetic_tasks,
          assets.mock_workspaces, assets.verifiers]


def defs(settings: GraphSettings) -> dg.Definitions:
    return dg.Definitions(assets=ASSETS, asset_checks=checks.CHECKS)
