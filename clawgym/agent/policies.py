"""Policies: who answers the agent's chat-completion requests.

kinds:
- ``openai``: any OpenAI-compatible endpoint (vLLM, SGLang, OpenAI, transformers serve …);
- ``local``: a checkpoint folder served by the engine (vLLM) through clawgym.serve.ModelServer
  (started, health-checked and stopped around the work);
- ``oracle`` / ``noop``: served by clawgym's own local OpenAI-compatible server, so every policy goes
  through the same client code (and the real OpenClaw can use them too).

Registry: the built-ins ``oracle`` and ``noop`` plus ``CLAWGYM_ENDPOINTS`` (a JSON list of PolicySpec
fields, or a {name: spec} object). API keys are only ever named by env var (``api_key_env``).

How :class:`ChatClient` classes a failed request. Scores must be trustworthy: the model's own failures are
scored (normally 0); only failures of our machinery (the endpoint, the sandbox, the harness) are ``infra``,
which is excluded from means and retried at rollout level. The class is decided by *what* failed (the
transport, the HTTP status, which request of the rollout it was, which budget ran out), never by matching
error text.

==========================================================  ============  =======================================
what happened                                               retried here  raised as → failure class
==========================================================  ============  =======================================
connection refused / reset, DNS, TLS (APIConnectionError)   yes           InfraError → ``infra``
timeout at the client's own ``timeout_s``                    yes           InfraError → ``infra``
HTTP 5xx, 408, 409, 429 (overload, rate limit)               yes           InfraError → ``infra`` when tries run out
HTTP 2xx whose body is not a chat completion (not JSON, no   yes           InfraError → ``infra``
``choices``)
HTTP 401, 403, 404 and any other 4xx not below               no            InfraError → ``infra`` (key, model name,
                                                                          URL or harness wrong: not the model)
HTTP 400/413/422 on the rollout's FIRST request              no            InfraError → ``infra``: that request
                                                                          holds only our system prompt, the task
                                                                          and the tool schemas; nothing the model
                                                                          wrote
HTTP 400/413/422 on a LATER request, or any refusal whose    no            AgentRequestError(failure_class=
structured error ``code`` is ``context_length_exceeded``                  "limit"): since the accepted first
(OpenAI's) or whose message names the model's "maximum                    request only the transcript the model
context length" (vLLM's)                                                  grew (its own outputs, bounded tool
                                                                          results) changed, i.e. its context
                                                                          outgrew the endpoint
the rollout's wall budget (``deadline``) ran out while       no            AgentRequestError(failure_class=
waiting for the model (the request's timeout was cut to                   "limit")
the remaining budget), or was already spent
==========================================================  ============  =======================================

Retries never sleep past the deadline; when the budget cuts retries of an infra-type failure short, the
failure stays ``infra``. Malformed *content* of a well-formed response (a tool call without ``function``,
arguments that are not JSON …) is the model's and is handled by the loop (clawgym.agent.loop), not here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

from clawgym.agent.secrets import redact

PolicyKind = Literal["openai", "oracle", "noop", "local"]


class InfraError(RuntimeError):
    """The endpoint or sandbox failed (not the agent): the rollout is classed `infra`, never scored 0."""


class AgentRequestError(RuntimeError):
    """The model's request could not be served for a reason of the model's own making (see the module
    docstring): its grown context was refused, or the rollout's wall budget ran out while it generated.
    ``failure_class`` is the rollout's class (``limit`` or ``agent_error``)."""

    def __init__(self, message: str, failure_class: str = "agent_error", status: int | None = None):
        super().__init__(message)
        self.failure_class = failure_class
        self.status = status


@dataclass
class PolicySpec:
    """A named policy as configured: its kind, where its endpoint is and the sampling settings."""

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


OWN_SERVER_KINDS = ("oracle", "noop", "local")  # endpoints served by clawgym's own local servers
SERVER_TOKEN_ENV = "CLAWGYM_SERVER_TOKEN"  # = clawgym.agent.servers.TOKEN_ENV (that module imports FastAPI)


@dataclass
class Endpoint:
    """A live OpenAI-compatible endpoint for one policy."""

    base_url: str
    model: str
    api_key_env: str | None = None
    policy: str = ""
    kind: str = "openai"
    headers: dict[str, str] = field(default_factory=dict)
    token_ids: bool = False  # ask for the sampled token ids / log-probabilities (vLLM's `return_token_ids`)
    # the model's tokenizer (a folder), where it is known here: a re-sent history is then sent as the ids the model
    # sampled (clawgym.agent.tito; vLLM's kv_transfer_params.prompt_token_ids)
    tokenizer: str | None = None

    # clawgym's own local servers (policy server, embedded model server) answer only bearers of their
    # per-process token: such an endpoint's key is always that env var, even when a caller clears api_key_env
    def __post_init__(self) -> None:
        self.api_key_env = self.api_key_env

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "api_key_env" and not value and self.__dict__.get("kind") in OWN_SERVER_KINDS:
            value = SERVER_TOKEN_ENV
        object.__setattr__(self, name, value)

    @property
    def api_key(self) -> str:
        from clawgym.keys import secret

        return secret(self.api_key_env) or "clawgym-no-key"


