"""The recording proxy: an OpenAI-compatible HTTP server in front of any policy endpoint.

Every chat-completions request/response pair is appended to a JSONL log with its session id
(from the URL ``/s/<session>/v1/...``, else the ``X-Clawgym-Session`` header, else "default").
Streaming (SSE) responses are passed through chunk by chunk and re-assembled for the log.
The upstream API key is given by the caller (``api_key``) and added to forwarded requests; it, the values of
``api_key_env`` and every other secret environment variable are redacted from the log.

Hostile clients (the OpenClaw runtime runs one proxy per rollout; the agent under test can reach it):

* ``client_token``: requests must carry ``Authorization: Bearer <token>`` (401 otherwise).
* ``strict_sessions``: only sessions registered with :meth:`RecordingProxy.register_session` are served; any
  other session id (another rollout's, a fresh one, "default") gets a 403. A refused request is never
  forwarded upstream (so the API key is never attached to it) and never enters a trajectory: the log gets a
  ``{"kind": "refused", ...}`` line without the request body.
* limits (``max_requests``, ``max_total_tokens``, ``max_wall_s``) count every request the proxy answers,
  whatever its path or session id; past them the proxy answers a final text itself (logged with "limit").
* bounded records (the size caps of clawgym.agent.loop.Limits): a request body over ``max_record_bytes`` is
  not read further (413, logged with "limit"); an upstream body is read up to ``max_response_bytes``; a
  reply with more than ``max_tool_calls_per_turn`` calls, text over ``max_message_chars`` or arguments over
  ``max_argument_chars`` is logged cut to the caps (loop's ``clawgym_truncated``) with "limit" and, when not
  streamed, replaced by the proxy's own final text. A stream is cut where it breaks a cap (what was relayed
  before stays relayed) and is re-assembled incrementally, so memory stays bounded whatever the chunking.
  After any of these the proxy answers every later request with its final text (logged with "limit").
* ``uds``: the unix socket is served through :class:`clawgym.agent.proxy_gate.PeerGate`, which pins the
  mount+network namespaces of the first process that connects (the rollout's in-sandbox forwarder,
  clawgym.agent.proxy_forwarder) and refuses connections from any other namespace, i.e. from any other
  sandbox.

A hostile upstream (the policy endpoint is any server): its JSON is any shape (what is not a chunk / a message of
the expected types is relayed but merged into nothing, never an exception: a model's garbage never reads as a
broken stream, i.e. infra), its usage counts only as non-negative numbers (no refund of the token budget), only
choice 0 is the reply, and its sampled token ids are claims checked where the SFT row is built
(clawgym.trajectories.sft.token_exact_row).

The trajectory is rebuilt from the log by :func:`clawgym.agent.proxy_log.rebuild_sessions` (the rule is in
that module's docstring: only the chain of turns the proxy actually answered, never a client's claims about
the past). Every public name of proxy_gate and proxy_log is importable from here as well.

No ``from __future__ import annotations`` here: FastAPI reads the endpoint annotations.
"""

import asyncio
import hmac
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from clawgym.agent.loop import TRUNCATED_KEY, Limits, _bound_reply, _cut_reason
from clawgym.agent.proxy_gate import PeerGate
from clawgym.agent.proxy_log import (
    HEARTBEAT_MARKERS,
    INTERNAL_MARKERS,
    _usage_tokens,
    canonical,
    clean_messages,
    read_log,
    rebuild_sessions,
)
from clawgym.agent.secrets import redact
from clawgym.agent.servers import AppServer, completion_json, sse_chunks
from clawgym.agent.tito import KV_FIELD

HOP_HEADERS = {"host", "content-length", "connection", "transfer-encoding", "authorization", "accept-encoding",
               "keep-alive", "te", "upgrade"}


OTHER_CHOICES = "clawgym_other_choices"  # on a merged stream that also carried a choice of index != 0


