"""The Harbor domain's definitions: accepted tasks as Harbor dataset folders."""

import dagster as dg

from clawgym_assets.defs.harbor import assets
from clawgym_assets.settings import GraphSettings

CHECKS: list = []  # no quality gate of its own
ASSETS = [assets.harbor_datasets]


def defs(settings: GraphSettings) -> dg.Definitions:
    return dg.Definitions(assets=ASSETS)
