"""The resources of the default definitions, gathered from the domains that own them (defs/<domain>/resources.py).
The one LakeResource is nested in the resources that need data paths; every run makes its data root owner-only
(group-readable with CLAWGYM_SHARED_GROUP=1: clawgym.lake.modes)."""

from clawgym_assets.defs.lake.resources import LakeResource
from clawgym_assets.defs.rollouts.resources import rollout_resources
from clawgym_assets.defs.training.resources import training_resources


def default_resources() -> dict:
    """The resources of the default Definitions; env vars override (CLAWGYM_DATA, CLAWGYM_SANDBOX,
    CLAWGYM_ENDPOINTS, CLAWGYM_JUDGE*, CLAWGYM_OPENCLAW*, CLAWGYM_SHARED_GROUP, …), each read by the resource it
    sets (their `from_env`)."""
    lake_res = LakeResource.from_env()
    return {"lake": lake_res, **rollout_resources(lake_res), **training_resources()}
