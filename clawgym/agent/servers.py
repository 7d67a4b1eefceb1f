"""Local OpenAI-compatible servers: uvicorn in a background thread, and the oracle/noop policy server.

The oracle and noop policies are served over the same chat-completions protocol as any model
endpoint, so the builtin loop and the real OpenClaw exercise one code path for every policy:

- ``oracle``: given a session's messages, replays the task's ``reference`` tool calls one per turn
  (the task is found by the ``X-Clawgym-Task`` header, a ``model`` of ``oracle/<task_id>``, or the
  task instruction inside the first user message) and then answers a final text;
- ``noop``: answers a short text and never calls a tool (the "do nothing" baseline);
- ``program``: the program teacher, like ``oracle`` but replaying the task's ``program_reference`` (one exec of
  its family's program solution, recorded by synthesis) where it has one: trajectories that show *how* to solve.

Tool calls are adapted to the tool schemas the client sent (OpenClaw's ``edit{path, edits[]}``,
``exec{timeoutSeconds}``, no ``ls`` …). Plain JSON and SSE streaming are both supported.

Local servers answer only their own clients: the policy server (and the embedded model server,
clawgym.serve) take the per-process token :func:`server_token` — a request without
``Authorization: Bearer <token>`` gets 401 (:class:`BearerAuth`; ``/health`` stays open). The token lives in
this process's environment as ``$CLAWGYM_SERVER_TOKEN`` (the endpoints name it as their ``api_key_env``, so
the chat client and the recording proxy send it, and secret redaction keeps it out of logs, trajectories and
the lake); isolating sandboxes never get this process's environment.
No ``from __future__ import annotations`` here: FastAPI reads the endpoint annotations.
"""

import contextlib
import hashlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any, Self

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from clawgym.agent.messages import text_of

# the per-process token of the local servers and its middleware live below the agent (the model server uses them)
from clawgym.serve.auth import TOKEN_ENV, BearerAuth, server_token  # noqa: F401 (re-exported)


