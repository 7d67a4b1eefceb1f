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


def _serve_cmd(launcher: bool = False) -> list[str]:
    if launcher:  # this file as a script: registers the per-sequence attention, then runs `transformers serve`
        return [sys.executable, str(Path(__file__).resolve()), "serve"]
    exe = shutil.which("transformers", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if exe:
        return [exe, "serve"]
    return [sys.executable, "-m", "transformers.cli.transformers", "serve"]


CPU_CB_ARGS = ("--cb-num-blocks", "768", "--cb-block-size", "32", "--cb-max-batch-tokens", "1024")

# glibc malloc for the server process (set unless the caller's environment sets them). Every layer of every step
# allocates a few MB-sized tensors (the paged-cache read, activations); glibc's adaptive mmap threshold handed many
# of them to fresh mmap()s and returned them on free, so each step page-faulted and zeroed them again: about a
# quarter of the CPU time of a 16-stream decode step went to the kernel (sys 31 s of 130 s). A fixed mmap
# threshold (32 MiB, glibc's maximum) and a high trim threshold keep those blocks in the heap for reuse; the
# process's peak RSS is unchanged (2.4 GB at 16 streams), freed memory is just not handed back between steps.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024), "MALLOC_TRIM_THRESHOLD_": str(1024 * 1024 * 1024)}


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
                 extra_args: list[str] | None = None, per_sequence_attention: bool = True):
        self.model_dir = str(Path(model_dir).resolve())
        if not (Path(self.model_dir) / "config.json").exists():
            raise FileNotFoundError(f"{self.model_dir}: not an HF model folder (no config.json)")
        self.port = port
        self.host = host
        self.continuous_batching = continuous_batching
        self.device, self.dtype = device, dtype
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = list(extra_args or [])
        # continuous batching: attention per sequence (`cb_sdpa_attention`) instead of transformers' whole-step
        # block-diagonal sdpa; the server then runs through this file's launcher (`_launch`)
        self.per_sequence_attention = per_sequence_attention
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
        launcher = self.continuous_batching and self.per_sequence_attention
        cmd = _serve_cmd(launcher) + [self.model_dir, "--host", self.host, "--port", str(self.port),
                                      "--device", self.device, "--dtype", self.dtype, "--log-level", "warning"]
        cmd.append("--continuous-batching" if self.continuous_batching else "--no-continuous-batching")
        extra = list(self.extra_args)
        if self.continuous_batching and not _has_cuda(self.device) and not any(a.startswith("--cb-") for a in extra):
            # transformers' default KV-cache sizing for continuous batching grew to ~10 GB RSS on CPU and was
            # OOM-killed (every request then failed with a connection error); these bounds keep it near 2.3 GB
            extra += list(CPU_CB_ARGS)
        return cmd + extra

    def environment(self) -> dict[str, str]:
        """The server process's environment: this process's, offline, and `MALLOC_ENV` unless already set."""
        return {**MALLOC_ENV, **os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}

    def start(self) -> str:
        if self._proc is not None:
            return self.base_url
        self.port = self.port or free_port()
        if self._log_path is None:
            fd, p = tempfile.mkstemp(prefix="clawgym-serve-", suffix=".log")
            os.close(fd)
            self._log_path = Path(p)
        self._log_file = open(self._log_path, "ab")
        self._proc = popen_die_with_parent(self.command(), stdout=self._log_file, stderr=subprocess.STDOUT,
                                           env=self.environment(), start_new_session=True)
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


# ---- per-sequence attention for continuous batching on CPU ------------------------------------------------------
# transformers' continuous batching packs every sequence of a step into one row ([1, heads, all queries, head_dim])
# and, with `sdpa` (the only CB attention on a CPU without flash-attn), attends all queries of the step to all keys
# of the step through a block-diagonal mask, after `repeat_kv` copies the keys and values for every query head. A
# decode step of N streams with L-token contexts then costs O(N * N * L) attention work and O(N * L * heads) copies,
# instead of O(N * L): at 16 rollout-shaped streams (~300-token prompts) that was about half of every decode step.
# `cb_sdpa_attention` computes the same attention per sequence, using the `cu_seq_lens_q` / `cu_seq_lens_k`
# boundaries CB passes to every attention call: the one-token (decode) queries of a step in one padded batched SDPA
# call (each sequence only sees its own keys; grouped query heads packed, no copies per head), the multi-token
# (prefill) chunks one call each (causal, or CB's own mask block when a chunk continues a cached prefix). Anything
# else (no CB boundaries, sliding windows, sinks, softcap, dropout, non-causal modules) goes to transformers' own
# sdpa function.
# It is installed with transformers' public extension point, `AttentionInterface.register("sdpa", ...)`, in the
# server process only (`python clawgym/train/serve.py serve ...`, see `_launch`).