def _obj(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list:
    return v if isinstance(v, list) else []


def merge_stream(chunks: list[dict]) -> dict:
    """Re-assemble a chat.completion from chat.completion.chunk objects: with the sampled tokens where the
    upstream streamed them (vLLM's fields: ``prompt_token_ids`` on a chunk, ``token_ids`` and
    ``logprobs.content`` on the choices), laid out as in a non-streamed response, so a streamed turn is recorded
    as token-exactly as a non-streamed one. Only upstream chunks are merged: nothing a client sends gets here.

    Only the choice of index 0 is the reply (a choice without an index counts as 0): another choice's text, tool
    calls and tokens are never merged into it, and a stream that carried one keeps no tokens at all (which
    choice a client took is not known: the recorded ids could be another reply's); ``other_choices`` marks it."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict] = {}
    finish = None
    usage = None
    model = rid = None
    prompt_ids = None
    token_ids: list = []
    lp_content: list = []
    other = False  # a choice of another index was streamed
    for c in chunks:
        other = other or bool(c.get(OTHER_CHOICES))
        rid = rid or c.get("id")
        model = model or c.get("model")
        if c.get("usage"):
            usage = c["usage"]
        if prompt_ids is None and isinstance(c.get("prompt_token_ids"), list):
            prompt_ids = c["prompt_token_ids"]  # vLLM / the embedded server: on the first chunk
        for ch in _list(c.get("choices")):
            if not isinstance(ch, dict):
                continue
            if ch.get("index", 0) != 0:
                other = True
                continue
            if isinstance(ch.get("token_ids"), list):  # the ids sampled since the previous chunk
                token_ids.extend(ch["token_ids"])
            lp = ch.get("logprobs")
            if isinstance(lp, dict) and isinstance(lp.get("content"), list):
                lp_content.extend(lp["content"])
            d = _obj(ch.get("delta"))  # the upstream's JSON is any shape: what is not text is not merged
            if isinstance(d.get("content"), str):
                content.append(d["content"])
            if isinstance(d.get("reasoning_content"), str):
                reasoning.append(d["reasoning_content"])
            for tc in _list(d.get("tool_calls")):
                if not isinstance(tc, dict):
                    continue
                i = tc.get("index", len(calls))
                slot = calls.setdefault(i if isinstance(i, int) else len(calls),
                                        {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = _obj(tc.get("function"))
                if isinstance(fn.get("name"), str):
                    slot["function"]["name"] += fn["name"]
                if isinstance(fn.get("arguments"), str):
                    slot["function"]["arguments"] += fn["arguments"]
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if reasoning:
        msg["reasoning_content"] = "".join(reasoning)
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    out: dict[str, Any] = {"id": rid, "object": "chat.completion", "model": model,
                           "choices": [{"index": 0, "message": msg, "finish_reason": finish}], "usage": usage}
    if other:
        out[OTHER_CHOICES] = True
        return out
    if prompt_ids is not None:
        out["prompt_token_ids"] = prompt_ids
    if token_ids:
        out["choices"][0]["token_ids"] = token_ids
    if lp_content:
        out["choices"][0]["logprobs"] = {"content": lp_content}
    return out


def _as_chunk(completion: dict) -> dict:
    """A merged chat.completion (:func:`merge_stream`) as one chunk, so a stream can be merged as it goes."""
    msg = completion["choices"][0]["message"]
    delta: dict[str, Any] = {"content": msg.get("content")}
    if msg.get("reasoning_content"):
        delta["reasoning_content"] = msg["reasoning_content"]
    if msg.get("tool_calls"):
        delta["tool_calls"] = [{**tc, "index": i} for i, tc in enumerate(msg["tool_calls"])]
    chunk: dict[str, Any] = {"id": completion.get("id"), "model": completion.get("model"),
                             "usage": completion.get("usage"),
                             "choices": [{"index": 0, "delta": delta,
                                          "finish_reason": completion["choices"][0]["finish_reason"]}]}
    for k in ("token_ids", "logprobs"):  # the sampled tokens so far travel with the merged text
        if k in completion["choices"][0]:
            chunk["choices"][0][k] = completion["choices"][0][k]
    if "prompt_token_ids" in completion:
        chunk["prompt_token_ids"] = completion["prompt_token_ids"]
    if completion.get(OTHER_CHOICES):
        chunk[OTHER_CHOICES] = True
    return chunk


def _reply_cut(response: dict, bounds: Limits | None) -> tuple | None:
    """(the response with its message cut to the caps, why) when its first choice's message breaks a size cap
    of `bounds`, else None."""
    if bounds is None:
        return None
    choices: Any = response.get("choices")
    msg = choices[0].get("message") if isinstance(choices, list) and choices and isinstance(choices[0], dict) \
        else None
    if not isinstance(msg, dict):
        return None
    cut_msg, cut = _bound_reply(msg, bounds)
    if not cut:
        return None
    cut_msg[TRUNCATED_KEY] = cut
    why = _cut_reason(cut, bounds, bool(cut_msg.get("tool_calls")))
    return {**response, "choices": [{**choices[0], "message": cut_msg}]}, why


class _StreamCaps:
    """The size caps applied to a stream as its chunks arrive: text chars, tool-call count, argument chars."""

    def __init__(self, bounds: Limits):
        self.b = bounds
        self.text = 0
        self.args: dict = {}

    def over(self, chunk: dict) -> str | None:
        b = self.b
        for ch in _list(chunk.get("choices")):
            d = _obj(ch.get("delta")) if isinstance(ch, dict) else {}
            for k in ("content", "reasoning_content"):
                if isinstance(d.get(k), str):
                    self.text += len(d[k])
            if self.text > b.max_message_chars:
                return f"reply size limit: more than {b.max_message_chars} characters of text " \
                       f"(max_message_chars={b.max_message_chars}); stream cut"
            for tc in _list(d.get("tool_calls")):
                if not isinstance(tc, dict):
                    continue
                i = tc.get("index", len(self.args))
                i = i if isinstance(i, int) else len(self.args)
                fn: Any = tc.get("function") if isinstance(tc.get("function"), dict) else {}
                grown = len(str(fn.get("arguments") or "")) + len(str(fn.get("name") or ""))
                self.args[i] = self.args.get(i, 0) + grown
                if len(self.args) > b.max_tool_calls_per_turn:
                    return f"reply size limit: more than {b.max_tool_calls_per_turn} tool calls in one reply " \
                           f"(max_tool_calls_per_turn={b.max_tool_calls_per_turn}); stream cut"
                if self.args[i] > b.max_argument_chars:
                    return f"reply size limit: tool call arguments over {b.max_argument_chars} characters " \
                           f"(max_argument_chars={b.max_argument_chars}); stream cut"
        return None


# the request fields a chat completion may carry upstream: OpenAI's own (and the token-id fields the proxy sets)
REQUEST_FIELDS = frozenset({
    "model", "messages", "tools", "tool_choice", "parallel_tool_calls", "temperature", "top_p", "max_tokens",
    "max_completion_tokens", "stream", "stream_options", "stop", "seed", "n", "user", "frequency_penalty",
    "presence_penalty", "return_token_ids", "logprobs", "top_logprobs"})
MESSAGE_FIELDS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})
TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


def request_fields(body: dict) -> list[str]:
    """Keep in `body` only what the record and the rebuild read (REQUEST_FIELDS; each message's MESSAGE_FIELDS;
    of a content list, its text parts), in place; returns what was dropped ("field", "messages[i].key",
    "messages[i].content[j]:type"), sorted."""
    dropped = [k for k in body if k not in REQUEST_FIELDS]
    for k in dropped:
        body.pop(k)
    msgs = body.get("messages")
    if isinstance(msgs, list):
        for i, m in enumerate(msgs):
            if not isinstance(m, dict):
                continue
            for k in [k for k in m if k not in MESSAGE_FIELDS]:
                m.pop(k)
                dropped.append(f"messages[{i}].{k}")
            parts = m.get("content")
            if isinstance(parts, list):
                keep = []
                for j, part in enumerate(parts):
                    if isinstance(part, dict) and part.get("type") in TEXT_PARTS and isinstance(part.get("text"), str):
                        keep.append({"type": "text", "text": part["text"]})
                    else:
                        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                        dropped.append(f"messages[{i}].content[{j}]:{str(kind)[:40]}")
                m["content"] = keep
    return sorted(dropped)


class RecordingProxy(AppServer):
    """Forward /v1/chat/completions (and /v1/models) to `upstream` and log each pair.

    sessions: optional {session_id: {"task_id": ..., "policy": ...}} sent upstream as
    X-Clawgym-Task / X-Clawgym-Policy headers (the oracle server uses them); `model` replaces the
    request's model name when set (OpenClaw asks for its own provider-local id).
    client_token / strict_sessions / limits / uds: see the module docstring (one proxy per rollout: the
    limits count every answered request of the proxy, whatever its session). bounds: the size caps of a
    clawgym.agent.loop.Limits (max_tool_calls_per_turn, max_message_chars, max_argument_chars,
    max_response_bytes, max_record_bytes) applied to what is recorded; None: unbounded.
    token_ids: ask the upstream for the sampled tokens of every chat request (``return_token_ids`` and
    ``logprobs``, vLLM's / the embedded server's fields, streamed or not), so the recorded turns are token-exact
    (`merge_stream`, proxy_log's rebuild: ``clawgym_tokens`` on each assistant turn). tokenizer: with token_ids,
    the upstream model's tokenizer (a folder): a session's re-sent history then goes upstream as the ids the model
    sampled (clawgym.agent.tito, vLLM's ``kv_transfer_params.prompt_token_ids``). Whatever the client sends in
    that field is dropped: what the engine reads is the recorded messages, tokenized by the proxy or the engine.
    api_key: the upstream's key, sent as the bearer of every forwarded request (None: a placeholder); the proxy is
    the only place it is attached, so the sandbox never holds it. api_key_env: the variable it came from, whose
    value is redacted from the log with the key itself."""

    def __init__(self, upstream: str, log_path: str, api_key_env: str | None = None,
                 model: str | None = None, timeout_s: float = 600.0, uds: str | None = None,
                 max_requests: int | None = None, max_total_tokens: int | None = None,
                 max_wall_s: float | None = None, client_token: str | None = None,
                 strict_sessions: bool = False, uds_expect: tuple | None = None,
                 bounds: Limits | None = None, token_ids: bool = False, tokenizer: str | None = None,
                 api_key: str | None = None):
        self.upstream = upstream.rstrip("/")
        self.token_ids = token_ids
        self.tokenizer = tokenizer if token_ids else None
        self._tito: dict[str, Any] = {}  # session -> clawgym.agent.tito.PromptIds
        self.log_path = log_path
        self.api_key_env = api_key_env
        self._api_key = api_key
        self.model = model
        self.timeout_s = timeout_s
        self.uds = uds
        self.uds_expect = uds_expect
        self.client_token = client_token
        self.strict_sessions = strict_sessions
        self.sessions: dict[str, dict] = {}
        # limits for the whole proxy: past them the proxy answers a final text itself (logged with "limit")
        self.max_requests, self.max_total_tokens, self.max_wall_s = max_requests, max_total_tokens, max_wall_s
        self._usage = [0, 0]  # requests answered or in flight, tokens used
        self.bounds = bounds
        self._stopped: str | None = None  # a size cap was hit: every later request gets the final text
        self._t_start: float | None = None
        self.refused = 0
        self._lock = threading.Lock()
        self._seq = 0
        self.gate: PeerGate | None = None
        os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
        self.app = self._make_app()

    def register_session(self, session: str, **meta) -> None:
        self.sessions[session] = meta

    def _admit(self, request: Request, session: str) -> tuple | None:
        """None when the request may be served, else (status, reason)."""
        if self.client_token is not None:
            auth = request.headers.get("authorization") or ""
            given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(given.encode(), self.client_token.encode()):
                return 401, "missing or wrong client token"
        if self.strict_sessions and session not in self.sessions:
            return 403, "unknown session"
        return None

    def _refuse(self, request: Request | None, session: str, status: int, why: str, **extra) -> JSONResponse:
        with self._lock:
            self.refused += 1
        entry = {"kind": "refused", "ts": time.time(), "status": status, "reason": why,
                 "session": str(session)[:120], **extra}
        if request is not None:
            entry["path"] = str(request.url.path)[:200]
        self._write(entry)
        return JSONResponse({"error": {"message": f"refused by the clawgym proxy: {why}", "type": "forbidden"}},
                            status_code=status)

    def _stop(self, why: str) -> None:
        with self._lock:
            self._stopped = self._stopped or why

    def _over_limit(self, session: str) -> str | None:
        with self._lock:
            if self._stopped:
                return self._stopped
            n, tok = self._usage
            if self.max_requests is not None and n >= self.max_requests:
                return f"turn limit ({self.max_requests}) reached"
            if self.max_total_tokens is not None and tok >= self.max_total_tokens:
                return f"token limit ({self.max_total_tokens}) reached"
            if self.max_wall_s is not None and self._t_start is not None and \
                    time.monotonic() - self._t_start >= self.max_wall_s:
                return f"wall-time limit ({self.max_wall_s:g} s) reached"
            self._usage[0] += 1
        return None

    def _count(self, session: str, response: dict | None) -> None:
        u = (response or {}).get("usage")
        u = u if isinstance(u, dict) else {}
        with self._lock:
            self._usage[1] += _usage_tokens(u.get("prompt_tokens")) + _usage_tokens(u.get("completion_tokens"))

    def _log(self, entry: dict) -> None:
        if entry.get("status") == 200 and not entry.get("limit"):
            self._count(entry["session"], entry.get("response"))
            tito = self._tito.get(entry["session"])
            if tito is not None:
                tito.remember_response(entry.get("response"), (entry.get("request") or {}).get("messages"))
        self._write(entry)

    def _prompt_ids(self, session: str, body: dict) -> list | None:
        """The ids the upstream should generate this request from (a re-sent history as sampled), or None."""
        if not self.tokenizer:
            return None
        with self._lock:
            tito = self._tito.get(session)
            if tito is None:
                from clawgym.agent.tito import PromptIds

                try:
                    tito = self._tito[session] = PromptIds(self.tokenizer)
                except Exception:  # noqa: BLE001 - no tokenizer here: the engine renders every request itself
                    self.tokenizer = None
                    return None
        msgs = body.get("messages")
        tools = body.get("tools")
        return tito.prompt_ids(msgs, tools if isinstance(tools, list) else None) if isinstance(msgs, list) else None

    def _write(self, entry: dict) -> None:
        line = redact(json.dumps(entry, ensure_ascii=False), extra_env=[self.api_key_env] if self.api_key_env else ())
        if self.client_token:
            line = line.replace(self.client_token, "[REDACTED]")
        if self._api_key:
            line = line.replace(self._api_key, "[REDACTED]")
        with self._lock, open(self.log_path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    async def _read_request(self, request: Request) -> bytes | None:
        """The request body, or None past ``bounds.max_record_bytes`` (not read further)."""
        if self.bounds is None:
            return await request.body()
        parts, n = [], 0
        async for part in request.stream():
            n += len(part)
            if n > self.bounds.max_record_bytes:
                return None
            parts.append(part)
        return b"".join(parts)

    async def _read_response(self, r: httpx.Response) -> bytes | None:
        """An upstream (streamed) response's body, or None past ``bounds.max_response_bytes``."""
        parts, n = [], 0
        async for part in r.aiter_bytes():
            n += len(part)
            if self.bounds is not None and n > self.bounds.max_response_bytes:
                return None
            parts.append(part)
        return b"".join(parts)

    def _headers(self, request: Request, session: str) -> dict:
        """Upstream headers of an admitted request of `session` (the only place the API key is attached)."""
        h = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS
             and not k.lower().startswith("x-clawgym-")}
        h["authorization"] = f"Bearer {self._api_key or 'clawgym'}"
        h["x-clawgym-session"] = session
        meta = self.sessions.get(session) or {}
        if meta.get("task_id"):
            h["x-clawgym-task"] = str(meta["task_id"])
        if meta.get("policy"):
            h["x-clawgym-policy"] = str(meta["policy"])
        return h

    def _make_app(self) -> FastAPI:
        app = FastAPI(title="clawgym recording proxy")
        routes = _ProxyRoutes(self, httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s, connect=10.0)))

        # each endpoint twice: session from the X-Clawgym-Session header (else "default"), or from the URL
        for method, tail, impl in (("POST", "chat/completions", routes.chat), ("GET", "models", routes.models)):
            by_header, by_url = _session_routes(impl)
            name = tail.replace("/", "_")
            app.add_api_route(f"/v1/{tail}", by_header, methods=[method], name=name)
            app.add_api_route(f"/s/{{session}}/v1/{tail}", by_url, methods=[method], name=f"{name}_session")

        @app.get("/health")
        async def health():
            return {"ok": True}

        return app

    # -- lifecycle (AppServer: start, port, base_url, stop, with-block)
    def start(self) -> "RecordingProxy":
        """Serve the proxy (and its socket gate when `uds` is set); the wall-time limit starts now."""
        if self._thread is None:
            super().start()
            self._t_start = time.monotonic()
            if self.uds:
                def refused(why, pid):
                    with self._lock:
                        self.refused += 1
                    self._write({"kind": "refused", "ts": time.time(), "status": 403, "reason": why,
                                 "peer_pid": pid, "via": "socket"})
                try:
                    self.gate = PeerGate(self.uds, ("127.0.0.1", self.port), on_refuse=refused,
                                         expect=self.uds_expect).start()
                except BaseException:
                    AppServer.stop(self)
                    raise
        return self

    def session_url(self, session: str) -> str:
        """The OpenAI base URL of `session` on the proxy's TCP port."""
        return f"http://127.0.0.1:{self.port}/s/{session}/v1"

    def stop(self) -> None:
        """Stop the socket gate, then the server (idempotent)."""
        if self.gate is not None:
            self.gate.stop()
            self.gate = None
        super().stop()


