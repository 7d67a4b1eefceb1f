"""API keys, read by name at the moment of use.

Every key clawgym sends (a model endpoint's, the judge's, an LLM synthesis endpoint's, the proxy's upstream) is the
value of an environment variable that a config names (`api_key_env`). It is read here, when a client is made, and
never becomes a field of a config, a record or the lake, so it cannot be stored or logged with them
(`clawgym.agent.secrets` redacts such values from whatever is stored).
"""

from __future__ import annotations

import os


def secret(name: str | None) -> str:
    """The value of the environment variable `name` ("" when it is unset or no name is given)."""
    return os.environ.get(name, "") if name else ""


__all__ = ["secret"]
