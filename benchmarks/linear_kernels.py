"""Linear-layer kernels on this CPU at decoding shapes: MKL's `F.linear` (torch's default for fp32) against oneDNN
with the weight packed once (`clawgym.serve.packed_linear.packed_linear_forward`, what ModelServer installs on CPU).

    python benchmarks/linear_kernels.py [--model data/models/smollm2-135m-instruct] [--rows 1,16] [--rounds 15]

For every token-row count (1 = one decoding stream, 16 = sixteen streams in one continuous-batching step) it
times the decoder stack's projections (every layer's seven, own weights) and the LM head, both kernels interleaved round by round, and prints
the medians and the ratio MKL / oneDNN (above 1: packed oneDNN is faster).
"""  # noqa: E501 -- docstring text kept as written (lint-only pass, no string changes)

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def shapes(model: str) -> tuple[list[tuple[int, int]], tuple[int, int], int]:
    cfg_path = Path(model) / "config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
    h = cfg.get("hidden_size", 576)
    inter = cfg.get("intermediate_size", 1536)
    heads = cfg.get("num_attention_heads", 9)
    kv = cfg.get("num_key_value_heads", 3)
    d = cfg.get("head_dim", h // heads)
    layer = [(heads * d, h), (kv * d, h), (kv * d, h), (h, heads * d), (inter, h), (inter, h), (h, inter)]
    return layer, (cfg.get("vocab_size", 49152), h), cfg.get("num_hidden_layers", 30)


def main() -> None:
    from clawgym.serve import packed_linear as serve

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--rows", default="1,16")
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    layer, head, n_layers = shapes(a.model)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {n_layers} layers of {layer}, LM head {head}")
    g = torch.Generator().manual_seed(0)
    # every layer its own weights, as in the model: the decoder stack does not fit in the CPU caches
    groups = {"layers": [torch.nn.Linear(i, o, bias=False) for _ in range(n_layers) for o, i in layer],
              "lm_head": [torch.nn.Linear(head[1], head[0], bias=False)]}
    if not serve.install_packed_linear():
        sys.exit("this torch build has no oneDNN linear ops")
    stock = serve._STOCK_LINEAR_FORWARD
    with torch.inference_mode():
        for m in (m for ms in groups.values() for m in ms):
            m.weight.copy_(torch.randn(m.weight.shape, generator=g) * 0.05)
        for rows in (int(r) for r in a.rows.split(",") if r):
            for name, mods in groups.items():
                xs = [torch.randn(1, rows, m.in_features, generator=g) for m in mods]
                for m, x in zip(mods, xs):  # warm both (packs the weights) and check they agree
                    torch.testing.assert_close(serve.packed_linear_forward(m, x), stock(m, x), atol=1e-3, rtol=1e-4)
                reps = 2 if name == "layers" else 4
                t_mkl, t_dnn = [], []
                for _ in range(a.rounds):
                    for fn, out in ((stock, t_mkl), (serve.packed_linear_forward, t_dnn)):
                        t = time.perf_counter()
                        for _ in range(reps):
                            for m, x in zip(mods, xs):
                                fn(m, x)
                        out.append((time.perf_counter() - t) / reps * 1e3)
                mk, dn = statistics.median(t_mkl), statistics.median(t_dnn)
                print(f"linear  {rows:3d} rows  {name:8s} MKL {mk:7.3f} ms  oneDNN packed {dn:7.3f} ms  "
                      f"ratio {mk / dn:.2f}", flush=True)


if __name__ == "__main__":
    main()
