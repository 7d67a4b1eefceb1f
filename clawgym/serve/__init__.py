"""The embedded OpenAI-compatible model server: vLLM, in its own virtual environment, behind clawgym's launcher.

- `launcher`: `ModelServer` (start / health / teardown of one engine process group per model folder; the engine's
  venv, dtype, KV cache, compile cache and flags) and `engine_python` (where the engine's venv is);
- `auth`: the bearer token of this process's local servers and the ASGI middleware that checks it, which the
  engine process loads itself (`engine_ext/clawgym_engine_auth.py`);
- `engines`: one engine per model in a process, shared and reference-counted (`hold`), startable ahead of need
  (`warm`: a run starts its engine while it synthesizes and trains).

Nothing here imports vLLM or training code: the engine is spoken to over HTTP only.
"""

from clawgym.serve.launcher import EngineNotInstalled, ModelServer, engine_python, free_port

__all__ = ["EngineNotInstalled", "ModelServer", "engine_python", "free_port"]
