"""A scripted hostile agent: a real local OpenAI-compatible chat-completions server (FastAPI + uvicorn in a
thread, clawgym.agent.servers.ServerThread) that answers each request with the next fixed step of a script,
then with a final text answer.

A step is a list of tool calls ``(name, arguments)`` (one assistant message with those calls) or a raw
assistant ``message`` dict (to send malformed replies, e.g. a tool call without ``function``).
The turn is derived from the request itself (number of assistant messages already in it), so the server is
stateless per conversation and a rollout-level retry replays the script from the start.

Huge replies without building them in memory: put :data:`FILL` anywhere in a step (the text of a raw
message, a tool call's argument value) or as ``final`` and construct with ``fill_chars=N``: each FILL in the
reply's JSON is replaced by N filler characters, streamed in pieces (a chunked body; memory stays small on
the server's side, so a test can measure the client's).

Helpers build exec commands that plant files anywhere the sandbox user may write (the ``write`` tool is
confined to the workspace and /tmp): :func:`put` writes bytes through base64, so no quoting can break.
"""

import base64
import json
import shlex
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from clawgym.agent.policies import Endpoint
from clawgym.agent.servers import ServerThread

ToolCall = tuple  # (name, arguments dict)
Step = list | dict  # list[ToolCall] | raw assistant message
FINAL = "Done. I finished the task."
FILL = "@@clawgym-fill@@"  # replaced by `fill_chars` filler characters in the reply as sent


def put(path: str, content: str | bytes, mode: int = 0o644) -> str:
    """A shell command that writes `content` to `path` (parents made; ~ is $HOME), then chmods it."""
    data = content.encode() if isinstance(content, str) else content
    b64 = base64.b64encode(data).decode()
    p = '"$HOME"/' + shlex.quote(path[2:]) if path.startswith("~/") else shlex.quote(path)
    return (f'mkdir -p "$(dirname -- {p})" && printf %s {b64} | base64 -d > {p} && chmod {mode:o} {p}')


def exec_call(command: str, timeout: float | None = None) -> ToolCall:
    args: dict[str, Any] = {"command": command}
    if timeout is not None:
        args["timeout"] = timeout
    return ("exec", args)


def write_call(path: str, content: str) -> ToolCall:
    return ("write", {"path": path, "content": content})


def _message(step: Step, turn: int) -> dict:
    if isinstance(step, dict):
        return step
    calls = []
    for i, (name, args) in enumerate(step):
        calls.append({"id": f"call_{turn}_{i}_{uuid.uuid4().hex[:6]}", "type": "function",
                      "function": {"name": name, "arguments": json.dumps(args)}})
    return {"role": "assistant", "content": None, "tool_calls": calls}


class HostileEndpoint:
    """``with HostileEndpoint(steps) as ep: run_rollout(task, ep.endpoint, factory)``."""

    def __init__(self, steps: Iterable[Step], final: str = FINAL, fill_chars: int = 0, fill_char: str = "x"):
        self.steps = list(steps)
        self.final = final
        self.fill_chars, self.fill_char = fill_chars, fill_char
        self.bytes_sent = 0  # filler bytes produced (not necessarily read: the server may outrun a client that hung up)
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._srv = None  # ServerThread while serving

    def reply(self, body: dict) -> dict:
        with self._lock:
            self.requests.append(body)
        turn = sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant")
        if turn < len(self.steps):
            msg = _message(self.steps[turn], turn)
            finish = "tool_calls"
        else:
            msg = {"role": "assistant", "content": self.final}
            finish = "stop"
        return {"id": "chatcmpl-" + uuid.uuid4().hex[:20], "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "hostile"),
                "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request):  # noqa: ANN202
            data = self.reply(await request.json())
            if not self.fill_chars:
                return JSONResponse(data)
            text = json.dumps(data)
            if FILL not in text:
                return JSONResponse(data)
            return StreamingResponse(self._filled(text.split(FILL)), media_type="application/json")

        return app

    async def _filled(self, pieces: list):
        piece = (self.fill_char * 65536).encode()
        for i, p in enumerate(pieces):
            yield p.encode()
            if i + 1 < len(pieces):
                left = self.fill_chars
                while left > 0:
                    chunk = piece if left >= 65536 else piece[:left]
                    left -= len(chunk)
                    self.bytes_sent += len(chunk)
                    yield chunk

    @property
    def endpoint(self) -> Endpoint:
        assert self._srv is not None, "server not started"
        return Endpoint(base_url=self._srv.base_url, model="hostile", policy="hostile")

    def __enter__(self) -> "HostileEndpoint":
        self._srv = ServerThread(self._app()).start()
        return self

    def __exit__(self, *exc) -> None:
        if self._srv is not None:
            self._srv.stop()
            self._srv = None


__all__ = ["HostileEndpoint", "put", "exec_call", "write_call", "FINAL", "FILL"]
