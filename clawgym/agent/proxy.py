"""The recording proxy: an OpenAI-compatible HTTP server in front of any policy endpoint.

Every chat-completions request/response pair is appended to a JSONL log with its session id
(from the URL ``/s/<session>/v1/...``, else the ``X-Clawgym-Session`` header, else "default").
Streaming (SSE) responses are passed through chunk by chunk and re-assembled for the log.
The upstream API key is read from an environment variable and added to forwarded requests; it and
any other secret value is redacted from the log.

:func:`rebuild_sessions` turns a log back into one trajectory per session (the longest request's
messages plus the final response), dropping heartbeat, cron and internal-context turns.
No ``from __future__ import annotations`` here: FastAPI reads the endpoint annotations.
"""

import json
import os
import threading
import time
from typing import Any, Optional

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from clawgym.agent.secrets import redact
from clawgym.agent.servers import ServerThread, completion_json, sse_chunks, text_of

HOP_HEADERS = {"host", "content-length", "connection", "transfer-encoding", "authorization", "accept-encoding",
               "keep-alive", "te", "upgrade"}


def merge_stream(chunks: list[dict]) -> dict:
    """Re-assemble a chat.completion from chat.completion.chunk objects."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict] = {}
    finish = None
    usage = None
    model = rid = None
    for c in chunks:
        rid = rid or c.get("id")
        model = model or c.get("model")
        if c.get("usage"):
            usage = c["usage"]
        for ch in c.get("choices") or []:
            d = ch.get("delta") or {}
            if d.get("content"):
                content.append(d["content"])
            if d.get("reasoning_content"):
                reasoning.append(d["reasoning_content"])
            for tc in d.get("tool_calls") or []:
                slot = calls.setdefault(tc.get("index", len(calls)),
                                        {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["function"]["name"] += fn["name"]
                if fn.get("arguments"):
                    slot["function"]["arguments"] += fn["arguments"]
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if reasoning:
        msg["reasoning_content"] = "".join(reasoning)
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"id": rid, "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": msg, "finish_reason": finish}], "usage": usage}


class RecordingProxy:
    """Forward /v1/chat/completions (and /v1/models) to `upstream` and log each pair.

    sessions: optional {session_id: {"task_id": ..., "policy": ...}} sent upstream as
    X-Clawgym-Task / X-Clawgym-Policy headers (the oracle server uses them); `model` replaces the
    request's model name when set (OpenClaw asks for its own provider-local id)."""

    def __init__(self, upstream: str, log_path: str, api_key_env: Optional[str] = None,
                 model: Optional[str] = None, timeout_s: float = 600.0, uds: Optional[str] = None,
                 max_requests: Optional[int] = None, max_total_tokens: Optional[int] = None):
        self.upstream = upstream.rstrip("/")
        self.log_path = log_path
        self.api_key_env = api_key_env
        self.model = model
        self.timeout_s = timeout_s
        self.uds = uds
        self.sessions: dict[str, dict] = {}
        # limits per session: past them the proxy answers a final text itself (logged with "limit": true)
        self.max_requests, self.max_total_tokens = max_requests, max_total_tokens
        self._usage: dict[str, list[int]] = {}  # session -> [requests forwarded, tokens used]
        self._lock = threading.Lock()
        self._seq = 0
        self._thread: Optional[ServerThread] = None
        os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
        self.app = self._make_app()

    def register_session(self, session: str, **meta) -> None:
        self.sessions[session] = meta

    def _over_limit(self, session: str) -> Optional[str]:
        with self._lock:
            n, tok = self._usage.setdefault(session, [0, 0])
            if self.max_requests is not None and n >= self.max_requests:
                return f"turn limit ({self.max_requests}) reached"
            if self.max_total_tokens is not None and tok >= self.max_total_tokens:
                return f"token limit ({self.max_total_tokens}) reached"
            self._usage[session][0] += 1
        return None

    def _count(self, session: str, response: Optional[dict]) -> None:
        u = (response or {}).get("usage") or {}
        with self._lock:
            self._usage.setdefault(session, [0, 0])[1] += int(u.get("prompt_tokens") or 0) + \
                int(u.get("completion_tokens") or 0)

    def _log(self, entry: dict) -> None:
        if entry.get("status") == 200 and not entry.get("limit"):
            self._count(entry["session"], entry.get("response"))
        line = redact(json.dumps(entry, ensure_ascii=False), extra_env=[self.api_key_env] if self.api_key_env else ())
        with self._lock:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(line + "\n")

    def _headers(self, request: Request, session: str) -> dict:
        h = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS
             and not k.lower().startswith("x-clawgym-")}
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        h["authorization"] = f"Bearer {key or 'clawgym'}"
        h["x-clawgym-session"] = session
        meta = self.sessions.get(session) or {}
        if meta.get("task_id"):
            h["x-clawgym-task"] = str(meta["task_id"])
        if meta.get("policy"):
            h["x-clawgym-policy"] = str(meta["policy"])
        return h

    def _make_app(self) -> FastAPI:
        app = FastAPI(title="clawgym recording proxy")
        proxy = self
        client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s, connect=10.0))

        async def models_impl(request: Request, session: str):
            try:
                r = await client.get(proxy.upstream + "/models", headers=proxy._headers(request, session))
                return Response(r.content, status_code=r.status_code, media_type="application/json")
            except httpx.HTTPError as e:
                return JSONResponse({"error": {"message": f"upstream unreachable: {type(e).__name__}"}}, 502)

        async def chat_impl(request: Request, session: str):
            t0 = time.time()
            raw = await request.body()
            try:
                body = json.loads(raw)
            except Exception:
                return JSONResponse({"error": {"message": "invalid JSON body"}}, status_code=400)
            with proxy._lock:
                proxy._seq += 1
                seq = proxy._seq
            if proxy.model:
                body["model"] = proxy.model
            headers = proxy._headers(request, session)
            entry: dict[str, Any] = {"session": session, "seq": seq, "ts": t0, "request": body,
                                     "stream": bool(body.get("stream"))}
            why = proxy._over_limit(session)
            if why:
                msg = {"role": "assistant", "content": f"[clawgym] {why}: stopping here."}
                usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
                entry.update(status=200, limit=why, response=completion_json(msg, body.get("model", ""), usage),
                             latency_s=0.0)
                proxy._log(entry)
                if body.get("stream"):
                    return StreamingResponse(sse_chunks(msg, body.get("model", ""), usage, True),
                                             media_type="text/event-stream")
                return JSONResponse(entry["response"])
            url = proxy.upstream + "/chat/completions"
            if not body.get("stream"):
                try:
                    r = await client.post(url, json=body, headers=headers)
                except httpx.HTTPError as e:
                    entry.update(status=502, error=f"upstream unreachable: {type(e).__name__}: {e}",
                                 latency_s=time.time() - t0)
                    proxy._log(entry)
                    return JSONResponse({"error": {"message": entry["error"], "type": "upstream_error"}}, 502)
                entry.update(status=r.status_code, latency_s=time.time() - t0)
                try:
                    data = r.json()
                except Exception:
                    data = None
                if r.status_code == 200 and isinstance(data, dict):
                    entry["response"] = data
                else:
                    entry["error"] = r.text[:2000]
                proxy._log(entry)
                return Response(r.content, status_code=r.status_code,
                                media_type=r.headers.get("content-type", "application/json"))

            req = client.build_request("POST", url, json=body, headers=headers)
            try:
                r = await client.send(req, stream=True)
            except httpx.HTTPError as e:
                entry.update(status=502, error=f"upstream unreachable: {type(e).__name__}: {e}",
                             latency_s=time.time() - t0)
                proxy._log(entry)
                return JSONResponse({"error": {"message": entry["error"], "type": "upstream_error"}}, 502)
            if r.status_code != 200:
                content = await r.aread()
                await r.aclose()
                entry.update(status=r.status_code, error=content.decode(errors="replace")[:2000],
                             latency_s=time.time() - t0)
                proxy._log(entry)
                return Response(content, status_code=r.status_code,
                                media_type=r.headers.get("content-type", "application/json"))

            async def relay():
                chunks: list[dict] = []
                buf = b""
                done = False  # upstream sent [DONE]
                try:
                    async for part in r.aiter_raw():
                        buf += part  # parse before yielding: the client may hang up right after the last chunk
                        while b"\n" in buf:
                            line, buf = buf.split(b"\n", 1)
                            line = line.strip()
                            if line.startswith(b"data:"):
                                payload = line[5:].strip()
                                if payload == b"[DONE]":
                                    done = True
                                elif payload:
                                    try:
                                        chunks.append(json.loads(payload))
                                    except Exception:
                                        pass
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
                    entry["latency_s"] = time.time() - t0
                    proxy._log(entry)

            return StreamingResponse(relay(), status_code=200,
                                     media_type=r.headers.get("content-type", "text/event-stream"))

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            return await chat_impl(request, request.headers.get("x-clawgym-session") or "default")

        @app.post("/s/{session}/v1/chat/completions")
        async def chat_session(session: str, request: Request):
            return await chat_impl(request, session)

        @app.get("/v1/models")
        async def models(request: Request):
            return await models_impl(request, request.headers.get("x-clawgym-session") or "default")

        @app.get("/s/{session}/v1/models")
        async def models_session(session: str, request: Request):
            return await models_impl(request, session)

        @app.get("/health")
        async def health():
            return {"ok": True}

        return app

    # -- lifecycle
    def start(self) -> "RecordingProxy":
        if self._thread is None:
            self._thread = ServerThread(self.app, uds=self.uds).start()
        return self

    @property
    def port(self) -> int:
        assert self._thread is not None
        return self._thread.port

    @property
    def base_url(self) -> str:
        assert self._thread is not None, "proxy not started"
        return self._thread.base_url

    def session_url(self, session: str) -> str:
        return f"http://127.0.0.1:{self.port}/s/{session}/v1"

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop()
            self._thread = None

    def __enter__(self) -> "RecordingProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ---- aggregation ------------------------------------------------------------------------------------
