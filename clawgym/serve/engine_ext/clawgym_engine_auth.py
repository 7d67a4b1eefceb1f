"""The bearer-token check of the embedded engine, loaded by the vLLM server process itself
(``--middleware clawgym_engine_auth.EngineAuth``, this folder on its PYTHONPATH; vLLM adds the class with
``app.add_middleware``). It runs in the engine's own venv, which does not hold clawgym: it loads
clawgym/serve/auth.py (standard library only) by its path.

The token is read from $CLAWGYM_SERVER_TOKEN when this module is imported and taken out of the environment then.
Every route but ``/health`` (the launcher's probe) answers 401 without ``Authorization: Bearer <token>``; vLLM's
own ``--api-key`` leaves /tokenize, /detokenize, /metrics, /version and other routes outside /v1 open."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the checker reads the module itself; the engine's venv (no clawgym) loads it by its path
    from clawgym.serve import auth as _auth
else:
    _spec = importlib.util.spec_from_file_location("clawgym_serve_auth",
                                                   Path(__file__).resolve().parents[1] / "auth.py")
    _auth = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_auth)

_TOKEN = os.environ.pop(_auth.AUTH_ENV, "")


class EngineAuth(_auth.BearerAuth):
    """clawgym.serve.auth.BearerAuth with this process's token (an empty one refuses to start: no open server)."""

    def __init__(self, app):
        super().__init__(app, _TOKEN)