# ---- uvicorn in a thread ---------------------------------------------------------------------
class ServerThread:
    """Serve an ASGI app on 127.0.0.1:<free port> (and optionally a unix socket) from a daemon thread."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, uds: str | None = None):
        self.app, self.host, self.port, self.uds = app, host, port, uds
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 20.0) -> "ServerThread":
        socks = []
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind((self.host, self.port))
        self.port = tcp.getsockname()[1]
        socks.append(tcp)
        if self.uds:
            if os.path.exists(self.uds):
                os.unlink(self.uds)
            us = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            us.bind(self.uds)
            os.chmod(self.uds, 0o777)
            socks.append(us)
        for s in socks:
            s.listen(128)
            s.set_inheritable(True)
        cfg = uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False,
                             timeout_keep_alive=30)
        self._server = uvicorn.Server(cfg)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": socks}, daemon=True,
                                        name=f"uvicorn-{self.port}")
        self._thread.start()
        t0 = time.monotonic()
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() - t0 > timeout:
                raise RuntimeError(f"server on port {self.port} did not start")
            time.sleep(0.02)
        return self

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.uds and os.path.exists(self.uds):
            try:
                os.unlink(self.uds)
            except OSError:
                pass
        self._server = self._thread = None

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ---- chat-completion helpers ---------------------------------------------------------------------
def approx_tokens(obj: Any) -> int:
    """A rough token count of a string or JSON-serialisable object (4 characters per token, at least 1)."""
    s = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    return max(1, len(s) // 4)




def completion_json(message: dict, model: str, usage: dict) -> dict:
    """A non-streaming chat.completion response body carrying `message` and `usage`."""
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {"id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage}


def sse_chunks(message: dict, model: str, usage: dict, include_usage: bool) -> Iterable[str]:
    """The streaming form of :func:`completion_json`: server-sent-event lines ending with ``data: [DONE]``
    (a usage chunk before it when `include_usage`)."""
    cid, created = "chatcmpl-" + uuid.uuid4().hex[:24], int(time.time())

    def chunk(delta, finish=None, **extra):
        d = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        d.update(extra)
        return "data: " + json.dumps(d) + "\n\n"

    yield chunk({"role": "assistant", "content": ""})
    if message.get("content"):
        yield chunk({"content": message["content"]})
    for i, tc in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [{"index": i, "id": tc["id"], "type": "function",
                                     "function": {"name": tc["function"]["name"], "arguments": ""}}]})
        yield chunk({"tool_calls": [{"index": i, "function": {"arguments": tc["function"]["arguments"]}}]})
    yield chunk({}, "tool_calls" if message.get("tool_calls") else "stop")
    if include_usage:
        yield "data: " + json.dumps({"id": cid, "object": "chat.completion.chunk", "created": created,
                                     "model": model, "choices": [], "usage": usage}) + "\n\n"
    yield "data: [DONE]\n\n"


# ---- adapting reference calls to the client's tool schemas -----------------------------------------
def _tool_props(tools: list | None) -> dict[str, set]:
    out: dict[str, set] = {}
    for t in tools or []:
        fn = t.get("function", t) if isinstance(t, dict) else {}
        name = fn.get("name")
        if name:
            out[name] = set(((fn.get("parameters") or {}).get("properties") or {}).keys())
    return out


def adapt_call(name: str, args: dict, tools: list | None) -> tuple[str, dict]:
    """Rewrite one clawgym reference call so it fits the tool schemas the client offers."""
    props = _tool_props(tools)
    if not props:
        return name, args
    args = dict(args)
    if name == "edit" and "edit" in props:
        p = props["edit"]
        if "oldText" in args and "oldText" not in p and "edits" in p:
            args = {"path": args["path"], "edits": [{"oldText": args["oldText"], "newText": args.get("newText", "")}]}
        elif "edits" in args and "edits" not in p and "oldText" in p and len(args["edits"]) == 1:
            e = args["edits"][0]
            args = {"path": args["path"], "oldText": e["oldText"], "newText": e.get("newText", "")}
    if name == "exec" and "exec" in props:
        p = props["exec"]
        if "timeout" in args and "timeout" not in p and "timeoutSeconds" in p:
            args["timeoutSeconds"] = args.pop("timeout")
        if "workdir" in args and "workdir" not in p and "cwd" in p:
            args["cwd"] = args.pop("workdir")
    if name == "ls" and "ls" not in props and "exec" in props:
        path = args.get("path") or "."
        return "exec", {"command": "ls -1Ap -- " + json.dumps(path)}
    if name in ("read", "write", "edit") and name in props:
        p = props[name]
        if "path" in args and "path" not in p and "file_path" in p:
            args["file_path"] = args.pop("path")
    return name, args


class AppServer:
    """An ASGI app (`self.app`, set by the subclass) served by a :class:`ServerThread` from start() to
    stop(); also a context manager. Subclasses extend start/stop (the recording proxy adds its socket gate).
    `token` (set by the subclass): requests must carry ``Authorization: Bearer <token>`` (:class:`BearerAuth`);
    None / "" = no such check (the recording proxy checks its own per-rollout client token)."""

    app: Any
    token: str | None = None
    _thread: ServerThread | None = None

    def start(self) -> Self:
        """Serve `self.app` on a free 127.0.0.1 port (no-op when already serving)."""
        if self._thread is None:
            app = BearerAuth(self.app, self.token) if self.token else self.app
            self._thread = ServerThread(app).start()
        return self

    @property
    def port(self) -> int:
        """The TCP port being served."""
        assert self._thread is not None, f"{type(self).__name__} not started"
        return self._thread.port

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (http://127.0.0.1:<port>/v1)."""
        assert self._thread is not None, f"{type(self).__name__} not started"
        return self._thread.base_url

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._thread is not None:
            self._thread.stop()
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ---- the policy server ------------------------------------------------------------------------------
FINAL_TEXT = "Done: the task is complete."
NOOP_TEXT = "I will not make any changes."


