"""Dagster resources: the configured edges of the world (hosts, paths, keys). Each resource lives with the domain
that owns it (clawgym_assets/defs/<domain>/resources.py) and reads its own settings from the environment in its
`from_env` (secrets as dg.EnvVar, never logged or stored); this package keeps the import path tests, scripts and
the CLI use."""

from clawgym_assets.defs.lake.resources import LakeResource
from clawgym_assets.defs.rollouts.resources import (
                                                    JudgeResource,
                                                    LocalModelServerResource,
                                                    ModelEndpointsResource,
                                                    OpenClawResource,
                                                    SandboxResource,
)
from clawgym_assets.defs.training.resources import TrainerResource
from clawgym_assets.resources import default_resources
from clawgym_assets.settings import GraphSettings

__all__ = ["GraphSettings", "JudgeResource", "LakeResource", "LocalModelServerResource", "ModelEndpointsResource",
           "OpenClawResource", "SandboxResource", "TrainerResource", "default_resources"]
