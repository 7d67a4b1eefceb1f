"""The endpoints of the LLM route (clawgym.synth.llm_route): `ClientConfig` (an OpenAI-compatible endpoint; the
key read from the env var it names), the run's shared runtime (one client per endpoint, one in-flight limiter per
server, the response cache and the stats) and the structured chat request whose reply is parsed as a JSON object
of the schema (`LLMReplyError` when the endpoint answered with something else)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from clawgym.synth.llm_cache import InFlightLimiter, LLMStats, ResponseCache, request_key
from clawgym.synth.llm_prompts import bounded_schema

# ----------------------------------------------------------------------------------------------
# client config
# ----------------------------------------------------------------------------------------------


@dataclass
class ClientConfig:
    """The OpenAI-compatible endpoint the LLM route talks to (the key is read from env `api_key_env`)."""

    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.7
    max_tokens: int | None = 6000
    timeout_s: float = 120.0
    max_retries: int = 2  # transport-level retries done by the openai client (5xx, 429, timeouts)
    review_model: str | None = None  # reviewer/auditor model; defaults to `model`
    extra: dict[str, Any] = field(default_factory=dict)
    max_in_flight: int = 32  # chat requests overlapping at most
    # send bounded_schema(schema, max_tokens) instead of the gate's schema: for a small model / budget, a reply the
    # constrained decoder can always finish (the graph sets it for local model endpoints)
    bounded_schema: bool = False
    cache_dir: str | None = None  # content-addressed response cache (None: no cache)
    price_per_1k_tokens: float | None = None  # one price for prompt and completion tokens
    price_per_1k_prompt: float | None = None  # overrides price_per_1k_tokens for prompt tokens
    price_per_1k_completion: float | None = None  # overrides price_per_1k_tokens for completion tokens

    @classmethod
    def coerce(cls, cfg: ClientConfig | dict[str, Any] | None) -> ClientConfig:
        """A ClientConfig from a ClientConfig, a dict (unknown keys ignored) or None (defaults)."""
        if cfg is None:
            return cls()
        if isinstance(cfg, cls):
            return cfg
        if isinstance(cfg, dict):
            known = {k: v for k, v in cfg.items() if k in cls.__dataclass_fields__}
            return cls(**known)
        raise TypeError(f"client_cfg must be a ClientConfig or dict, got {type(cfg).__name__}")

    def make_client(self):
        """The openai client for this endpoint (its own retries: `max_retries`, exponential backoff)."""
        import openai

        from clawgym.keys import secret

        key = secret(self.api_key_env) or "EMPTY"  # local servers accept any key
        return openai.OpenAI(base_url=self.base_url, api_key=key, timeout=self.timeout_s,
                             max_retries=self.max_retries)


class LLMReplyError(RuntimeError):
    """The endpoint answered, but not with a JSON object matching the schema: the model's failure, rejected at
    the gate of the role that answered (generator: schema, reviewer: review, auditor: audit), never llm_error
    (which is for an endpoint that did not answer)."""

    GATE = {"task_spec": "schema", "task_review": "review", "task_audit": "audit"}

    def __init__(self, schema: str, problem: str):
        super().__init__(f"{schema}: {problem}")
        self.gate = self.GATE.get(schema, "schema")


class _Endpoint:
    """One role's endpoint: its client, config and the in-flight limiter of its server."""

    def __init__(self, client, cfg: ClientConfig, limiter: InFlightLimiter, model: str):
        self.client, self.cfg, self.limiter, self.model = client, cfg, limiter, model