HEARTBEAT_MARKERS = ("HEARTBEAT.md", "HEARTBEAT_OK")
INTERNAL_MARKERS = ("<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>", "<internal-context>", "[internal]", "Pre-compaction memory flush", "<system-reminder>")


def read_log(path: str) -> list[dict]:
    out = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut by a crash
    return out


def _is_heartbeat(text: str) -> bool:
    return any(m in text for m in HEARTBEAT_MARKERS)


def _is_internal(text: str) -> bool:
    return any(m in text for m in INTERNAL_MARKERS)


def _last_user_text(messages: list[dict]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            return text_of(m.get("content"))
    return ""


def _first_user_text(messages: list[dict]) -> str:
    for m in messages:
        if m.get("role") == "user" and not _is_heartbeat(text_of(m.get("content"))):
            return text_of(m.get("content"))
    return ""


def clean_messages(messages: list[dict]) -> list[dict]:
    """Remove heartbeat prompts with their HEARTBEAT_OK replies and internal-context user turns."""
    out: list[dict] = []
    skip_reply = False
    for m in messages:
        role, text = m.get("role"), text_of(m.get("content"))
        if role == "user" and _is_heartbeat(text):
            skip_reply = True  # the heartbeat's HEARTBEAT_OK answer goes too
            continue
        if role == "user" and _is_internal(text):
            continue
        if skip_reply and role == "assistant" and not m.get("tool_calls"):
            skip_reply = False
            continue
        skip_reply = False
        out.append(m)
    return out


def rebuild_sessions(entries: list[dict]) -> dict[str, dict]:
    """One trajectory per session: {session: {messages, tools, n_requests, prompt_tokens,
    completion_tokens, dropped}}. Failed requests, cron sessions, heartbeat turns and internal-context
    requests (whose conversation is not the session's main one) are dropped."""
    by_session: dict[str, list[dict]] = {}
    for e in entries:
        by_session.setdefault(str(e.get("session", "default")), []).append(e)
    out: dict[str, dict] = {}
    for session, es in by_session.items():
        if session.startswith("cron:") or ":cron:" in session:
            continue
        ok = [e for e in es if e.get("status") == 200 and e.get("response") and e.get("request")
              and not e.get("limit")]
        dropped = len(es) - len(ok)
        main_first = None
        kept = []
        for e in sorted(ok, key=lambda e: e.get("seq", 0)):
            msgs = e["request"].get("messages") or []
            last = _last_user_text(clean_messages(msgs))
            if _is_heartbeat(_last_user_text(msgs)) and not _is_internal(_last_user_text(msgs)):
                dropped += 1
                continue
            first = _first_user_text(msgs)
            if main_first is None:
                main_first = first
            if first != main_first:  # a side conversation (summary, title, compaction …)
                dropped += 1
                continue
            kept.append(e)
        if not kept:
            continue
        longest = max(kept, key=lambda e: (len(e["request"].get("messages") or []), e.get("seq", 0)))
        msg = ((longest["response"].get("choices") or [{}])[0].get("message") or {})
        final = {"role": "assistant", "content": msg.get("content")}
        if msg.get("tool_calls"):
            final["tool_calls"] = msg["tool_calls"]
        messages = clean_messages(list(longest["request"].get("messages") or []) + [final])
        pt = sum(((e["response"].get("usage") or {}).get("prompt_tokens") or 0) for e in kept)
        ct = sum(((e["response"].get("usage") or {}).get("completion_tokens") or 0) for e in kept)
        out[session] = {"messages": messages, "tools": longest["request"].get("tools") or [],
                        "n_requests": len(kept), "prompt_tokens": pt, "completion_tokens": ct,
                        "dropped": dropped, "model": longest["request"].get("model")}
    return out


__all__ = ["RecordingProxy", "merge_stream", "read_log", "rebuild_sessions", "clean_messages"]
