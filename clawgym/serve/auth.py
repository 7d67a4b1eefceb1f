"""The bearer token: only the server's own clients are answered (a patch of uvicorn.Config)."""

from __future__ import annotations

# ---- the bearer token --------------------------------------------------------------------------------------------
AUTH_ENV = "CLAWGYM_SERVER_TOKEN"  # = clawgym.agent.servers.TOKEN_ENV (not imported: the launcher stays light)


def install_auth(token: str) -> None:
    """Every ASGI app this process serves through uvicorn (`transformers serve`'s) answers 401 to a request without
    ``Authorization: Bearer <token>`` (``/health`` excepted): uvicorn.Config wraps its app in BearerAuth."""
    import uvicorn

    from clawgym.agent.servers import BearerAuth

    stock = uvicorn.Config.__init__
    if getattr(stock, "_clawgym_auth", False):
        return

    def __init__(self, app, *args, **kwargs):
        stock(self, app if isinstance(app, (str, BearerAuth)) else BearerAuth(app, token), *args, **kwargs)

    __init__._clawgym_auth = True
    uvicorn.Config.__init__ = __init__


