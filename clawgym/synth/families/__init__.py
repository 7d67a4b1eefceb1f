"""Procedural task families. Importing this package registers every family module present."""

import importlib

from clawgym.synth.families.base import (  # noqa: F401
    REGISTRY,
    Ctx,
    Family,
    GradeCode,
    all_families,
    family,
    generate_procedural,
    get_family,
    register,
)

FAMILY_MODULES = ("productivity", "systems", "analysis", "content", "planning", "software")

for _m in FAMILY_MODULES:
    try:
        importlib.import_module(f"clawgym.synth.families.{_m}")
    except ModuleNotFoundError as _e:  # a module not written yet: skip only that one
        if _e.name != f"clawgym.synth.families.{_m}":
            raise