class _Runtime:
    """What every chat call of one run shares: the endpoints of the generator / reviewer / auditor roles,
    the response cache and the stats. Endpoints on one server (base_url) share one in-flight limiter (the
    server's capacity); roles on different servers each have their own."""

    ROLES = ("generator", "reviewer", "auditor")

    def __init__(self, roles: dict[str, ClientConfig], cache: ResponseCache | None, limit: int | None = None):
        self.cache = cache
        self.stats = LLMStats()
        self.cfg = roles["generator"]
        limiters: dict[str, InFlightLimiter] = {}
        clients: dict[tuple, Any] = {}
        self.endpoints: dict[str, _Endpoint] = {}
        for role in self.ROLES:
            cfg = roles.get(role) or self.cfg
            lim_key = cfg.base_url or ""
            if lim_key not in limiters:
                limiters[lim_key] = InFlightLimiter(int(limit or cfg.max_in_flight or 1))
            ckey = (cfg.base_url, cfg.api_key_env, cfg.timeout_s, cfg.max_retries)
            if ckey not in clients:
                clients[ckey] = cfg.make_client()
            model = cfg.model if roles.get(role) is not None or role == "generator" else \
                (self.cfg.review_model or self.cfg.model)
            self.endpoints[role] = _Endpoint(clients[ckey], cfg, limiters[lim_key], model)
        self.limiters = list(limiters.values())

    @property
    def capacity(self) -> int:
        """Requests that may be in flight at once over all servers."""
        return sum(lim.limit for lim in self.limiters)

    @property
    def peak(self) -> int:
        """The most requests that overlapped on any one server."""
        return max((lim.peak for lim in self.limiters), default=0)

    def complete(self, role: str, kwargs: dict[str, Any], usage: dict[str, int] | None) -> str:
        """The reply text of one chat request of `role`: from the cache, or from the role's endpoint (then
        cached)."""
        ep = self.endpoints[role]
        key = request_key(kwargs)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                u = hit.get("usage") or {}
                pt, ct = int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)
                self.stats.add(cache_hits=1, cached_prompt_tokens=pt, cached_completion_tokens=ct)
                if usage is not None:
                    usage["prompt_tokens"] += pt
                    usage["completion_tokens"] += ct
                return str(hit.get("content") or "")
            self.stats.add(cache_misses=1)
        try:
            with ep.limiter:
                resp = ep.client.chat.completions.create(**kwargs)
        except Exception:
            self.stats.add(errors=1)
            raise
        u = getattr(resp, "usage", None)
        pt = int(getattr(u, "prompt_tokens", 0) or 0)
        ct = int(getattr(u, "completion_tokens", 0) or 0)
        self.stats.add(requests=1, prompt_tokens=pt, completion_tokens=ct)
        if usage is not None:
            usage["prompt_tokens"] += pt
            usage["completion_tokens"] += ct
            usage["requests"] += 1
        text = (resp.choices[0].message.content or "") if resp.choices else ""
        if self.cache is not None:  # every answered request, parsable or not: a re-run reproduces its verdict
            self.cache.put(key, {"model": kwargs.get("model"), "content": text,
                                 "usage": {"prompt_tokens": pt, "completion_tokens": ct},
                                 "id": getattr(resp, "id", None)})
        return text


def _parse_json_obj(text: str) -> dict[str, Any] | None:
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", (text or "").strip())  # tolerate fenced replies
    try:
        data = json.loads(text)
    except Exception:
        return None
    return data if isinstance(data, dict) else None


def _chat_json(rt: _Runtime, role: str, system: str, user: str, schema: dict[str, Any], name: str,
               usage: dict[str, int] | None = None) -> dict[str, Any]:
    ep = rt.endpoints[role]
    cfg = ep.cfg
    kwargs: dict[str, Any] = dict(
        model=ep.model,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        temperature=cfg.temperature,
        response_format={"type": "json_schema", "json_schema": {
            "name": name, "strict": True,
            "schema": bounded_schema(schema, cfg.max_tokens, name) if cfg.bounded_schema and cfg.max_tokens
            else schema}},
    )
    if cfg.max_tokens:
        kwargs["max_tokens"] = cfg.max_tokens
    kwargs.update(cfg.extra)
    text = rt.complete(role, kwargs, usage)
    data = _parse_json_obj(text)
    if data is None:
        raise LLMReplyError(name, f"reply is not a JSON object: {text.strip()[:200]!r}")
    missing = [k for k in schema.get("required", []) if k not in data]
    if missing:
        raise LLMReplyError(name, f"reply lacks {missing}")
    return data


__all__ = ["ClientConfig", "LLMReplyError"]