_CB_DECODE_INDEX: dict = {}  # (cu_q, cu_k) of the step -> padded gather index; reused by every layer of the step


def _decode_index(cu_q: tuple, cu_k: tuple, device, torch):
    hit = _CB_DECODE_INDEX.get((cu_q, cu_k, device))
    if hit is not None:
        return hit
    rows = [i for i in range(len(cu_q) - 1) if cu_q[i + 1] - cu_q[i] == 1]
    if rows:
        q_pos = torch.tensor([cu_q[i] for i in rows], device=device)
        starts = torch.tensor([cu_k[i] for i in rows], device=device)
        lens = torch.tensor([cu_k[i + 1] - cu_k[i] for i in rows], device=device)
        ar = torch.arange(max(cu_k[i + 1] - cu_k[i] for i in rows), device=device)
        gather = (starts[:, None] + torch.minimum(ar[None, :], lens[:, None] - 1)).reshape(-1)
        valid = (ar[None, :] < lens[:, None])[:, None, None, :]  # [B, 1, 1, Lmax]
        contiguous = q_pos.numel() == cu_q[-1]  # every query of the step is a decode query
        hit = (rows, q_pos, gather, valid, contiguous)
    else:
        hit = (rows, None, None, None, False)
    _CB_DECODE_INDEX.clear()
    _CB_DECODE_INDEX[(cu_q, cu_k, device)] = hit
    return hit


def cb_sdpa_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, is_causal=None,
                      **kwargs):
    """Drop-in for transformers' ``sdpa`` attention function (same signature and output [1, queries, heads, dim])."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if (not isinstance(cu_q, torch.Tensor) or not isinstance(cu_k, torch.Tensor) or query.shape[0] != 1
            or dropout or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None
            or hasattr(module, "sinks") or getattr(module, "sliding_window", None)
            or not getattr(module, "is_causal", True)
            or key.shape[-1] != value.shape[-1] or query.shape[1] % key.shape[1]):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    qs, ks = tuple(cu_q.tolist()), tuple(cu_k.tolist())
    _, heads, n_q, dim = query.shape
    kv_heads = key.shape[1]
    rep = heads // kv_heads
    rows, q_pos, gather, valid, all_decode = _decode_index(qs, ks, query.device, torch)
    if rows:
        k_flat, v_flat = key[0].transpose(0, 1), value[0].transpose(0, 1)  # [keys, kv_heads, dim], views
        b, l_max = valid.shape[0], valid.shape[-1]
        kp = k_flat.index_select(0, gather).view(b, l_max, kv_heads, dim).transpose(1, 2)
        vp = v_flat.index_select(0, gather).view(b, l_max, kv_heads, dim).transpose(1, 2)
        q = query[0].index_select(1, q_pos).transpose(0, 1).reshape(b, kv_heads, rep, dim)
        o = sdpa(q, kp, vp, attn_mask=valid, scale=scaling).reshape(b, heads, dim)
        if all_decode:
            return o.unsqueeze(0), None
    out = query.new_empty(n_q, heads, dim)
    if rows:
        out.index_copy_(0, q_pos, o)
    for i in range(len(qs) - 1):
        q0, q1, k0, k1 = qs[i], qs[i + 1], ks[i], ks[i + 1]
        if q1 - q0 <= 1:
            continue
        q, k, v = query[:, :, q0:q1], key[:, :, k0:k1], value[:, :, k0:k1]
        if q1 - q0 == k1 - k0:
            o = sdpa(q, k, v, is_causal=True, scale=scaling, enable_gqa=rep > 1)
        else:  # a chunk after cached tokens: causal, aligned bottom-right
            mask = attention_mask[..., q0:q1, k0:k1] if attention_mask is not None else (
                torch.arange(k1 - k0, device=query.device)[None, :]
                <= torch.arange(q1 - q0, device=query.device)[:, None] + (k1 - k0 - (q1 - q0)))
            o = sdpa(q, k, v, attn_mask=mask, scale=scaling, enable_gqa=rep > 1)
        out[q0:q1] = o[0].transpose(0, 1)
    return out.unsqueeze(0), None


def install_cb_attention() -> None:
    """Route transformers' ``sdpa`` attention through `cb_sdpa_attention` in this process."""
    from transformers import AttentionInterface

    AttentionInterface.register("sdpa", cb_sdpa_attention)


def _launch(argv: list[str]) -> None:
    """`python clawgym/train/serve.py serve MODEL ...`: `transformers serve` with the per-sequence CB attention."""
    install_cb_attention()
    from transformers.cli.transformers import main

    sys.argv = ["transformers", *argv]
    main()


__all__ = ["ModelServer", "free_port"]


if __name__ == "__main__":
    # run as a script (not `-m`): clawgym.train's __init__ (TRL, datasets) is not imported; drop this folder from
    # sys.path so its modules cannot shadow top-level ones
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    _launch(sys.argv[1:])