class PolicyServer(AppServer):
    """Oracle + noop policies behind one OpenAI-compatible server (models: "oracle", "noop",
    "oracle/<task_id>", and "program": the program teacher, which replays the task's program_reference (its
    family's program solution, recorded by synthesis) where it has one, else the reference). Register tasks
    with :meth:`register`.
    `token`: the bearer token clients must send (None: this process's :func:`server_token`; "": none)."""

    def __init__(self, token: str | None = None):
        self.token = server_token() if token is None else token
        self.tasks: dict[str, Any] = {}
        self.fail_next: list[int] = []  # fault injection: statuses to answer to the next requests
        self.requests = 0
        self._lock = threading.Lock()
        self.app = self._make_app()

    def register(self, task) -> None:
        with self._lock:
            self.tasks[task.task_id] = task

    def inject_failures(self, n: int, status: int = 500) -> None:
        """Answer the next n chat requests with `status` (tests of retry and infra handling)."""
        with self._lock:
            self.fail_next.extend([status] * n)

    # -- task lookup and replies
    def _find_task(self, headers, body: dict):
        tid = headers.get("x-clawgym-task")
        model = str(body.get("model") or "")
        if not tid and "/" in model and model.split("/", 1)[0] in ("oracle", "noop", "program"):
            tid = model.split("/", 1)[1]
        if tid and tid in self.tasks:
            return self.tasks[tid]
        users = [text_of(m.get("content")) for m in body.get("messages", []) if m.get("role") == "user"]
        best = None
        for t in list(self.tasks.values()):
            instr = t.instruction.strip()
            longer = best is None or len(instr) > len(best.instruction.strip())
            if instr and longer and any(instr in u for u in users):
                best = t
        return best

    def reply(self, kind: str, task, body: dict) -> dict:
        messages = body.get("messages") or []
        if kind == "noop":
            return {"role": "assistant", "content": NOOP_TEXT}
        if task is None:
            return {"role": "assistant", "content": "oracle: unknown task (no X-Clawgym-Task header, "
                                                    "model oracle/<task_id> or known instruction)"}
        # the program teacher replays the program synthesis recorded with the task (Task.program_reference), else
        # the reference: task data only, nothing imported from clawgym.synth
        ref = list((task.program_reference if kind == "program" else None) or task.reference or [])
        done = sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")
        if done >= len(ref):
            return {"role": "assistant", "content": FINAL_TEXT}
        tc = ref[done]
        name, args = adapt_call(tc.name, dict(tc.arguments), body.get("tools"))
        cid = "call_" + hashlib.sha1(f"{task.task_id}:{done}".encode()).hexdigest()[:16]
        return {"role": "assistant", "content": None,
                "tool_calls": [{"id": cid, "type": "function",
                                "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}]}

    def _make_app(self) -> FastAPI:
        app = FastAPI(title="clawgym policy server")
        server = self

        @app.get("/v1/models")
        async def models():
            return {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "clawgym"}
                                               for m in ("oracle", "noop", "program")]}

        @app.get("/health")
        async def health():
            return {"ok": True}

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            try:
                body = await request.json()
            except Exception:
                return JSONResponse({"error": {"message": "invalid JSON body", "type": "invalid_request_error"}},
                                    status_code=400)
            with server._lock:
                server.requests += 1
                status = server.fail_next.pop(0) if server.fail_next else None
            if status is not None:
                return JSONResponse({"error": {"message": f"injected failure {status}", "type": "server_error"}},
                                    status_code=status)
            model = str(body.get("model") or "oracle")
            kind = "noop" if model.split("/")[0].endswith("noop") or request.headers.get(
                "x-clawgym-policy") == "noop" else "program" if model.split("/")[0] == "program" else "oracle"
            task = server._find_task(request.headers, body)
            msg = server.reply(kind, task, body)
            usage = {"prompt_tokens": approx_tokens(body.get("messages") or []),
                     "completion_tokens": approx_tokens(msg)}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            if body.get("stream"):
                inc = bool((body.get("stream_options") or {}).get("include_usage"))
                return StreamingResponse(sse_chunks(msg, model, usage, inc), media_type="text/event-stream")
            return completion_json(msg, model, usage)

        return app



_SHARED: PolicyServer | None = None
_SHARED_LOCK = threading.Lock()


def shared_policy_server() -> PolicyServer:
    """One oracle/noop server per process, started on first use."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = PolicyServer().start()
        return _SHARED


# ---- endpoints shared by the roles of one graph run ------------------------------------------------------------
@contextlib.contextmanager
def shared_endpoint(spec) -> Iterator[Any]:
    """A live clawgym.agent.policies.Endpoint for `spec` for the block. A kind "local" spec (a registered model or
    checkpoint) holds its model's engine (clawgym.serve.engines): one per model folder and server settings in this
    process, started by the first holder and shared by the others (generator, reviewer, auditor and judge of one
    run, or a run's warm engine), stopped when the last one leaves, also when the block raises."""
    from clawgym.agent.policies import open_endpoint

    with open_endpoint(spec) as ep:
        yield ep


def live_endpoints() -> dict[str, int]:
    """The local engines alive now: key -> holders."""
    from clawgym.serve import engines

    return engines.running()


__all__ = ["ServerThread", "AppServer", "PolicyServer", "shared_policy_server", "adapt_call", "text_of",
           "TOKEN_ENV", "server_token", "BearerAuth", "shared_endpoint", "live_endpoints",
           "approx_tokens", "sse_chunks", "completion_json", "FINAL_TEXT", "NOOP_TEXT"]
