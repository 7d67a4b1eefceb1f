"""Serve any checkpoint (HF model folder) OpenAI-compatibly with `transformers serve` (DESIGN §6).

    with ModelServer("data/checkpoints/ckpt-a") as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key=srv.token)  # the per-process bearer token
        client.chat.completions.create(model=srv.model_name, messages=..., tools=...)

The folder's tokenizer carries the tool-calling chat template and response template, so the server turns
``<tool_call>{…}</tool_call>`` into OpenAI ``tool_calls``. A tool call the model wrote badly (JSON that does not
parse, no name, no arguments …) comes back as the generated text in ``content`` without ``tool_calls``, status
200, like vLLM does (stock ``transformers serve`` answered 500, which clients read as an endpoint failure):
`install_safe_tool_parsing`, installed by this file's launcher. The server runs in its own process group and is
always torn down on stop() / context exit / interpreter exit (no leaked processes).

Token-exact responses (`install_token_ids`, on by default): a request with ``"return_token_ids": true`` gets the
prompt's and the completion's token ids (``prompt_token_ids``, ``choices[0].token_ids``, vLLM's names), one with
``"logprobs": true`` the sampled tokens' log-probabilities (``choices[0].logprobs.content``, OpenAI's layout).

Only its own clients are answered: the server takes a bearer token (`token`, by default this process's
``clawgym.agent.servers.server_token()``) and answers 401 to a request without ``Authorization: Bearer <token>``
(``/health`` excepted). The token reaches the server process in its environment ($CLAWGYM_SERVER_TOKEN, never on
its command line, which every local user can read); the launcher takes it out of the environment and wraps the
app in ``clawgym.agent.servers.BearerAuth`` (`install_auth`).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Mapping

import httpx

from clawgym.sandbox.spawner import die_with_parent as _die_with_parent  # noqa: F401 (tests)
from clawgym.sandbox.spawner import popen_die_with_parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free when asked."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_cmd(launcher: list[str] | None = None) -> list[str]:
    if launcher:  # this file as a script: installs the CPU kernels named by its flags, then runs `transformers serve`
        return [sys.executable, str(Path(__file__).resolve()), *launcher, "serve"]
    # the console script next to this interpreter first (its venv), then the PATH's
    exe = shutil.which("transformers", path=os.path.dirname(sys.executable)) or shutil.which("transformers")
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


class ModelServer:
    """An OpenAI-compatible server for one model folder. `start()` returns the base URL (…/v1)."""

    def __init__(self, model_dir: str | os.PathLike, port: int | None = None, continuous_batching: bool = True,
                 host: str = "127.0.0.1", device: str = "auto", dtype: str = "auto",
                 startup_timeout_s: float = 180.0, log_path: str | os.PathLike | None = None,
                 extra_args: list[str] | None = None, per_sequence_attention: bool = True,
                 packed_linear: bool = True, safe_tool_parsing: bool = True, token_ids: bool = True,
                 env: Mapping[str, str] | None = None, token: str | None = None):
        from clawgym.agent.servers import server_token

        # the bearer token clients must send (None: this process's server_token(); "": no check)
        self.token = server_token() if token is None else token
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
        # on CPU: every nn.Linear through oneDNN with its weight pre-packed once (`install_packed_linear`)
        self.packed_linear = packed_linear
        # a badly written tool call answered as text (200), not as a server error (`install_safe_tool_parsing`)
        self.safe_tool_parsing = safe_tool_parsing
        # `return_token_ids` / `logprobs` answered with the sampled ids and log-probabilities (`install_token_ids`)
        self.token_ids = token_ids
        # the server's environment before clawgym's settings (`environment`); None: inherit this process's
        self.env = dict(env) if env is not None else None
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
        launcher = ["--safe-tool-parsing"] if self.safe_tool_parsing else []
        if self.token_ids:
            launcher.append("--token-ids")
        if self.continuous_batching and self.per_sequence_attention:
            launcher.append("--cb-attention")
        if self.packed_linear and not _has_cuda(self.device):
            launcher.append("--packed-linear")
        # the token check is installed by the launcher (from the environment): a token needs the launcher
        serve = _serve_cmd(launcher) if launcher or not self.token else \
            [sys.executable, str(Path(__file__).resolve()), "serve"]
        cmd = serve + [self.model_dir, "--host", self.host, "--port", str(self.port),
                       "--device", self.device, "--dtype", self.dtype, "--log-level", "warning"]
        cmd.append("--continuous-batching" if self.continuous_batching else "--no-continuous-batching")
        extra = list(self.extra_args)
        if self.continuous_batching and not _has_cuda(self.device) and not any(a.startswith("--cb-") for a in extra):
            # transformers' default KV-cache sizing for continuous batching grew to ~10 GB RSS on CPU and was
            # OOM-killed (every request then failed with a connection error); these bounds keep it near 2.3 GB
            extra += list(CPU_CB_ARGS)
        return cmd + extra

    def environment(self) -> dict[str, str]:
        """The server process's environment: `env` (default: inherited), offline, and `MALLOC_ENV` unless set."""
        base = os.environ if self.env is None else self.env
        return {**MALLOC_ENV, **base, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}

    def start(self) -> str:
        if self._proc is not None:
            return self.base_url
        self.port = self.port or free_port()
        if self._log_path is None:
            fd, p = tempfile.mkstemp(prefix="clawgym-serve-", suffix=".log")
            os.close(fd)
            self._log_path = Path(p)
        self._log_file = open(self._log_path, "ab")
        env = {k: v for k, v in self.environment().items() if k != AUTH_ENV}
        if self.token:
            env[AUTH_ENV] = self.token  # read (and removed) by the launcher: not on the command line
        self._proc = popen_die_with_parent(self.command(), stdout=self._log_file, stderr=subprocess.STDOUT,
                                           env=env, start_new_session=True)
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

    padded = kwargs.pop(_PADDED_KV, None)  # set by `cb_cache_update` when every query of the step is a decode token
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if padded is not None:
        kp, vp, valid = padded
        b, kv_heads, _, dim = kp.shape
        heads = query.shape[1]
        if query.shape[0] == 1 and query.shape[2] == b and heads % kv_heads == 0 and not dropout and not (
                kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None
                or hasattr(module, "sinks") or getattr(module, "sliding_window", None)
                or not getattr(module, "is_causal", True)):
            q = query[0].transpose(0, 1).reshape(b, kv_heads, heads // kv_heads, dim)
            o = torch.nn.functional.scaled_dot_product_attention(q, kp, vp, attn_mask=valid, scale=scaling)
            return o.reshape(1, b, heads, dim), None
        # anything unusual: unpad to the flat [1, kv_heads, keys, dim] layout and take the general path below
        keep = valid.reshape(-1)
        key, value = (x.transpose(1, 2).reshape(-1, kv_heads, x.shape[-1])[keep].transpose(0, 1).unsqueeze(0)
                      for x in (kp, vp))
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


_PADDED_KV = "_clawgym_padded_kv"
_STOCK_CACHE_UPDATE = None


def cb_cache_update(self, key_states, value_states, layer_idx: int, kwargs: dict):
    """`PagedAttentionCache.update` that reads a decode-only step's keys and values from the cache once.

    Stock CB reads every sequence's cached keys and values of the layer into one flat tensor (`index_select` with
    the step's read index), and the per-sequence attention then gathered them a second time into a padded
    [sequences, kv_heads, longest context, dim] batch. When every query of the step is a decode token, this reads
    the padded batch straight from the cache (the read index composed with the padded gather: one copy instead of
    two) and hands it to `cb_sdpa_attention` in the layer's kwargs; the flat keys and values are never built.
    Every other step (prefill, mixed, sliding-window or block-table layers, another attention function) runs
    transformers' own update."""
    import torch
    from transformers.generation.continuous_batching.cache_allocators.full_attention import (
        FullAttentionCacheAllocator,
    )
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    allocator = self.layer_to_allocator[layer_idx]
    cu_q, cu_k, read_index = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k"), kwargs.get("read_index")
    if (type(allocator) is not FullAttentionCacheAllocator or kwargs.get("block_table") is not None
            or not isinstance(cu_q, torch.Tensor) or not isinstance(cu_k, dict) or read_index is None
            or getattr(self.config, "_attn_implementation", None) != "sdpa"
            or ALL_ATTENTION_FUNCTIONS.get("sdpa") is not cb_sdpa_attention
            or key_states.shape[0] != 1 or key_states.shape[2] != cu_q.numel() - 1):  # not one query per sequence
        return _STOCK_CACHE_UPDATE(self, key_states, value_states, layer_idx, kwargs)
    read = read_index[allocator.index]
    if read.numel() == 0:
        return _STOCK_CACHE_UPDATE(self, key_states, value_states, layer_idx, kwargs)
    kwargs["cu_seq_lens_k"] = cu_k = cu_k[allocator.layer_type].to(torch.int32)
    kwargs["max_length_k"] = kwargs["max_length_k"][allocator.layer_type]
    k_cache, v_cache = allocator._kv_token_views[layer_idx]  # [cache tokens, kv_heads, dim]
    write = kwargs["write_index"][allocator.index]
    k_new, v_new = (x.squeeze(0).transpose(0, 1) for x in (key_states, value_states))
    k_cache.index_copy_(0, write, k_new)
    v_cache.index_copy_(0, write, v_new)
    rows, _, gather, valid, _ = _decode_index(tuple(cu_q.tolist()), tuple(cu_k.tolist()), key_states.device, torch)
    b, l_max = valid.shape[0], valid.shape[-1]
    slots = read.index_select(0, gather)
    kp, vp = (c.index_select(0, slots).view(b, l_max, c.shape[1], c.shape[2]).transpose(1, 2)
              for c in (k_cache, v_cache))
    kwargs[_PADDED_KV] = (kp, vp, valid)
    return key_states, value_states  # not read by cb_sdpa_attention when the padded batch is there


def install_cb_attention() -> None:
    """Route transformers' ``sdpa`` attention through `cb_sdpa_attention` in this process, and CB's cache reads
    of decode-only steps through `cb_cache_update`."""
    global _STOCK_CACHE_UPDATE
    from transformers import AttentionInterface
    from transformers.generation.continuous_batching.cache import PagedAttentionCache

    AttentionInterface.register("sdpa", cb_sdpa_attention)
    if _STOCK_CACHE_UPDATE is None:
        _STOCK_CACHE_UPDATE = PagedAttentionCache.update
        PagedAttentionCache.update = cb_cache_update


def uninstall_cb_attention() -> None:
    """Undo `install_cb_attention` (tests)."""
    global _STOCK_CACHE_UPDATE
    from transformers import AttentionInterface
    from transformers.generation.continuous_batching.cache import PagedAttentionCache
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register("sdpa", sdpa_attention_forward)
    if _STOCK_CACHE_UPDATE is not None:
        PagedAttentionCache.update, _STOCK_CACHE_UPDATE = _STOCK_CACHE_UPDATE, None


# ---- pre-packed oneDNN linear layers on CPU ----------------------------------------------------------------------
# fp32 `F.linear` on CPU is an MKL sgemm that re-packs the weight matrix on every call. At the shapes of decoding
# (a handful of token rows against a 576 x 1536 or 49152 x 576 weight) that packing is a large share of the call,
# and MKL's kernels on this AMD host scale poorly past small M: `python benchmarks/linear_kernels.py` prints the
# ratios. oneDNN (torch's mkldnn backend, the kernels inductor's CPU freezing pass uses for linear layers) can pack a
# weight once into its blocked layout (`torch.ops.mkldnn._reorder_linear_weight`) and reuse it every call
# (`torch.ops.mkldnn._linear_pointwise`). `install_packed_linear` routes `nn.Linear.forward` through that in the
# server process, for inference only (fp32 on CPU, no autograd); the packed copy is keyed by the weight's storage
# and version, so a reloaded or edited weight is packed again. Anything else (GPU, other dtypes, training, an op
# the torch build lacks) runs the stock forward. Results agree with MKL's to float32 rounding (~1e-6 relative).

_PACKED = "_clawgym_packed_weight"
_STOCK_LINEAR_FORWARD = None


def _packable(torch) -> bool:
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


def packed_linear_forward(self, input):
    """`nn.Linear.forward` with the weight packed once for oneDNN (see above)."""
    import torch

    w = self.weight
    if (input.device.type != "cpu" or w.device.type != "cpu" or input.dtype != torch.float32
            or w.dtype != torch.float32 or w.is_sparse or input.is_sparse or input.numel() == 0
            or (torch.is_grad_enabled() and (w.requires_grad or input.requires_grad))
            or self.__dict__.get(_PACKED) is False):
        return _STOCK_LINEAR_FORWARD(self, input)
    key = (w.data_ptr(), w._version, tuple(w.shape))
    hit = self.__dict__.get(_PACKED)
    if hit is None or hit[0] != key:
        try:
            packed = torch.ops.mkldnn._reorder_linear_weight(w.detach())
        except RuntimeError:
            self.__dict__[_PACKED] = False  # this build or layout cannot: stock forward from now on
            return _STOCK_LINEAR_FORWARD(self, input)
        hit = self.__dict__[_PACKED] = (key, packed)
    bias = self.bias.detach() if self.bias is not None else None
    return torch.ops.mkldnn._linear_pointwise(input, hit[1], bias, "none", [], "")


def install_packed_linear() -> bool:
    """Route `nn.Linear.forward` through `packed_linear_forward` in this process; False where oneDNN is missing."""
    global _STOCK_LINEAR_FORWARD
    import torch

    if not _packable(torch):
        return False
    if _STOCK_LINEAR_FORWARD is None:
        _STOCK_LINEAR_FORWARD = torch.nn.Linear.forward
        torch.nn.Linear.forward = packed_linear_forward
    return True


def uninstall_packed_linear() -> None:
    """Undo `install_packed_linear` (tests); packed copies left on modules are ignored by the stock forward."""
    global _STOCK_LINEAR_FORWARD
    import torch

    if _STOCK_LINEAR_FORWARD is not None:
        torch.nn.Linear.forward, _STOCK_LINEAR_FORWARD = _STOCK_LINEAR_FORWARD, None


# ---- tool calls the model wrote badly: text, not a server error --------------------------------------------------
# transformers serve parses the model's `<tool_call>{…}</tool_call>` regions with the tokenizer's response template
# (transformers.utils.chat_parsing). When the model writes a region that is not valid JSON, `content_parsers._json`
# raises ValueError("json parser could not parse region as JSON") out of `ResponseParser._close_current`; valid JSON
# without "name"/"arguments" (or not an object) raises KeyError/TypeError in `cli.serving.utils._normalize_tool_call`.
# Non-streaming, both escape `parse_assistant_message` in `ChatCompletionHandler._non_streaming` and the request
# fails with HTTP 500; streaming, they escape `ResponseParser.feed` inside `CBStreamer.put` / `DirectStreamer.put`
# and the stream ends in an `{"error": …}` event. A client then retries the same greedy request and gives up: the
# model's own mistake became an endpoint failure (excluded as `infra` instead of scored). OpenAI-compatible servers
# (vLLM's tool parsers) answer such output as plain text instead, and so do these wrappers: non-streaming, the
# message is the generated text (special tokens skipped) as `content` with no `tool_calls`; streaming, tool calls
# are held until the stream ends, and when any region failed the text not yet sent goes out as `content` and the
# held calls are dropped. Installed in the server process by the launcher (`--safe-tool-parsing`).


def _valid_tool_call(value) -> bool:
    from transformers.cli.serving.utils import _normalize_tool_call

    try:
        tc = _normalize_tool_call(value)
    except Exception:  # noqa: BLE001 - KeyError/TypeError/ValueError: the model's JSON has the wrong shape
        return False
    return isinstance(tc.name, str) and bool(tc.name.strip()) and isinstance(tc.arguments, str)


class SafeResponseParser:
    """Wraps a `ResponseParser` for a streamed generation (`feed` / `finalize` / `initial_events`) so that no
    badly written tool call raises: see above."""

    def __init__(self, parser, special_tokens=()):
        self._parser = parser
        self._special = sorted({t for t in special_tokens if t}, key=len, reverse=True)
        self._raw: list[str] = []  # every generated chunk fed
        self._sent: list[str] = []  # content text passed on from generated chunks
        self._calls: list[dict] = []  # closed, valid tool-call regions, held until finalize
        self.failure: str | None = None
        self.initial_events = self._pass(parser.initial_events, generated=False)

    def _fail(self, why) -> None:
        if self.failure is None:
            self.failure = f"{type(why).__name__}: {why}" if isinstance(why, BaseException) else str(why)

    def _pass(self, events, generated: bool = True) -> list[dict]:
        out = []
        for ev in events:
            if ev.get("type") == "region_close" and ev.get("field") == "tool_calls":
                if not _valid_tool_call(ev.get("value")):
                    self._fail(f"tool call with the wrong shape: {str(ev.get('value'))[:200]}")
                    break
                self._calls.append(ev)
                continue
            if (generated and ev.get("type") == "region_chunk" and ev.get("field") == "content"
                    and not ev.get("dirty") and ev.get("text")):
                self._sent.append(ev["text"])
            out.append(ev)
        return out

    def feed(self, text: str) -> list[dict]:
        self._raw.append(text or "")
        if self.failure is not None:
            return []
        try:
            events = self._parser.feed(text)
        except Exception as e:  # noqa: BLE001 - the model's text, not the server, is wrong
            self._fail(e)
            return []
        return self._pass(events)

    def finalize(self) -> tuple[dict, list[dict]]:
        msg: dict = {}
        out: list[dict] = []
        if self.failure is None:
            try:
                msg, events = self._parser.finalize()
            except Exception as e:  # noqa: BLE001 - e.g. a tool call cut by max_tokens
                self._fail(e)
            else:
                out = self._pass(events)
        if self.failure is None:
            return msg, out + self._calls
        text = "".join(self._raw)
        for t in self._special:
            text = text.replace(t, "")
        sent = "".join(self._sent)
        at = 0 if text.startswith(sent) else text.find(sent) if sent else 0
        rest = text[at + len(sent):] if at >= 0 else text
        tail = [{"type": "region_chunk", "field": "content", "text": rest}] if rest else []
        return {"role": "assistant", "content": sent + rest}, out + tail


def _safe_parse_assistant_message(stock):
    def parse_assistant_message(*args, **kwargs):
        cleaned = kwargs.get("cleaned_content", args[4] if len(args) > 4 else "")
        try:
            content, reasoning, calls = stock(*args, **kwargs)
        except Exception:  # noqa: BLE001 - see above: the model's tool call does not parse
            return cleaned, None, None
        if calls and not all(isinstance(c.name, str) and c.name.strip() and isinstance(c.arguments, str)
                             for c in calls):
            return cleaned, None, None
        return content, reasoning, calls

    parse_assistant_message._clawgym_stock = stock
    return parse_assistant_message


def _safe_build_response_parser(stock):
    def build_response_parser(processor, *args, **kwargs):
        parser = stock(processor, *args, **kwargs)
        if parser is None:
            return None
        tok = getattr(processor, "tokenizer", processor)
        return SafeResponseParser(parser, getattr(tok, "all_special_tokens", ()) or ())

    build_response_parser._clawgym_stock = stock
    return build_response_parser


def _serving_modules():
    from transformers.cli.serving import chat_completion, response

    return chat_completion, response


def install_safe_tool_parsing() -> None:
    """Answer badly written tool calls as text in this process's `transformers serve` handlers (see above)."""
    for mod in _serving_modules():
        if not hasattr(mod.parse_assistant_message, "_clawgym_stock"):
            mod.parse_assistant_message = _safe_parse_assistant_message(mod.parse_assistant_message)
        if not hasattr(mod.build_response_parser, "_clawgym_stock"):
            mod.build_response_parser = _safe_build_response_parser(mod.build_response_parser)


def uninstall_safe_tool_parsing() -> None:
    """Undo `install_safe_tool_parsing` (tests)."""
    for mod in _serving_modules():
        for name in ("parse_assistant_message", "build_response_parser"):
            stock = getattr(getattr(mod, name), "_clawgym_stock", None)
            if stock is not None:
                setattr(mod, name, stock)


# ---- token-exact responses: prompt/completion token ids and sampled log-probabilities -----------------------------
# RL wants the tokens that were sampled, not a re-tokenization of the text (`prompt_token_ids` may differ from a
# re-render of the conversation, and a decoded-then-re-encoded completion may split into other tokens). Like vLLM,
# a chat-completion request may ask for them (non-streaming requests; a streaming request ignores both):
#   "return_token_ids": true  -> the response's top level gets "prompt_token_ids" (the ids the chat template
#                                rendered, as generated from) and the choice "token_ids" (the generated ids, the
#                                end-of-turn token included)
#   "logprobs": true          -> the choice gets OpenAI's "logprobs": {"content": [{"token", "logprob", "bytes",
#                                "top_logprobs": []}, ...]}, one entry per generated token: its log-probability
#                                under the distribution it was drawn from (after temperature; greedy: the model's)
# Continuous batching reports the log-probabilities of its own sampling step (ContinuousBatchingConfig
# .return_logprobs, switched on by this launcher); the sequential path scores the generated tokens with one forward
# pass on its inference thread. Installed in the server process by the launcher (`--token-ids`).

TOKEN_FIELDS = ("return_token_ids",)  # request fields this extension reads (and removes before validation)
_TOKEN_BOX = None  # contextvars.ContextVar holding the current request's capture dict


def _token_box():
    global _TOKEN_BOX
    if _TOKEN_BOX is None:
        import contextvars

        _TOKEN_BOX = contextvars.ContextVar("clawgym_token_box", default=None)
    return _TOKEN_BOX


def _flat_ids(ids) -> list[int]:
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return [int(i) for i in ids]


def _forward_logprobs(model, prompt_ids: list[int], completion_ids: list[int], gen_config) -> list[float]:
    """log p(token) of each completion token given what precedes it, under the sampling distribution of
    `gen_config` (logits / temperature when sampling)."""
    import torch

    if not completion_ids:
        return []
    ids = torch.tensor([prompt_ids + completion_ids], device=model.device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1].float()
    if getattr(gen_config, "do_sample", False) and (gen_config.temperature or 1.0) not in (0.0, 1.0):
        logits = logits / float(gen_config.temperature)
    lp = torch.log_softmax(logits, dim=-1)
    return lp.gather(1, torch.tensor(completion_ids, device=lp.device)[:, None])[:, 0].tolist()


def _wrap_sequential_generate(stock):
    async def generate_non_streaming(self, model, processor, inputs, gen_config, request_id):
        text, input_len, generated = await stock(self, model, processor, inputs, gen_config, request_id)
        box = _token_box().get()
        if box is not None:
            prompt, completion = _flat_ids(inputs["input_ids"]), _flat_ids(generated)
            box.update(prompt=prompt, completion=completion, tokenizer=getattr(processor, "tokenizer", processor))
            if box.get("want_logprobs"):
                box["logprobs"] = await self.async_submit(_forward_logprobs, model, prompt, completion, gen_config)
        return text, input_len, generated

    generate_non_streaming._clawgym_stock = stock
    return generate_non_streaming


def _cb_generate_non_streaming(self, model, processor, inputs, gen_config, request_id):
    """`CBGenerateManager.generate_non_streaming` that also keeps the result's sampled log-probabilities."""
    import asyncio

    from transformers.cli.serving.utils import CBWorkerDeadError

    async def run():
        cb = self._cb
        if cb is None:
            raise RuntimeError("CB manager not initialized. Call `init_cb()` first.")
        self._check_alive(request_id)
        input_ids = inputs["input_ids"]
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def _on_result(result):
            if not future.done():
                future.set_result(result)

        cb.register_result_handler(request_id, _on_result)
        cb.add_request(input_ids, request_id=request_id, max_new_tokens=gen_config.max_new_tokens, streaming=False,
                       eos_token_id=gen_config.eos_token_id)
        result = await future
        if result.error is not None:
            if cb.background_thread_status.fatal_error is not None:
                raise CBWorkerDeadError(f"CB worker died during request {request_id}: {result.error}")
            raise RuntimeError(f"CB generation failed for {request_id}: {result.error}")
        generated = result.generated_tokens
        box = _token_box().get()
        if box is not None:
            lps = list(getattr(result, "logprobs", None) or [])
            box.update(prompt=_flat_ids(input_ids), completion=_flat_ids(generated),
                       tokenizer=getattr(processor, "tokenizer", processor),
                       logprobs=[float(x) for x in lps] if len(lps) == len(generated) else None)
        return processor.decode(generated, skip_special_tokens=True), len(input_ids), generated

    return run()


def _cb_init_with_logprobs(stock):
    def __init__(self, cb_config=None):
        from transformers import ContinuousBatchingConfig

        cb_config = cb_config if cb_config is not None else ContinuousBatchingConfig()
        cb_config.return_logprobs = True  # a softmax per step; the sampled tokens are unchanged
        stock(self, cb_config)

    __init__._clawgym_stock = stock
    return __init__


def _token_entries(tok, ids: list[int], logprobs: list[float]) -> list[dict]:
    out = []
    for i, lp in zip(ids, logprobs):
        piece = tok.decode([i])
        out.append({"token": piece, "logprob": float(lp), "bytes": list(piece.encode("utf-8", "replace")),
                    "top_logprobs": []})
    return out


def _wrap_handle_request(stock):
    async def handle_request(self, body, request_id):
        from fastapi.responses import JSONResponse

        want_ids = bool(body.pop("return_token_ids", False))
        want_lp = body.get("logprobs") is True
        if not (want_ids or want_lp) or body.get("stream"):
            return await stock(self, body, request_id)
        body.pop("top_logprobs", None)
        box = {"want_logprobs": want_lp}
        var = _token_box()
        token = var.set(box)
        try:
            resp = await stock(self, body, request_id)
        finally:
            var.reset(token)
        if not isinstance(resp, JSONResponse) or resp.status_code != 200 or "completion" not in box:
            return resp
        import json as _json

        data = _json.loads(resp.body)
        choice = data["choices"][0]
        if want_ids:
            data["prompt_token_ids"] = box["prompt"]
            choice["token_ids"] = box["completion"]
        if want_lp:
            lps = box.get("logprobs")
            choice["logprobs"] = ({"content": _token_entries(box["tokenizer"], box["completion"], lps)}
                                  if lps is not None else None)
        return JSONResponse(data, status_code=resp.status_code)

    handle_request._clawgym_stock = stock
    return handle_request


def install_token_ids() -> None:
    """Answer `return_token_ids` / `logprobs` in this process's chat-completions handler (see above)."""
    from transformers.cli.serving import utils
    from transformers.cli.serving.chat_completion import ChatCompletionHandler

    if not hasattr(ChatCompletionHandler.handle_request, "_clawgym_stock"):
        ChatCompletionHandler.handle_request = _wrap_handle_request(ChatCompletionHandler.handle_request)
    if not hasattr(utils.GenerateManager.generate_non_streaming, "_clawgym_stock"):
        utils.GenerateManager.generate_non_streaming = _wrap_sequential_generate(
            utils.GenerateManager.generate_non_streaming)
    if not hasattr(utils.CBGenerateManager.__init__, "_clawgym_stock"):
        stock = utils.CBGenerateManager.generate_non_streaming
        utils.CBGenerateManager.__init__ = _cb_init_with_logprobs(utils.CBGenerateManager.__init__)
        _cb_generate_non_streaming._clawgym_stock = stock
        utils.CBGenerateManager.generate_non_streaming = _cb_generate_non_streaming


def uninstall_token_ids() -> None:
    """Undo `install_token_ids` (tests)."""
    from transformers.cli.serving import utils
    from transformers.cli.serving.chat_completion import ChatCompletionHandler

    for owner, name in ((ChatCompletionHandler, "handle_request"), (utils.GenerateManager, "generate_non_streaming"),
                        (utils.CBGenerateManager, "__init__"), (utils.CBGenerateManager, "generate_non_streaming")):
        stock = getattr(getattr(owner, name), "_clawgym_stock", None)
        if stock is not None:
            setattr(owner, name, stock)


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


LAUNCHER_FLAGS = {"--cb-attention": install_cb_attention, "--packed-linear": install_packed_linear,
                  "--safe-tool-parsing": install_safe_tool_parsing, "--token-ids": install_token_ids}


def _exit_when_orphaned(poll_s: float = 0.5) -> None:
    """Exit at once when the process that started this server is gone. PR_SET_PDEATHSIG delivers SIGTERM, but
    uvicorn answers SIGTERM with a graceful shutdown that waits for every request in flight — a generation of
    thousands of tokens on CPU kept an orphaned server busy for many minutes. A daemon thread watches the parent
    pid instead and leaves with os._exit."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(0)

    threading.Thread(target=watch, name="clawgym-orphan-watch", daemon=True).start()


def _launch(argv: list[str]) -> None:
    """`python clawgym/train/serve.py [--safe-tool-parsing] [--token-ids] [--cb-attention] [--packed-linear] serve
    MODEL ...`: `transformers serve` with badly written tool calls answered as text, token ids / log-probabilities
    on request, the per-sequence CB attention and/or the pre-packed oneDNN linear layers installed; with
    $CLAWGYM_SERVER_TOKEN set, only requests bearing it are answered (`install_auth`)."""
    while argv and argv[0] in LAUNCHER_FLAGS:
        LAUNCHER_FLAGS[argv.pop(0)]()
    token = os.environ.pop(AUTH_ENV, "")  # this process's entry point: the token, then out of the environment
    if token:
        install_auth(token)
    _exit_when_orphaned()
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
