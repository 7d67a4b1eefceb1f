"""The bearer token of this process's local servers (policy server, embedded model servers): the token and the ASGI
middleware that checks it. Standard library only: the engine's process loads this file by its path
(engine_ext/clawgym_engine_auth.py) in a venv without clawgym; clawgym.agent.servers re-exports it."""

from __future__ import annotations

import base64
import hmac
import json
import os
import secrets as _secrets
import threading
from collections.abc import Iterable

# ---- the per-process token of the local servers ------------------------------------------------------
TOKEN_ENV = "CLAWGYM_SERVER_TOKEN"  # named like a secret: clawgym.agent.secrets redacts its value everywhere
_TOKEN_LOCK = threading.Lock()


def server_token() -> str:
    """The token of this process's local servers (policy server, embedded model servers): $CLAWGYM_SERVER_TOKEN
    when set (inherited from the process that started this one), else a fresh random one, put there."""
    # this read stays: the token is a secret shared through the process environment on purpose: inherited from the
    # process that started this one, put there for the servers and clients this one starts, and named by endpoints
    # as their api_key_env (read at the moment of use, never stored in a config)
    with _TOKEN_LOCK:
        tok = os.environ.get(TOKEN_ENV, "")
        if len(tok) < 16:
            tok = "cgs-" + _secrets.token_urlsafe(32)
            os.environ[TOKEN_ENV] = tok
        return tok


class BearerAuth:
    """ASGI middleware: a request whose ``Authorization`` is not ``Bearer <token>`` gets 401 (``open_paths``,
    the health probe, excepted). ``Basic`` credentials whose password is the token count too: a client that takes
    only a URL (``http://clawgym:<token>@host:port``, as TRL's vLLM client does) sends them so. The token is
    compared in constant time and never echoed or logged."""

    def __init__(self, app, token: str, open_paths: Iterable[str] = ("/health",)):
        if not token:
            raise ValueError("BearerAuth needs a non-empty token")
        self.app, self._token, self.open_paths = app, token.encode(), frozenset(open_paths)

    def authorized(self, headers) -> bool:
        auth = b""
        for k, v in headers or ():
            if k.lower() == b"authorization":
                auth = v
                break
        if auth[:6].lower() == b"basic ":  # user:token (a client that only knows URL credentials: TRL's)
            try:
                given = base64.b64decode(auth[6:].strip(), validate=True).partition(b":")[2]
            except ValueError:
                given = b""
        else:
            given = auth[7:].strip() if auth[:7].lower() == b"bearer " else b""
        return hmac.compare_digest(given, self._token)

    async def __call__(self, scope, receive, send):
        if scope.get("type") in ("http", "websocket") and scope.get("path") not in self.open_paths \
                and not self.authorized(scope.get("headers")):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            body = json.dumps({"error": {"message": "missing or wrong bearer token", "type": "unauthorized"}}).encode()
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


AUTH_ENV = TOKEN_ENV  # the name the launcher uses

