"""The embedded server's engine numbers, interleaved in one run: per serving dtype (float32, bfloat16), the time
from starting the server to the first streamed token, and greedy decode tokens/s at 1 and at N concurrent
streams (continuous batching), rounds alternating between the dtypes so the shared box's noise hits both.

    python benchmarks/serve_engine.py [--model data/models/smollm2-135m-instruct] [--streams 16]
        [--max-tokens 64] [--rounds 2] [--dtypes float32,bfloat16]

Prints one JSON line per (round, dtype) and a summary with the bf16 / fp32 ratios. On a CPU without native
bfloat16 (no AVX512-BF16 / AMX in /proc/cpuinfo) bf16 is emulated and the ratio says so; ModelServer's
dtype="auto" serves float32 there.
"""

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _stream_one(srv, i: int, max_tokens: int, t_start: float | None = None) -> tuple[int, float | None]:
    import httpx

    body = {"model": srv.model_name, "temperature": 0, "max_tokens": max_tokens, "stream": True,
            "messages": [{"role": "user", "content": f"Write a long story about the number {i}."}]}
    first = None
    n = 0
    with httpx.stream("POST", srv.base_url + "/chat/completions", json=body, timeout=1200,
                      headers={"Authorization": f"Bearer {srv.token}"}) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and '"content"' in line and first is None and t_start is not None:
                first = time.time() - t_start
            if '"usage"' in line:
                n = json.loads(line[len("data: "):])["usage"]["completion_tokens"]
    return n, first


def measure(model: str, dtype: str, streams: int, max_tokens: int) -> dict:
    from clawgym.serve import ModelServer

    t0 = time.time()
    with ModelServer(model, device="cpu", dtype=dtype, startup_timeout_s=600) as srv:
        healthy = time.time() - t0
        _, first = _stream_one(srv, 0, 4, t_start=t0)  # start -> first token (includes CB's lazy init)
        out = {"dtype": dtype, "start_to_healthy_s": round(healthy, 1), "start_to_first_token_s": round(first, 1)}
        for n in (1, streams):
            t = time.time()
            with ThreadPoolExecutor(n) as ex:
                toks = sum(k for k, _ in ex.map(lambda i: _stream_one(srv, i, max_tokens), range(n)))
            out[f"tok_s_{n}"] = round(toks / (time.time() - t), 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    a = ap.parse_args()
    if a.model == "data/models/smollm2-135m-instruct":
        from clawgym.train.base_model import prepare_base_model

        prepare_base_model(a.model)
    from clawgym.serve.launcher import cpu_has_bf16

    dtypes = [d for d in a.dtypes.split(",") if d]
    runs: dict[str, list[dict]] = {d: [] for d in dtypes}
    for r in range(a.rounds):
        for d in (dtypes if r % 2 == 0 else dtypes[::-1]):  # ABBA: alternate which dtype goes first
            m = measure(a.model, d, a.streams, a.max_tokens)
            runs[d].append(m)
            print(json.dumps({"round": r, **m}), flush=True)
    med = {d: {k: statistics.median(x[k] for x in ms) for k in ms[0] if k != "dtype"} for d, ms in runs.items()}
    summary = {"cpu_native_bf16": cpu_has_bf16(), "median": med}
    if "float32" in med and "bfloat16" in med:
        summary["bf16_over_fp32"] = {k: round(med["bfloat16"][k] / med["float32"][k], 2)
                                     for k in med["float32"] if k.startswith("tok_s")}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
