"""Secrets never leave the process: values of API-key-like environment variables are redacted
from anything clawgym stores (trajectories, proxy logs, errors)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from typing import Any

from clawgym.keys import secret  # noqa: F401  (one import for the agent layer)

REDACTED = "[REDACTED]"
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)", re.I)
_BEARER = re.compile(r"(Bearer\s+)[A-Za-z0-9._\-]{12,}")
_SK = re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}")


def secret_values(extra_env: Iterable[str] = ()) -> list[str]:
    """Values of env vars named like secrets (…KEY, …TOKEN, …) plus the named ones; ≥ 8 chars."""
    names = set(n for n in extra_env if n)
    names |= {k for k in os.environ if _SECRET_NAME.search(k)}
    vals = {os.environ.get(n, "") for n in names}
    return sorted((v for v in vals if len(v) >= 8), key=len, reverse=True)


def redact(text: str, extra_env: Iterable[str] = ()) -> str:
    """`text` with every secret env value (raw or JSON-escaped), bearer token and sk- key replaced by
    REDACTED."""
    if not text:
        return text
    return _redact_values(text, _with_escaped(secret_values(extra_env)))


def _with_escaped(values: list[str]) -> list[str]:
    """Each value, followed by its JSON-escaped form where that differs."""
    out = []
    for v in values:
        out.append(v)
        ev = json.dumps(v)[1:-1]
        if ev != v:
            out.append(ev)
    return out


def _redact_values(text: str, values: list[str]) -> str:
    for v in values:
        if v in text:
            text = text.replace(v, REDACTED)
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    return _SK.sub(REDACTED, text)


def redact_obj(obj: Any, extra_env: Iterable[str] = ()) -> Any:
    """Redact every string inside a JSON-like structure. The environment is read once for the whole structure
    (a rollout's record holds thousands of strings)."""
    values = _with_escaped(secret_values(extra_env))

    def walk(x: Any) -> Any:
        if isinstance(x, str):
            return _redact_values(x, values) if x else x
        if isinstance(x, list):
            return [walk(y) for y in x]
        if isinstance(x, tuple):
            return tuple(walk(y) for y in x)
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        return x

    return walk(obj)


__all__ = ["secret", "redact", "redact_obj", "secret_values", "REDACTED"]
