"""Serve any checkpoint (HF model folder) OpenAI-compatibly with `transformers serve` (DESIGN §6).

    with ModelServer("data/checkpoints/ckpt-a") as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="none")
        client.chat.completions.create(model=srv.model_name, messages=..., tools=...)

The folder's tokenizer carries the tool-calling chat template and response template, so the server turns
``<tool_call>{…}</tool_call>`` into OpenAI ``tool_calls``. The server runs in its own process group and is
always torn down on stop() / context exit / interpreter exit (no leaked processes).
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_cmd() -> list[str]:
    exe = shutil.which("transformers", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if exe:
        return [exe, "serve"]
    return [sys.executable, "-m", "transformers.cli.transformers", "serve"]


CPU_CB_ARGS = ("--cb-num-blocks", "768", "--cb-block-size", "32", "--cb-max-batch-tokens", "1024")


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


def _die_with_parent() -> None:  # runs in the child before exec: SIGTERM when the parent dies (even by SIGKILL)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except Exception:  # pragma: no cover
        pass


_SPAWNER: "queue.SimpleQueue | None" = None
_SPAWNER_LOCK = threading.Lock()


def _spawner_loop(q: "queue.SimpleQueue") -> None:
    while True:
        fn, fut = q.get()
        if fut.set_running_or_notify_cancel():
            try:
                fut.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                fut.set_exception(e)


def popen_die_with_parent(argv: list[str], **kwargs) -> subprocess.Popen:
    """`subprocess.Popen` whose child gets SIGTERM when this process dies (even by SIGKILL).

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process: a server started
    from a worker thread (a Dagster step's thread pool, a ThreadPoolExecutor) would be killed as soon as that
    thread finished. So the fork happens on one daemon thread that lives as long as the process."""
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = queue.SimpleQueue()
            threading.Thread(target=_spawner_loop, args=(_SPAWNER,), name="clawgym-spawner", daemon=True).start()
        q = _SPAWNER
    fut: Future = Future()
    q.put((lambda: subprocess.Popen(argv, preexec_fn=_die_with_parent, **kwargs), fut))
    return fut.result()


class ModelServer:
    """An OpenAI-compatible server for one model folder. `start()` returns the base URL (…/v1)."""

    def __init__(self, model_dir: str | os.PathLike, port: int | None = None, continuous_batching: bool = True,
                 host: str = "127.0.0.1", device: str = "auto", dtype: str = "auto",
                 startup_timeout_s: float = 180.0, log_path: str | os.PathLike | None = None,
                 extra_args: list[str] | None = None):
        self.model_dir = str(Path(model_dir).resolve())
        if not (Path(self.model_dir) / "config.json").exists():
            raise FileNotFoundError(f"{self.model_dir}: not an HF model folder (no config.json)")
        self.port = port
        self.host = host
        self.continuous_batching = continuous_batching
        self.device, self.dtype = device, dtype
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = list(extra_args or [])
        self._log_path = Path(log_path) if log_path else None
        self._log_file = None
        self._proc: subprocess.Popen | None = None

    @property
    def model_name(self) -> str:
        """The name requests use (the folder path, which `transformers serve` accepts)."""
        return self.model_dir

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def command(self) -> list[str]:
        cmd = _serve_cmd() + [self.model_dir, "--host", self.host, "--port", str(self.port),
                              "--device", self.device, "--dtype", self.dtype, "--log-level", "warning"]
        cmd.append("--continuous-batching" if self.continuous_batching else "--no-continuous-batching")
        extra = list(self.extra_args)
        if self.continuous_batching and not _has_cuda(self.device) and not any(a.startswith("--cb-") for a in extra):
            # transformers' default KV-cache sizing for continuous batching grew to ~10 GB RSS on CPU and was
            # OOM-killed (every request then failed with a connection error); these bounds keep it near 2.3 GB
            extra += list(CPU_CB_ARGS)
        return cmd + extra

    def start(self) -> str:
        if self._proc is not None:
            return self.base_url
        self.port = self.port or free_port()
        if self._log_path is None:
            fd, p = tempfile.mkstemp(prefix="clawgym-serve-", suffix=".log")
            os.close(fd)
            self._log_path = Path(p)
        self._log_file = open(self._log_path, "ab")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
        self._proc = popen_die_with_parent(self.command(), stdout=self._log_file, stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True)
        atexit.register(self.stop)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self.base_url

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited with {self._proc.returncode}: {self.log_tail()}")
            if self.healthy():
                return
            time.sleep(0.5)
        raise TimeoutError(f"transformers serve not healthy after {self.startup_timeout_s}s: {self.log_tail()}")

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.root_url}/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self._log_path.read_text(errors="replace")[-n:] if self._log_path else ""
        except OSError:
            return ""

    def stop(self) -> None:
        p, self._proc = self._proc, None
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
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

    def __enter__(self) -> "ModelServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["ModelServer", "free_port"]
