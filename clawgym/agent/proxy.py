"""The recording proxy: an OpenAI-compatible HTTP server in front of any policy endpoint.

Every chat-completions request/response pair is appended to a JSONL log with its session id
(from the URL ``/s/<session>/v1/...``, else the ``X-Clawgym-Session`` header, else "default").
Streaming (SSE) responses are passed through chunk by chunk and re-assembled for the log.
The upstream API key is read from an environment variable and added to forwarded requests; it and
any other secret value is redacted from the log.

Hostile clients (the OpenClaw runtime runs one proxy per rollout; the agent under test can reach it):

* ``client_token``: requests must carry ``Authorization: Bearer <token>`` (401 otherwise).
* ``strict_sessions``: only sessions registered with :meth:`RecordingProxy.register_session` are served; any
  other session id (another rollout's, a fresh one, "default") gets a 403. A refused request is never
  forwarded upstream (so the API key is never attached to it) and never enters a trajectory: the log gets a
  ``{"kind": "refused", ...}`` line without the request body.
* limits (``max_requests``, ``max_total_tokens``, ``max_wall_s``) count every request the proxy answers,
  whatever its path or session id; past them the proxy answers a final text itself (logged with "limit").
* ``uds``: the unix socket is served through :class:`PeerGate`, which pins the mount+network namespaces of
  the first process that connects (the rollout's in-sandbox forwarder) and refuses connections from any
  other namespace, i.e. from any other sandbox.

The trajectory rule (:func:`rebuild_sessions`) -- the log is append-only and every request is recorded as
sent, but the trajectory is never taken from a client's claims about the past ("longest request wins" was
forgeable). It is the chain of turns the proxy actually answered, in log order:

* assistant turns are only ever the proxy's own responses (as logged from upstream); an assistant message a
  client sends that the proxy never returned is not in the trajectory;
* each answered request contributes only its *new* client messages: the messages after the
  previously-answered conversation it extends (its request messages + the reply the proxy returned, compared
  canonically: internal-context/heartbeat user turns dropped, text content, tool-call ids without
  punctuation -- OpenClaw rewrites ``call_ab`` to ``callab`` --, JSON arguments re-serialised, tool results
  by tool_call_id only). A client message, once recorded, is never replaced by a later request's version;
* tool results are kept only for tool calls the proxy returned, once each, under the proxy's own call id;
* a request that extends no answered conversation (history rewritten, assistant turns forged, fake tool
  calls, a branch off an older turn) is still answered and logged, but only its messages after the longest
  prefix it shares with an answered conversation (and after its last assistant message) are taken, and the
  session's ``divergence`` list says what happened (seq, kind, detail); fake assistant turns and tool
  results are listed there, not kept;
* requests of another conversation (a different first user message and no assistant turn the proxy
  returned in the main conversation: summaries, titles) are side requests: counted, not in the trajectory;
  heartbeat turns, cron sessions and limit answers are dropped as before.

No ``from __future__ import annotations`` here: FastAPI reads the endpoint annotations.
"""

import asyncio
import hmac
import json
import os
import re
import socket
import struct
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