BUILTIN_POLICIES: dict[str, PolicySpec] = {
    "oracle": PolicySpec(name="oracle", kind="oracle", model="oracle"),
    "noop": PolicySpec(name="noop", kind="noop", model="noop"),
    # the program teacher: replays Task.program_reference (recorded by synthesis), else the reference
    "program": PolicySpec(name="program", kind="oracle", model="program"),
}


def policy_registry(endpoints_json: str | None = None) -> dict[str, PolicySpec]:
    """Built-ins plus the endpoints JSON (list of specs or {name: spec}) — the value of $CLAWGYM_ENDPOINTS,
    which the ModelEndpointsResource and the entry points read and pass here."""
    reg = dict(BUILTIN_POLICIES)
    raw = endpoints_json or ""
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


def get_policy(policy: str | PolicySpec, endpoints_json: str | None = None) -> PolicySpec:
    """The PolicySpec named `policy` in the registry (a PolicySpec is returned as is); KeyError if unknown."""
    if isinstance(policy, PolicySpec):
        return policy
    reg = policy_registry(endpoints_json)
    if policy not in reg:
        raise KeyError(f"unknown policy {policy!r}; known: {sorted(reg)} (add endpoints via CLAWGYM_ENDPOINTS)")
    return reg[policy]


def engine_args(spec: PolicySpec) -> tuple[str, dict[str, Any]]:
    """A kind "local" spec's engine: the model folder and the clawgym.serve.ModelServer settings (its extra fields
    less those the endpoint itself reads)."""
    path = cast(str, spec.extra.get("model_path") or spec.model)  # a local spec names its model folder
    return path, {k: v for k, v in spec.extra.items() if k not in ("model_path", "return_token_ids", "tokenizer")}


def warm_engine(spec: PolicySpec):
    """Start a kind "local" spec's engine now, in the background (clawgym.serve.engines.warm): an open_endpoint of
    the spec joins it instead of starting its own. `.release()` drops the warm hold."""
    from clawgym.serve import engines

    if spec.kind != "local":
        raise ValueError(f"policy {spec.name}: only kind 'local' has an engine to warm (got {spec.kind!r})")
    path, kwargs = engine_args(spec)
    return engines.warm(path, **kwargs)


@contextlib.contextmanager
def open_endpoint(spec: PolicySpec, tasks=()) -> Iterator[Endpoint]:
    """A live endpoint for `spec` for the duration of the block. oracle/noop use the process-wide
    policy server (tasks are registered with it); local holds the model's engine (clawgym.serve.engines: started
    for the block, or joined where one runs in this process)."""
    if spec.kind in ("oracle", "noop"):
        from clawgym.agent.servers import TOKEN_ENV, shared_policy_server

        srv = shared_policy_server()
        for t in tasks:
            srv.register(t)
        # the server's per-process token, by its env var name (the chat client and the recording proxy send it)
        yield Endpoint(base_url=srv.base_url, model=spec.model or spec.kind, policy=spec.name, kind=spec.kind,
                       api_key_env=TOKEN_ENV)
    elif spec.kind == "openai":
        if not spec.base_url:
            raise ValueError(f"policy {spec.name}: base_url is required for kind=openai")
        yield Endpoint(base_url=spec.base_url.rstrip("/"), model=spec.model or "default",
                       api_key_env=spec.api_key_env, policy=spec.name, kind=spec.kind,
                       token_ids=bool(spec.extra.get("return_token_ids")), tokenizer=spec.extra.get("tokenizer"))
    elif spec.kind == "local":
        from clawgym.agent.servers import TOKEN_ENV
        from clawgym.serve import engines

        path, kwargs = engine_args(spec)
        # the engine of this model in this process: started here, or joined when one runs (engines.warm / hold)
        with engines.hold(path, **kwargs) as server:
            yield Endpoint(base_url=server.base_url.rstrip("/"), model=getattr(server, "model_name", None) or path,
                           policy=spec.name, kind=spec.kind, api_key_env=TOKEN_ENV,  # its per-process token
                           token_ids=bool(spec.extra.get("return_token_ids", getattr(server, "token_ids", False))),
                           tokenizer=spec.extra.get("tokenizer") or getattr(server, "model_dir", None) or path)
    else:
        raise ValueError(f"policy {spec.name}: unknown kind {spec.kind!r}")


def over_context_window(code: Any, message: str) -> bool:
    """Whether an endpoint's refusal says the request is over the model's context window: OpenAI's structured
    code ``context_length_exceeded``, or vLLM's message ("This model's maximum context length is N tokens. However,
    your prompt contains at least M input tokens ...", code 400)."""
    return code == "context_length_exceeded" or "maximum context length" in (message or "")


