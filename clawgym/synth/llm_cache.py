"""Content-addressed cache of chat-completion responses, request limiter and token/cost stats.

Cache layout: ``<cache_dir>/<aa>/<sha256>.json``, one small file per response. The key is the sha256 of the
model name plus the full request body (messages, temperature, response_format, tools, max_tokens, extras);
the endpoint's base_url and the API key are never part of it, so the same request against another mirror
of the same model hits. Writes are atomic (temp file + os.replace); concurrent writers of one key are safe.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def request_key(body: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a request body (which includes ``model``)."""
    canon = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(canon.encode()).hexdigest()


class ResponseCache:
    """One JSON file per response under `root`, addressed by `request_key` of the request body."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        """Where the response of `key` lives."""
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored response for `key`, or None (a missing or unreadable entry is a miss)."""
        try:
            with open(self.path(key), encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("key") == key else None

    def put(self, key: str, record: dict[str, Any]) -> None:
        """Store `record` for `key` atomically."""
        p = self.path(key)
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}.", suffix=".tmp", dir=p.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({**record, "key": key}, f, ensure_ascii=False, separators=(",", ":"))
            os.replace(tmp, p)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


class InFlightLimiter:
    """A bounded semaphore that also records how many requests overlapped at most."""

    def __init__(self, limit: int):
        self.limit = max(1, int(limit))
        self._sem = threading.BoundedSemaphore(self.limit)
        self._lock = threading.Lock()
        self.current = 0
        self.peak = 0

    def __enter__(self) -> InFlightLimiter:
        self._sem.acquire()
        with self._lock:
            self.current += 1
            self.peak = max(self.peak, self.current)
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self.current -= 1
        self._sem.release()


@dataclass
class LLMStats:
    """Counters of one generation run (thread-safe through `add`)."""

    requests: int = 0  # completed HTTP calls (cache misses that reached the endpoint and answered)
    cache_hits: int = 0
    cache_misses: int = 0
    prompt_tokens: int = 0  # spent on fresh requests
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0  # what cache hits would have cost
    cached_completion_tokens: int = 0
    errors: int = 0
    peak_in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **kv: int) -> None:
        """Add to counters atomically."""
        with self._lock:
            for k, v in kv.items():
                setattr(self, k, getattr(self, k) + int(v))

    def summary(self, accepted: int, candidates: int, *, price_per_1k_prompt: float | None = None,
                price_per_1k_completion: float | None = None, wall_s: float | None = None) -> dict[str, Any]:
        """Plain-dict stats incl. tokens (and cost, when prices per 1K tokens are given) per accepted task."""
        tokens = self.prompt_tokens + self.completion_tokens
        out: dict[str, Any] = {
            "candidates": candidates, "accepted": accepted,
            "requests": self.requests, "cache_hits": self.cache_hits, "cache_misses": self.cache_misses,
            "errors": self.errors, "peak_in_flight": self.peak_in_flight,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "total_tokens": tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "cached_completion_tokens": self.cached_completion_tokens,
            "tokens_per_accepted_task": (tokens / accepted) if accepted else None,
            "prompt_tokens_per_accepted_task": (self.prompt_tokens / accepted) if accepted else None,
            "completion_tokens_per_accepted_task": (self.completion_tokens / accepted) if accepted else None,
        }
        if price_per_1k_prompt is not None or price_per_1k_completion is not None:
            cost = (self.prompt_tokens * (price_per_1k_prompt or 0.0)
                    + self.completion_tokens * (price_per_1k_completion or 0.0)) / 1000.0
            out["cost"] = cost
            out["cost_per_accepted_task"] = (cost / accepted) if accepted else None
        if wall_s is not None:
            out["wall_s"] = wall_s
            out["candidates_per_s"] = candidates / wall_s if wall_s > 0 else None
        return out


__all__ = ["InFlightLimiter", "LLMStats", "ResponseCache", "request_key"]
