"""Policies: who answers the agent's chat-completion requests.

kinds:
- ``openai``: any OpenAI-compatible endpoint (vLLM, SGLang, OpenAI, transformers serve …);
- ``local``: a checkpoint folder served by ``transformers serve`` through clawgym.train.serve.ModelServer
  (started, health-checked and stopped around the work);
- ``oracle`` / ``noop``: served by clawgym's own local OpenAI-compatible server, so every policy goes
  through the same client code (and the real OpenClaw can use them too).

Registry: the built-ins ``oracle`` and ``noop`` plus ``CLAWGYM_ENDPOINTS`` (a JSON list of PolicySpec
fields, or a {name: spec} object). API keys are only ever named by env var (``api_key_env``).

:class:`ChatClient` wraps the openai client: 429, 5xx, connection errors and timeouts are retried with
exponential backoff and, when retries run out, raised as :class:`InfraError` (never the agent's fault).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator, Literal

from clawgym.agent.secrets import redact

PolicyKind = Literal["openai", "oracle", "noop", "local"]


class InfraError(RuntimeError):
    """The endpoint or sandbox failed (not the agent): the rollout is classed `infra`, never scored 0."""


class AgentRequestError(RuntimeError):
    """The endpoint refused the request as invalid (4xx other than 429): classed `agent_error`."""


@dataclass
class PolicySpec:
    name: str
    kind: PolicyKind = "openai"
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    temperature: float = 0.0
    max_tokens: int = 2048  # per completion
    extra: dict[str, Any] = field(default_factory=dict)  # extra request-body fields; for local: ModelServer kwargs

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Endpoint:
    """A live OpenAI-compatible endpoint for one policy."""

    base_url: str
    model: str
    api_key_env: str | None = None
    policy: str = ""
    kind: str = "openai"
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def api_key(self) -> str:
        return (os.environ.get(self.api_key_env, "") if self.api_key_env else "") or "clawgym-no-key"


BUILTIN_POLICIES: dict[str, PolicySpec] = {
    "oracle": PolicySpec(name="oracle", kind="oracle", model="oracle"),
    "noop": PolicySpec(name="noop", kind="noop", model="noop"),
}


def policy_registry(env: str | None = None) -> dict[str, PolicySpec]:
    """Built-ins plus the JSON in $CLAWGYM_ENDPOINTS (list of specs or {name: spec})."""
    reg = dict(BUILTIN_POLICIES)
    raw = env if env is not None else os.environ.get("CLAWGYM_ENDPOINTS", "")
    if raw.strip():
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"CLAWGYM_ENDPOINTS: not valid JSON: {e}") from None
        items = data.items() if isinstance(data, dict) else [(d.get("name"), d) for d in data]
        for name, d in items:
            if not isinstance(d, dict) or not name:
                raise ValueError(f'CLAWGYM_ENDPOINTS: "name" missing or entry not an object: {d!r}')
            d = {**d, "name": name}
            if "api_key" in d:
                raise ValueError(f'CLAWGYM_ENDPOINTS[{name}]: "api_key" is not allowed; use "api_key_env"')
            try:
                reg[name] = PolicySpec(**d)
            except TypeError as e:
                raise ValueError(f"CLAWGYM_ENDPOINTS[{name}]: {e}") from None
    return reg


def get_policy(policy: str | PolicySpec) -> PolicySpec:
    if isinstance(policy, PolicySpec):
        return policy
    reg = policy_registry()
    if policy not in reg:
        raise KeyError(f"unknown policy {policy!r}; known: {sorted(reg)} (add endpoints via CLAWGYM_ENDPOINTS)")
    return reg[policy]


@contextlib.contextmanager
def open_endpoint(spec: PolicySpec, tasks=()) -> Iterator[Endpoint]:
    """A live endpoint for `spec` for the duration of the block. oracle/noop use the process-wide
    policy server (tasks are registered with it); local starts and stops a ModelServer."""
    if spec.kind in ("oracle", "noop"):
        from clawgym.agent.servers import shared_policy_server

        srv = shared_policy_server()
        for t in tasks:
            srv.register(t)
        yield Endpoint(base_url=srv.base_url, model=spec.model or spec.kind, policy=spec.name, kind=spec.kind)
    elif spec.kind == "openai":
        if not spec.base_url:
            raise ValueError(f"policy {spec.name}: base_url is required for kind=openai")
        yield Endpoint(base_url=spec.base_url.rstrip("/"), model=spec.model or "default",
                       api_key_env=spec.api_key_env, policy=spec.name, kind=spec.kind)
    elif spec.kind == "local":
        from clawgym.train.serve import ModelServer  # owned by the train engineer

        path = spec.extra.get("model_path") or spec.model
        kwargs = {k: v for k, v in spec.extra.items() if k != "model_path"}
        server = ModelServer(path, **kwargs)
        try:
            base_url = server.start()
            base_url = base_url if isinstance(base_url, str) else server.base_url
            yield Endpoint(base_url=base_url.rstrip("/"), model=getattr(server, "model_name", None) or path,
                           policy=spec.name, kind=spec.kind)
        finally:
            server.stop()
    else:
        raise ValueError(f"policy {spec.name}: unknown kind {spec.kind!r}")


# ---- the chat client with retries ------------------------------------------------------------------
@dataclass
class RetryPolicy:
    attempts: int = 4  # tries per request
    backoff_s: float = 1.0
    max_backoff_s: float = 20.0
    timeout_s: float = 300.0

    @classmethod
    def for_kind(cls, kind: str | None) -> "RetryPolicy":
        """A local model server on a starved CPU can take many minutes per request: re-sending it only makes
        the server compute abandoned copies, so local endpoints wait long and retry once."""
        return cls(attempts=2, timeout_s=3600.0) if kind == "local" else cls()


_CLIENTS: dict[tuple, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _shared_client(base_url: str, api_key: str | None, timeout: float, headers: dict[str, str] | None) -> Any:
    """One `openai.OpenAI` per (endpoint, key, timeout, headers) for the whole process: building a client
    loads the system CA bundle into a new SSL context (~45 ms here), which dominated short rollouts.
    The client (an httpx connection pool) is thread-safe. The key stays in memory only (never logged)."""
    import openai

    key = (base_url, hashlib.sha256((api_key or "").encode()).hexdigest(), float(timeout),
           tuple(sorted((headers or {}).items())))
    with _CLIENTS_LOCK:
        c = _CLIENTS.get(key)
        if c is None:
            c = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout,
                              default_headers=headers or None)
            _CLIENTS[key] = c
        return c


class ChatClient:
    def __init__(self, endpoint: Endpoint, retry: RetryPolicy | None = None):
        import openai

        self.endpoint = endpoint
        self.retry = retry or RetryPolicy.for_kind(getattr(endpoint, "kind", None))
        self._openai = openai
        self.client = _shared_client(endpoint.base_url, endpoint.api_key, self.retry.timeout_s, endpoint.headers)
        self.retries = 0  # retried requests, for the record

    def complete(self, **kwargs) -> Any:
        oa = self._openai
        last: Exception | None = None
        for i in range(self.retry.attempts):
            try:
                return self.client.chat.completions.create(model=self.endpoint.model, **kwargs)
            except (oa.RateLimitError, oa.InternalServerError, oa.APIConnectionError, oa.APITimeoutError) as e:
                last = e
            except oa.APIStatusError as e:
                if e.status_code >= 500 or e.status_code in (408, 409, 429):
                    last = e
                else:
                    raise AgentRequestError(redact(f"endpoint refused the request ({e.status_code}): {e}",
                                                   [self.endpoint.api_key_env or ""])) from None
            if i + 1 < self.retry.attempts:
                self.retries += 1
                delay = min(self.retry.max_backoff_s, self.retry.backoff_s * 2 ** i) * (0.5 + random.random() / 2)
                time.sleep(delay)
        raise InfraError(redact(f"endpoint failed after {self.retry.attempts} tries: "
                                f"{type(last).__name__}: {last}", [self.endpoint.api_key_env or ""]))


__all__ = ["PolicySpec", "Endpoint", "PolicyKind", "BUILTIN_POLICIES", "policy_registry", "get_policy",
           "open_endpoint", "ChatClient", "RetryPolicy", "InfraError", "AgentRequestError"]