class PeerGate:
    """The unix-socket front door of a proxy that serves one sandbox.

    Listens on `path` (mode 0666: the sandbox user must be able to connect) and relays each accepted
    connection to the proxy's TCP port on the host loopback. The first connecting process pins the gate to
    its mount + network namespaces (read through SO_PEERCRED and /proc/<pid>/ns); a connection from any
    other namespace -- another sandbox that somehow learnt the path -- gets a 403 and is closed without
    reaching the proxy. `expect` pins up front instead. Fails closed: a peer whose pid or namespaces the
    host cannot see is refused."""

    NS = ("mnt", "net")

    def __init__(self, path: str, target: tuple, on_refuse=None, expect: Optional[tuple] = None):
        self.path, self.target, self.on_refuse = path, target, on_refuse
        self.pinned: Optional[tuple] = expect
        self.refused = 0
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._server = None

    @classmethod
    def identity(cls, pid: int) -> Optional[tuple]:
        if pid <= 0:
            return None
        try:
            return tuple(os.readlink(f"/proc/{pid}/ns/{n}") for n in cls.NS)
        except OSError:
            return None

    def _check(self, sock) -> tuple:
        try:
            pid, _uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                   struct.calcsize("3i")))
        except (OSError, AttributeError):
            return "peer credentials unavailable", 0
        ident = self.identity(pid)
        if ident is None:
            return "peer process or namespaces not visible from the proxy", pid
        with self._lock:
            if self.pinned is None:
                self.pinned = ident
            elif ident != self.pinned:
                return "connection from outside the rollout's sandbox", pid
        return None, pid

    async def _handle(self, reader, writer) -> None:
        why, pid = self._check(writer.get_extra_info("socket"))
        if why:
            with self._lock:
                self.refused += 1
            if self.on_refuse:
                try:
                    self.on_refuse(why, pid)
                except Exception:
                    pass
            body = json.dumps({"error": {"message": f"refused: {why}", "type": "forbidden"}}).encode()
            try:
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nConnection: close\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
                # let the client finish sending (bounded) so that it reads the 403 instead of a broken pipe
                got, t_end = 0, time.monotonic() + 2.0
                while got < (1 << 20) and time.monotonic() < t_end:
                    d = await asyncio.wait_for(reader.read(65536), max(0.01, t_end - time.monotonic()))
                    if not d:
                        break
                    got += len(d)
            except Exception:
                pass
            writer.close()
            return
        try:
            ur, uw = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return

        async def pipe(r, w):
            try:
                while True:
                    d = await r.read(65536)
                    if not d:
                        break
                    w.write(d)
                    await w.drain()
            except Exception:
                pass
            finally:
                try:
                    w.close()
                except Exception:
                    pass

        await asyncio.gather(pipe(reader, uw), pipe(ur, writer))

    def start(self, timeout: float = 10.0) -> "PeerGate":
        if os.path.lexists(self.path):
            os.unlink(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.path)
        os.chmod(self.path, 0o666)
        sock.listen(128)
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run():
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(asyncio.start_unix_server(self._handle, sock=sock))
            ready.set()
            self._loop.run_forever()
            self._server.close()
            self._loop.run_until_complete(self._server.wait_closed())
            for t in asyncio.all_tasks(self._loop):
                t.cancel()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

        self._thread = threading.Thread(target=run, daemon=True, name=f"peergate-{os.path.basename(self.path)}")
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError(f"socket gate on {self.path} did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop = self._thread = None
        try:
            os.unlink(self.path)
        except OSError:
            pass


class RecordingProxy:
    """Forward /v1/chat/completions (and /v1/models) to `upstream` and log each pair.

    sessions: optional {session_id: {"task_id": ..., "policy": ...}} sent upstream as
    X-Clawgym-Task / X-Clawgym-Policy headers (the oracle server uses them); `model` replaces the
    request's model name when set (OpenClaw asks for its own provider-local id).
    client_token / strict_sessions / limits / uds: see the module docstring (one proxy per rollout: the
    limits count every answered request of the proxy, whatever its session)."""

    def __init__(self, upstream: str, log_path: str, api_key_env: Optional[str] = None,
                 model: Optional[str] = None, timeout_s: float = 600.0, uds: Optional[str] = None,
                 max_requests: Optional[int] = None, max_total_tokens: Optional[int] = None,
                 max_wall_s: Optional[float] = None, client_token: Optional[str] = None,
                 strict_sessions: bool = False, uds_expect: Optional[tuple] = None):
        self.upstream = upstream.rstrip("/")
        self.log_path = log_path
        self.api_key_env = api_key_env
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
        self._t_start: Optional[float] = None
        self.refused = 0
        self._lock = threading.Lock()
        self._seq = 0
        self._thread: Optional[ServerThread] = None
        self.gate: Optional[PeerGate] = None
        os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
        self.app = self._make_app()

    def register_session(self, session: str, **meta) -> None:
        self.sessions[session] = meta

    def _admit(self, request: Request, session: str) -> Optional[tuple]:
        """None when the request may be served, else (status, reason)."""
        if self.client_token is not None:
            auth = request.headers.get("authorization") or ""
            given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(given.encode(), self.client_token.encode()):
                return 401, "missing or wrong client token"
        if self.strict_sessions and session not in self.sessions:
            return 403, "unknown session"
        return None

    def _refuse(self, request: Optional[Request], session: str, status: int, why: str, **extra) -> JSONResponse:
        with self._lock:
            self.refused += 1
        entry = {"kind": "refused", "ts": time.time(), "status": status, "reason": why,
                 "session": str(session)[:120], **extra}
        if request is not None:
            entry["path"] = str(request.url.path)[:200]
        self._write(entry)
        return JSONResponse({"error": {"message": f"refused by the clawgym proxy: {why}", "type": "forbidden"}},
                            status_code=status)

    def _over_limit(self, session: str) -> Optional[str]:
        with self._lock:
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

    def _count(self, session: str, response: Optional[dict]) -> None:
        u = (response or {}).get("usage") or {}
        with self._lock:
            self._usage[1] += int(u.get("prompt_tokens") or 0) + int(u.get("completion_tokens") or 0)

    def _log(self, entry: dict) -> None:
        if entry.get("status") == 200 and not entry.get("limit"):
            self._count(entry["session"], entry.get("response"))
        self._write(entry)

    def _write(self, entry: dict) -> None:
        line = redact(json.dumps(entry, ensure_ascii=False), extra_env=[self.api_key_env] if self.api_key_env else ())
        if self.client_token:
            line = line.replace(self.client_token, "[REDACTED]")
        with self._lock:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(line + "\n")

    def _headers(self, request: Request, session: str) -> dict:
        """Upstream headers of an admitted request of `session` (the only place the API key is attached)."""
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
            bad = proxy._admit(request, session)
            if bad:
                return proxy._refuse(request, session, *bad)
            try:
                r = await client.get(proxy.upstream + "/models", headers=proxy._headers(request, session))
                return Response(r.content, status_code=r.status_code, media_type="application/json")
            except httpx.HTTPError as e:
                return JSONResponse({"error": {"message": f"upstream unreachable: {type(e).__name__}"}}, 502)

        async def chat_impl(request: Request, session: str):
            t0 = time.time()
            bad = proxy._admit(request, session)
            if bad:  # refused before the body is even read: nothing of it is forwarded or recorded
                return proxy._refuse(request, session, *bad)
            raw = await request.body()
            try:
                body = json.loads(raw)
                if not isinstance(body, dict):
                    raise ValueError("not an object")
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
            self._thread = ServerThread(self.app).start()
            self._t_start = time.monotonic()
            if self.uds:
                def refused(why, pid):
                    with self._lock:
                        self.refused += 1
                    self._write({"kind": "refused", "ts": time.time(), "status": 403, "reason": why,
                                 "peer_pid": pid, "via": "socket"})
                try:
                    self.gate = PeerGate(self.uds, ("127.0.0.1", self._thread.port), on_refuse=refused,
                                         expect=self.uds_expect).start()
                except BaseException:
                    self._thread.stop()
                    self._thread = None
                    raise
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
        if self.gate is not None:
            self.gate.stop()
            self.gate = None
        if self._thread is not None:
            self._thread.stop()
            self._thread = None

    def __enter__(self) -> "RecordingProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ---- aggregation ------------------------------------------------------------------------------------
HEARTBEAT_MARKERS = ("HEARTBEAT.md", "HEARTBEAT_OK")
INTERNAL_MARKERS = ("<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>", "<internal-context>", "[internal]",
                    "Pre-compaction memory flush", "<system-reminder>")


def read_log(path: str) -> list[dict]:
    """The records of a proxy JSONL log ([] when the file does not exist); lines cut by a crash are skipped."""
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


def _cid(call_id: Any) -> str:
    """A tool-call id as clients send it back (OpenClaw strips everything but letters and digits)."""
    return re.sub(r"[^A-Za-z0-9]", "", str(call_id or ""))


def _cargs(args: Any) -> str:
    if isinstance(args, str):
        try:
            return json.dumps(json.loads(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except (ValueError, TypeError):
            return args.strip()
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def canonical(m: dict) -> tuple:
    """What two versions of a message must share to count as the same message (see the module docstring)."""
    role = m.get("role")
    if role == "tool":
        return ("tool", _cid(m.get("tool_call_id")))
    if role == "assistant":
        calls = tuple((_cid(tc.get("id")), (tc.get("function") or {}).get("name"),
                       _cargs((tc.get("function") or {}).get("arguments")))
                      for tc in (m.get("tool_calls") or []) if isinstance(tc, dict))
        return ("assistant", text_of(m.get("content")).strip(), calls)
    return (str(role), text_of(m.get("content")).strip())


def _reply_of(e: dict) -> dict:
    msg = ((e["response"].get("choices") or [{}])[0].get("message") or {})
    final: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
    if msg.get("tool_calls"):
        final["tool_calls"] = msg["tool_calls"]
    return final


def _lcp(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _is_side(msgs: list[dict], main_first: str, main_replies: set) -> bool:
    if _first_user_text(msgs) == main_first:
        return False
    return not any(m.get("role") == "assistant" and canonical(m) in main_replies for m in msgs)


def rebuild_sessions(entries: list[dict]) -> dict[str, dict]:
    """One trajectory per session, built by the rule of the module docstring: {session: {messages, tools,
    n_requests, prompt_tokens, completion_tokens, dropped, model, divergence, side_requests, refused}}.
    `divergence` lists the requests that did not extend the conversation the proxy had answered
    ({seq, kind, detail}); an empty list means the client's view and the proxy's agree."""
    by_session: dict[str, list[dict]] = {}
    refused: dict[str, int] = {}
    for e in entries:
        if e.get("kind"):  # refusals and other non-request lines
            if e.get("kind") == "refused":
                s = str(e.get("session", ""))
                refused[s] = refused.get(s, 0) + 1
            continue
        by_session.setdefault(str(e.get("session", "default")), []).append(e)
    out: dict[str, dict] = {}
    for session, es in by_session.items():
        if session.startswith("cron:") or ":cron:" in session:
            continue
        ok = [e for e in es if e.get("status") == 200 and isinstance(e.get("response"), dict)
              and isinstance(e.get("request"), dict) and not e.get("limit")]
        dropped = len(es) - len(ok)
        main_first: Optional[str] = None
        main_replies: set = set()
        side = 0
        kept = []
        for e in sorted(ok, key=lambda e: e.get("seq", 0)):
            msgs = [m for m in (e["request"].get("messages") or []) if isinstance(m, dict)]
            if _is_heartbeat(_last_user_text(msgs)) and not _is_internal(_last_user_text(msgs)):
                dropped += 1
                continue
            if main_first is None:
                main_first = _first_user_text(msgs)
            elif _is_side(msgs, main_first, main_replies):  # a side conversation (summary, title …)
                dropped += 1
                side += 1
                continue
            kept.append((e, msgs))
            main_replies.add(canonical(_reply_of(e)))
        if not kept:
            continue
        messages: list[dict] = []
        divergence: list[dict] = []
        chain: list[tuple] = []  # (seq, canonical request, canonical reply) of each answered turn
        call_ids: dict[str, str] = {}  # canonical id -> the proxy's id, for every tool call it returned
        answered: set = set()  # canonical ids whose result is in the trajectory
        for e, msgs in kept:
            seq = e.get("seq", 0)
            req = clean_messages(msgs)
            creq = [canonical(m) for m in req]
            reply = _reply_of(e)
            start, parent = 0, None
            for t in reversed(chain):
                exp = t[1] + [t[2]]
                if creq[:len(exp)] == exp:
                    parent, start = t, len(exp)
                    break
            if parent is not None and parent is not chain[-1]:
                divergence.append({"seq": seq, "kind": "branch",
                                   "detail": f"continues the turn of seq {parent[0]}, not the latest ({chain[-1][0]})"})
            elif parent is None and chain:
                best = max(_lcp(creq, t[1] + [t[2]]) for t in chain)
                last_a = max((i for i, m in enumerate(req) if m.get("role") == "assistant"), default=-1)
                start = max(best, last_a + 1)
                divergence.append({"seq": seq, "kind": "rewritten_history",
                                   "detail": f"does not extend an answered conversation (differs at message "
                                             f"{best}); messages before {start} ignored"})
            for i, m in enumerate(req[start:], start):
                role = m.get("role")
                if role == "assistant":
                    divergence.append({"seq": seq, "kind": "forged_assistant",
                                       "detail": f"message {i}: an assistant turn the proxy never returned"})
                    continue
                if role == "tool":
                    cid = _cid(m.get("tool_call_id"))
                    if cid not in call_ids:
                        divergence.append({"seq": seq, "kind": "fake_tool_result",
                                           "detail": f"message {i}: result for a tool call the proxy never "
                                                     f"returned ({str(m.get('tool_call_id'))[:80]})"})
                        continue
                    if cid in answered:
                        continue
                    answered.add(cid)
                    m = {**m, "tool_call_id": call_ids[cid]}
                messages.append(m)
            for tc in reply.get("tool_calls") or []:
                if isinstance(tc, dict) and tc.get("id"):
                    call_ids.setdefault(_cid(tc["id"]), tc["id"])
            messages.append(reply)
            chain.append((seq, creq, canonical(reply)))
        first = kept[0][0]
        pt = sum(((e["response"].get("usage") or {}).get("prompt_tokens") or 0) for e, _ in kept)
        ct = sum(((e["response"].get("usage") or {}).get("completion_tokens") or 0) for e, _ in kept)
        out[session] = {"messages": clean_messages(messages), "tools": first["request"].get("tools") or [],
                        "n_requests": len(kept), "prompt_tokens": pt, "completion_tokens": ct,
                        "dropped": dropped, "model": first["request"].get("model"), "divergence": divergence,
                        "side_requests": side, "refused": refused.get(session, 0)}
    return out


__all__ = ["RecordingProxy", "PeerGate", "merge_stream", "read_log", "rebuild_sessions", "clean_messages",
           "canonical"]
