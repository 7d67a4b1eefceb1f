"""The launcher: serve any checkpoint (HF model folder) OpenAI-compatibly with `transformers serve`.

    with ModelServer("data/checkpoints/ckpt-a") as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key=srv.token)  # the per-process bearer token
        client.chat.completions.create(model=srv.model_name, messages=..., tools=...)

The folder's tokenizer carries the tool-calling chat template and response template, so the server turns
``<tool_call>{…}</tool_call>`` into OpenAI ``tool_calls``. A tool call the model wrote badly (JSON that does not
parse, no name, no arguments …) comes back as the generated text in ``content`` without ``tool_calls``, status
200, like vLLM does (stock ``transformers serve`` answered 500, which clients read as an endpoint failure):
`clawgym.serve.safe_tools`, installed by this file's launcher. The server runs in its own process group and is
always torn down on stop() / context exit / interpreter exit (no leaked processes).

Token-exact responses (`clawgym.serve.token_ids`, on by default): a request with ``"return_token_ids": true`` gets the
prompt's and the completion's token ids (``prompt_token_ids``, ``choices[0].token_ids``, vLLM's names), one with
``"logprobs": true`` the sampled tokens' log-probabilities (``choices[0].logprobs.content``, OpenAI's layout).

Only its own clients are answered: the server takes a bearer token (`token`, by default this process's
``clawgym.serve.auth.server_token()``) and answers 401 to a request without ``Authorization: Bearer <token>``
(``/health`` excepted). The token reaches the server process in its environment ($CLAWGYM_SERVER_TOKEN, never on
its command line, which every local user can read); the launcher takes it out of the environment and wraps the
app in ``clawgym.serve.auth.BearerAuth``.
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

from clawgym.serve.auth import AUTH_ENV, install_auth
from clawgym.serve.cb_attention import install_cb_attention
from clawgym.serve.context_limit import install_context_limit
from clawgym.serve.packed_linear import install_packed_linear
from clawgym.serve.safe_tools import install_safe_tool_parsing
from clawgym.serve.served_prefix import install_served_prefix
from clawgym.serve.structured import install_structured_output
from clawgym.serve.token_ids import install_token_ids


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
# OpenMP threads that sleep while they wait (the default spins): on a shared 2-core box the spinning threads of
# a server decoding one stream took the cores from everything else and from each other (measured: 0.9-1.2
# tok/s at 1 stream under load vs 7.7-13.1 passive; benchmarks/serve_engine.py --ours-as-shipped compares)
OMP_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


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
    """The --dtype the server gets. "auto": $CLAWGYM_SERVE_DTYPE if set; on a GPU the model's own dtype
    ("auto"); on a CPU bfloat16 where it does bfloat16 natively (weights and, since CB's paged cache takes the
    model's dtype, the KV cache: half the bytes a decode step reads), float32 elsewhere. Anything else: as given."""
    if dtype != "auto":
        return dtype
    env = os.environ if env is None else env
    if env.get(DTYPE_ENV):
        return env[DTYPE_ENV]
    if _has_cuda(device):
        return "auto"
    return "bfloat16" if cpu_has_bf16(cpuinfo) else "float32"


class ModelServer:
    """An OpenAI-compatible server for one model folder. `start()` returns the base URL (…/v1)."""

    def __init__(self, model_dir: str | os.PathLike, port: int | None = None, continuous_batching: bool = True,
                 host: str = "127.0.0.1", device: str = "auto", dtype: str = "auto",
                 startup_timeout_s: float = 180.0, log_path: str | os.PathLike | None = None,
                 extra_args: list[str] | None = None, per_sequence_attention: bool = True,
                 packed_linear: bool = True, safe_tool_parsing: bool = True, token_ids: bool = True,
                 env: Mapping[str, str] | None = None, token: str | None = None, structured_output: bool = True,
                 context_limit: bool = True, served_prefix: bool = True):
        from clawgym.serve.auth import server_token

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
        # response_format / tool_choice honoured by constrained decoding (`clawgym.serve.structured`)
        self.structured_output = structured_output
        # a request over the model's context window answered 400 at once (`clawgym.serve.context_limit`)
        self.context_limit = context_limit
        # a re-sent conversation generated from the ids this server sampled (`clawgym.serve.served_prefix`)
        self.served_prefix = served_prefix
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
        if self.structured_output:
            launcher.append("--structured")
        if self.context_limit:
            launcher.append("--context-limit")
        if self.served_prefix and self.token_ids:
            launcher.append("--served-prefix")
        if self.continuous_batching and self.per_sequence_attention:
            launcher.append("--cb-attention")
        if self.packed_linear and not _has_cuda(self.device):
            launcher.append("--packed-linear")
        # the token check is installed by the launcher (from the environment): a token needs the launcher
        serve = _serve_cmd(launcher) if launcher or not self.token else \
            [sys.executable, str(Path(__file__).resolve()), "serve"]
        cmd = serve + [self.model_dir, "--host", self.host, "--port", str(self.port),
                       "--device", self.device, "--dtype", serving_dtype(self.dtype, self.device, env=self.env),
                       "--log-level", "warning"]
        cmd.append("--continuous-batching" if self.continuous_batching else "--no-continuous-batching")
        extra = list(self.extra_args)
        if self.continuous_batching and not _has_cuda(self.device) and not any(a.startswith("--cb-") for a in extra):
            # transformers' default KV-cache sizing for continuous batching grew to ~10 GB RSS on CPU and was
            # OOM-killed (every request then failed with a connection error); these bounds keep it near 2.3 GB
            extra += list(CPU_CB_ARGS)
        return cmd + extra

    def environment(self) -> dict[str, str]:
        """The server process's environment: `env` (default: inherited), offline, and `MALLOC_ENV` / `OMP_ENV`
        unless set."""
        base = os.environ if self.env is None else self.env
        return {**MALLOC_ENV, **OMP_ENV, **base, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}

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


# installed in this order whatever the order on the command line (structured output wraps what token ids installs)
LAUNCHER_FLAGS = {"--safe-tool-parsing": install_safe_tool_parsing, "--token-ids": install_token_ids,
                  "--structured": install_structured_output, "--cb-attention": install_cb_attention,
                  "--packed-linear": install_packed_linear,
                  "--context-limit": install_context_limit,
                  # last: its handler wrapper sees the request first, and the context is checked on the swapped ids
                  "--served-prefix": install_served_prefix}


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
    """`python clawgym/serve/launcher.py [--safe-tool-parsing] [--token-ids] [--structured] [--cb-attention]
    [--packed-linear] [--context-limit] [--served-prefix] serve MODEL ...`: `transformers serve` with the patches
    its flags name installed (badly written tool calls answered as text, token ids / log-probabilities on request,
    structured output, the per-sequence CB attention, the pre-packed oneDNN linear layers, a 400 for requests over
    the context window, re-sent conversations generated from the served ids); with $CLAWGYM_SERVER_TOKEN set, only
    requests bearing it are answered (`install_auth`)."""
    flags = set()
    while argv and argv[0] in LAUNCHER_FLAGS:
        flags.add(argv.pop(0))
    for flag, install in LAUNCHER_FLAGS.items():
        if flag in flags:
            install()
    token = os.environ.pop(AUTH_ENV, "")  # this process's entry point: the token, then out of the environment
    if token:
        install_auth(token)
    _exit_when_orphaned()
    from transformers.cli.transformers import main

    sys.argv = ["transformers", *argv]
    main()


__all__ = ["ModelServer", "free_port", "LAUNCHER_FLAGS"]


if __name__ == "__main__":
    # run as a script (not `-m`): clawgym.train's __init__ (TRL, datasets) is not imported; drop this folder from
    # sys.path so its modules cannot shadow top-level ones
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    _launch(sys.argv[1:])
