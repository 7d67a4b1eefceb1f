"""The training domain's definitions: the base model and the checkpoints."""

import dagster as dg

from clawgym_assets.defs.training import assets
from clawgym_assets.settings import GraphSettings

CHECKS: list = []  # no quality gate of its own
ASSETS = [assets.base_model, assets.checkpoints]


def defs(settings: GraphSettings) -> dg.Definitions:
    return dg.Definitions(assets=ASSETS)