# ---- the chat client with retries ------------------------------------------------------------------
@dataclass
class RetryPolicy:
    """How the chat client retries a request: tries, exponential backoff bounds and the per-request timeout."""

    attempts: int = 4  # tries per request
    backoff_s: float = 1.0
    max_backoff_s: float = 20.0
    timeout_s: float = 300.0

    @classmethod
    def for_kind(cls, kind: str | None) -> RetryPolicy:
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
    """Chat completions with retries and failure classing (module docstring). One per rollout: it counts the
    requests the endpoint accepted, which tells a refused first request (ours) from a later one (the model's)."""

    REFUSED_BY_CONTEXT = (400, 413, 422)

    def __init__(self, endpoint: Endpoint, retry: RetryPolicy | None = None):
        import openai

        self.endpoint = endpoint
        self.retry = retry or RetryPolicy.for_kind(getattr(endpoint, "kind", None))
        self._openai = openai
        self.client = _shared_client(endpoint.base_url, endpoint.api_key, self.retry.timeout_s, endpoint.headers)
        self.retries = 0  # retried requests, for the record
        self.accepted = 0  # requests answered with a chat completion

    def _redact(self, text: str) -> str:
        return redact(text, [self.endpoint.api_key_env or ""])

    def complete(self, deadline: float | None = None, max_response_bytes: int | None = None, **kwargs) -> dict:
        """One chat completion as the endpoint's JSON (a dict with a non-empty ``choices`` list).

        `deadline` (time.monotonic()) bounds the whole call: each request's timeout is cut to the time left,
        and a request cut that way, or a call made after it, raises AgentRequestError(failure_class="limit").
        `max_response_bytes`: the body is read in pieces and never past this size; a bigger reply (the model's
        output: an endpoint that ignored ``max_tokens``) raises AgentRequestError(failure_class="limit")."""
        import httpx

        oa = self._openai
        last: str = ""
        tries = 0
        for i in range(max(1, self.retry.attempts)):
            tries = i + 1
            timeout, capped = self.retry.timeout_s, False
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AgentRequestError("wall-time budget spent before the model answered", "limit")
                if left < timeout:
                    timeout, capped = left, True
            try:
                with self.client.chat.completions.with_streaming_response.create(
                        model=self.endpoint.model, timeout=timeout, **kwargs) as raw:
                    body = _read_bounded(raw.http_response, max_response_bytes, deadline)
                    status = raw.http_response.status_code
                try:
                    data = json.loads(body)
                except ValueError:
                    data = None
                if isinstance(data, dict) and isinstance(data.get("choices"), list) and data["choices"]:
                    self.accepted += 1
                    return data
                del data
                last = f"HTTP {status} without a chat completion: {body[:300].decode(errors='replace')!r}"
            except (oa.APITimeoutError, httpx.TimeoutException) as e:
                if capped:
                    raise AgentRequestError(f"wall-time budget ran out while waiting for the model "
                                            f"({timeout:.1f} s left for the request)", "limit") from None
                last = f"{type(e).__name__}: {e}"
            except (oa.APIConnectionError, httpx.TransportError) as e:  # httpx's: raised while reading the body
                last = f"{type(e).__name__}: {e}"
            except oa.APIStatusError as e:
                st = e.status_code
                if st >= 500 or st in (408, 409, 429):
                    last = f"{type(e).__name__} ({st}): {e}"
                elif over_context_window(getattr(e, "code", None), str(e)) or (
                        st in self.REFUSED_BY_CONTEXT and self.accepted > 0):
                    raise AgentRequestError(self._redact(
                        f"endpoint refused the transcript after {self.accepted} accepted requests "
                        f"({st}, context too long for the endpoint): {e}"), "limit", st) from None
                else:
                    what = ("the rollout's first request (only our prompt, task and tool schemas)"
                            if st in self.REFUSED_BY_CONTEXT else "the request")
                    raise InfraError(self._redact(f"endpoint refused {what} ({st}): {e}")) from None
            if i + 1 < self.retry.attempts:
                delay = min(self.retry.max_backoff_s, self.retry.backoff_s * 2 ** i) * (0.5 + random.random() / 2)
                if deadline is not None and time.monotonic() + delay >= deadline:
                    break  # no time left to retry: the failure stays the endpoint's
                self.retries += 1
                time.sleep(delay)
        raise InfraError(self._redact(f"endpoint failed after {tries} tries: {last}"))


def _read_bounded(resp: Any, max_bytes: int | None, deadline: float | None) -> bytes:
    """The body of a streamed httpx response, read in pieces: AgentRequestError("limit") past `max_bytes`
    (nothing more is read) or past `deadline`."""
    parts: list[bytes] = []
    n = 0
    for part in resp.iter_bytes():
        n += len(part)
        if max_bytes is not None and n > max_bytes:
            raise AgentRequestError(f"reply size limit: the model's reply exceeded max_response_bytes "
                                    f"({max_bytes} bytes); not read further", "limit")
        if deadline is not None and time.monotonic() >= deadline:
            raise AgentRequestError("wall-time budget ran out while reading the model's reply", "limit")
        parts.append(part)
    return b"".join(parts)


__all__ = ["PolicySpec", "Endpoint", "PolicyKind", "BUILTIN_POLICIES", "policy_registry", "get_policy",
           "open_endpoint", "engine_args", "warm_engine", "ChatClient", "RetryPolicy", "InfraError",
           "AgentRequestError"]