def _json_object(raw: bytes) -> dict | None:
    """`raw` parsed as JSON when it is an object, else None."""
    try:
        body = json.loads(raw)
    except Exception:
        return None
    return body if isinstance(body, dict) else None


@dataclass
class _Turn:
    """One admitted chat request on its way upstream: its log entry is filled in as the answer arrives."""

    session: str
    t0: float
    body: dict
    headers: dict
    entry: dict[str, Any]

    @property
    def model(self) -> str:
        return self.body.get("model", "")


class _ProxyRoutes:
    """The proxy's two endpoints (chat completions, models) over its upstream `client`; every check and record is
    the RecordingProxy's (`proxy`), in the order the module's docstring gives."""

    def __init__(self, proxy: RecordingProxy, client: httpx.AsyncClient):
        self.proxy = proxy
        self.client = client

    async def models(self, request: Request, session: str):
        proxy = self.proxy
        bad = proxy._admit(request, session)
        if bad:
            return proxy._refuse(request, session, *bad)
        try:
            r = await self.client.get(proxy.upstream + "/models", headers=proxy._headers(request, session))
            return Response(r.content, status_code=r.status_code, media_type="application/json")
        except httpx.HTTPError as e:
            return JSONResponse({"error": {"message": f"upstream unreachable: {type(e).__name__}"}}, 502)

    async def chat(self, request: Request, session: str):
        proxy = self.proxy
        t0 = time.time()
        bad = proxy._admit(request, session)
        if bad:  # refused before the body is even read: nothing of it is forwarded or recorded
            return proxy._refuse(request, session, *bad)
        raw = await proxy._read_request(request)
        if raw is None:  # over max_record_bytes: not read further, nothing of it recorded
            return self._request_too_large(session, t0)
        body = _json_object(raw)
        if body is None:
            return JSONResponse({"error": {"message": "invalid JSON body"}}, status_code=400)
        turn = self._admitted_turn(request, session, t0, body)
        why = proxy._over_limit(session)
        if why:
            return self._limit_answer(turn, why)
        # rendering and matching a long history is CPU work: off the event loop
        ids = await asyncio.to_thread(proxy._prompt_ids, session, body) if proxy.tokenizer else None
        upstream_body = {**body, KV_FIELD: {"prompt_token_ids": ids}} if ids else body
        if not body.get("stream"):
            return await self._forward(turn, upstream_body)
        return await self._forward_stream(turn, upstream_body)

    def _request_too_large(self, session: str, t0: float) -> JSONResponse:
        """The 413 of a request body over max_record_bytes (logged with "limit"; every later request is stopped)."""
        proxy = self.proxy
        with proxy._lock:
            proxy._seq += 1
            seq = proxy._seq
        assert proxy.bounds is not None  # only a bounded proxy refuses a body (_read_request)
        why = f"record size limit: request body over max_record_bytes ({proxy.bounds.max_record_bytes} bytes)"
        proxy._stop(why)
        proxy._log({"session": session, "seq": seq, "ts": t0, "status": 413, "limit": why, "latency_s": 0.0})
        return JSONResponse({"error": {"message": f"refused by the clawgym proxy: {why}",
                                       "type": "limit"}}, status_code=413)

    def _admitted_turn(self, request: Request, session: str, t0: float, body: dict) -> _Turn:
        """Number the request, pin its model, keep only the fields the record reads (`body`, in place) and make its
        log entry and upstream headers."""
        proxy = self.proxy
        with proxy._lock:
            proxy._seq += 1
            seq = proxy._seq
        if proxy.model:
            body["model"] = proxy.model
        # what the engine reads is what the record says it read: only OpenAI's sampling fields go upstream (an
        # engine's own extensions, structured_outputs / logit_bias / chat_template_kwargs / kv_transfer_params,
        # would let a client choose the "model's" text or the prompt behind the record), and only the text of
        # messages the template renders (a content part of another type, or a key such as reasoning_content,
        # is rendered by some templates and read by no trajectory)
        dropped = request_fields(body)
        if dropped:
            entry_extra = {"dropped_fields": dropped}
        else:
            entry_extra = {}
        if proxy.token_ids:  # the proxy's own choice, whatever the client sent
            body["return_token_ids"] = True
            body["logprobs"] = True
        headers = proxy._headers(request, session)
        entry: dict[str, Any] = {"session": session, "seq": seq, "ts": t0, "request": body,
                                 "stream": bool(body.get("stream")), **entry_extra}
        return _Turn(session, t0, body, headers, entry)

    def _limit_answer(self, turn: _Turn, why: str):
        """The proxy's own final text past a limit (streamed when the request asked for a stream)."""
        msg = {"role": "assistant", "content": f"[clawgym] {why}: stopping here."}
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        turn.entry.update(status=200, limit=why, response=completion_json(msg, turn.model, usage), latency_s=0.0)
        self.proxy._log(turn.entry)
        if turn.body.get("stream"):
            return StreamingResponse(sse_chunks(msg, turn.model, usage, True), media_type="text/event-stream")
        return JSONResponse(turn.entry["response"])

    def _stop_answer(self, turn: _Turn, why: str, response: dict | None = None) -> JSONResponse:
        """The proxy's own final text instead of a reply that broke a size cap (logged, cut)."""
        self.proxy._stop(why)
        msg = {"role": "assistant", "content": f"[clawgym] {why}: stopping here."}
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        turn.entry.update(status=200, limit=why, latency_s=time.time() - turn.t0,
                          response=response or completion_json(msg, turn.model, usage))
        self.proxy._log(turn.entry)
        return JSONResponse(completion_json(msg, turn.model, usage))

    def _unreachable(self, turn: _Turn, e: httpx.HTTPError) -> JSONResponse:
        """The 502 of an upstream that could not be reached (logged)."""
        turn.entry.update(status=502, error=f"upstream unreachable: {type(e).__name__}: {e}",
                          latency_s=time.time() - turn.t0)
        self.proxy._log(turn.entry)
        return JSONResponse({"error": {"message": turn.entry["error"], "type": "upstream_error"}}, 502)

    async def _forward(self, turn: _Turn, upstream_body: dict) -> Response:
        """A non-streamed request: the upstream's reply read up to max_response_bytes, checked against the size
        caps, logged and relayed."""
        proxy, client, entry = self.proxy, self.client, turn.entry
        url = proxy.upstream + "/chat/completions"
        try:
            r = await client.send(client.build_request("POST", url, json=upstream_body, headers=turn.headers),
                                  stream=True)
            try:
                content = await proxy._read_response(r)
            finally:
                await r.aclose()
        except httpx.HTTPError as e:
            return self._unreachable(turn, e)
        if content is None:
            assert proxy.bounds is not None  # only a bounded proxy stops reading (_read_response)
            return self._stop_answer(turn, f"reply size limit: the model's reply exceeded max_response_bytes "
                                           f"({proxy.bounds.max_response_bytes} bytes); not read further")
        entry.update(status=r.status_code, latency_s=time.time() - turn.t0)
        try:
            data = json.loads(content)
        except Exception:
            data = None
        if r.status_code == 200 and isinstance(data, dict):
            hit = _reply_cut(data, proxy.bounds)
            if hit is not None:
                return self._stop_answer(turn, hit[1], hit[0])
            entry["response"] = data
        else:
            entry["error"] = content[:2000].decode(errors="replace")
        proxy._log(entry)
        return Response(content, status_code=r.status_code,
                        media_type=r.headers.get("content-type", "application/json"))

    async def _forward_stream(self, turn: _Turn, upstream_body: dict) -> Response:
        """A streamed request: an upstream error is logged and relayed whole, a 200 stream chunk by chunk
        (:meth:`_relay`)."""
        proxy, client, entry = self.proxy, self.client, turn.entry
        url = proxy.upstream + "/chat/completions"
        req = client.build_request("POST", url, json=upstream_body, headers=turn.headers)
        try:
            r = await client.send(req, stream=True)
        except httpx.HTTPError as e:
            return self._unreachable(turn, e)
        if r.status_code != 200:
            content = await r.aread()
            await r.aclose()
            entry.update(status=r.status_code, error=content.decode(errors="replace")[:2000],
                         latency_s=time.time() - turn.t0)
            proxy._log(entry)
            return Response(content, status_code=r.status_code,
                            media_type=r.headers.get("content-type", "application/json"))
        return StreamingResponse(self._relay(turn, r), status_code=200,
                                 media_type=r.headers.get("content-type", "text/event-stream"))

    async def _relay(self, turn: _Turn, r: httpx.Response):
        """Relay the upstream's stream `r`, merging its chunks for the log as they pass; cut where it breaks a cap
        (the client then gets the end of a stream). The entry is logged however the stream ends."""
        proxy, entry = self.proxy, turn.entry
        chunks: list[dict] = []
        buf = b""
        done = False  # upstream sent [DONE]
        b = proxy.bounds
        caps = _StreamCaps(b) if b is not None else None
        n_bytes = 0
        try:
            async for part in r.aiter_raw():
                buf += part  # parse before yielding: the client may hang up right after the last chunk
                n_bytes += len(part)
                why = None
                if b is not None and n_bytes > b.max_response_bytes:
                    why = f"reply size limit: the model's reply exceeded max_response_bytes " \
                          f"({b.max_response_bytes} bytes); stream cut"
                while b"\n" in buf and why is None:
                    line, buf = buf.split(b"\n", 1)
                    line = line.strip()
                    if line.startswith(b"data:"):
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            done = True
                        elif payload:
                            try:
                                parsed = json.loads(payload)
                            except Exception:
                                continue
                            if not isinstance(parsed, dict):  # not a chunk: relayed, not merged
                                continue
                            chunks.append(parsed)
                            why = caps.over(chunks[-1]) if caps is not None else None
                            if why is not None:
                                chunks.pop()
                            elif len(chunks) >= 256:  # merged as it goes: memory stays bounded
                                chunks = [_as_chunk(merge_stream(chunks))]
                if why is not None:  # this part is not relayed; the client gets the end of a stream
                    proxy._stop(why)
                    merged = merge_stream(chunks)
                    hit = _reply_cut(merged, b)
                    entry.update(status=200, limit=why, response=hit[0] if hit else merged)
                    yield b"\n\ndata: [DONE]\n\n"
                    return
                yield part
            done = True
        except Exception as e:  # client went away or upstream broke mid-stream
            entry.update(status=599, error=f"stream broken: {type(e).__name__}: {e}")
            raise
        finally:
            # also reached on cancellation (the client closed after the last chunk): a stream that
            # completed upstream is a 200 whatever the client did afterwards
            if "status" not in entry and done:
                entry.update(status=200, response=merge_stream(chunks))
            elif "status" not in entry:
                entry.update(status=499, error="client closed the stream before it completed")
            await r.aclose()
            entry["latency_s"] = time.time() - turn.t0
            proxy._log(entry)


def _session_routes(impl):
    """The two FastAPI endpoints of `impl(request, session)`: session from the header, session from the URL."""

    async def by_header(request: Request):
        return await impl(request, request.headers.get("x-clawgym-session") or "default")

    async def by_url(session: str, request: Request):
        return await impl(request, session)

    return by_header, by_url


__all__ = ["RecordingProxy", "PeerGate", "request_fields", "merge_stream", "read_log", "rebuild_sessions",
           "clean_messages", "canonical", "HEARTBEAT_MARKERS", "INTERNAL_MARKERS"]
