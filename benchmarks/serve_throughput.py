"""Serving throughput of a checkpoint through clawgym.serve.ModelServer (`transformers serve`):
generated tokens/s for N concurrent OpenAI chat requests with continuous batching on vs off.

    python benchmarks/serve_throughput.py [--model data/models/smollm2-135m-instruct] [--concurrency 4] [--max-tokens 32]

Prints one line per mode and the ratio (continuous batching / sequential).
"""  # noqa: E501 -- the usage line is one shell command, kept whole

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOOLS = [{"type": "function", "function": {
    "name": "write", "description": "Create or overwrite a file in the workspace.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                   "required": ["path", "content"]}}}]


def measure(model: str, cb: bool, n: int, max_tokens: int) -> dict:
    import openai

    from clawgym.serve import ModelServer

    with ModelServer(model, continuous_batching=cb) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key=srv.token or "none", timeout=600)

        def one(i: int) -> int:
            r = client.chat.completions.create(
                model=srv.model_name, tools=TOOLS, max_tokens=max_tokens, temperature=0,
                messages=[{"role": "user", "content": f"Write the number {i} to out{i}.txt"}])
            return r.usage.completion_tokens

        one(0)  # warm-up
        t = time.time()
        with ThreadPoolExecutor(n) as ex:
            toks = sum(ex.map(one, range(n)))
        dt = time.time() - t
    return {"continuous_batching": cb, "requests": n, "completion_tokens": toks, "seconds": round(dt, 2),
            "tokens_per_s": round(toks / dt, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    a = ap.parse_args()
    if a.model == "data/models/smollm2-135m-instruct":
        from clawgym.train.base_model import prepare_base_model

        prepare_base_model(a.model)
    off = measure(a.model, False, a.concurrency, a.max_tokens)
    print(json.dumps(off), flush=True)
    on = measure(a.model, True, a.concurrency, a.max_tokens)
    print(json.dumps(on), flush=True)
    print(f"ratio continuous/sequential tokens/s = {on['tokens_per_s'] / off['tokens_per_s']:.2f}")


if __name__ == "__main__":
    main()
