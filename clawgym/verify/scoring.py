"""The code-score reduction (stdlib only): shared by the verifier runtime and the synthesis gates' grade
driver, which ships this file into a sandbox (clawgym.sandbox.guest.synth)."""

import math
from typing import Any


def mean_of_checks(data: Any) -> tuple[float, dict[str, float]]:
    """ClawGym's reduction: a dict's values averaged (bools 1/0), or a bare number. Raises ValueError."""
    if isinstance(data, bool):
        return float(data), {"value": float(data)}
    if isinstance(data, (int, float)):
        return float(data), {"value": float(data)}
    if not isinstance(data, dict):
        raise ValueError(f"grade() returned {type(data).__name__}, expected dict[str, float]")
    if not data:
        raise ValueError("grade() returned an empty dict")
    subs: dict[str, float] = {}
    for k, v in data.items():
        if isinstance(v, bool):
            subs[str(k)] = 1.0 if v else 0.0
        elif isinstance(v, (int, float)) and math.isfinite(v):
            subs[str(k)] = float(v)
        else:
            raise ValueError(f"check {k!r} has non-numeric value {v!r}")
    return sum(subs.values()) / len(subs), subs
