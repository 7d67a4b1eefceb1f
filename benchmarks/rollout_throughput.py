"""Rollout throughput: oracle rollouts (builtin runtime) per second on each available sandbox backend,
sequential vs. concurrent, plus (with --openclaw) seconds per OpenClaw rollout.

    python benchmarks/rollout_throughput.py [--n 12] [--workers 4] [--backends local,bwrap,docker] [--openclaw]

Prints one line per measurement and the concurrent/sequential speed-up ratio.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from clawgym.agent.demo import demo_tasks
from clawgym.agent.rollout import run_rollout
from clawgym.sandbox import get_factory


def _available(name: str) -> tuple[bool, str]:
    if name == "local":
        return True, ""
    if name == "bwrap":
        from clawgym.sandbox.bwrap_backend import available
    else:
        from clawgym.sandbox.docker_backend import available
    return available()


def measure(factory, n: int, workers: int, runtime: str = "builtin") -> tuple[float, float]:
    tasks = [demo_tasks()[i % 3] for i in range(n)]
    t0 = time.perf_counter()
    if workers <= 1:
        rs = [run_rollout(t, "oracle", factory, runtime=runtime) for t in tasks]
    else:
        with ThreadPoolExecutor(workers) as ex:
            rs = list(ex.map(lambda t: run_rollout(t, "oracle", factory, runtime=runtime), tasks))
    dt = time.perf_counter() - t0
    ok = sum(r.score == 1.0 for r in rs)
    return dt, ok / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--backends", default="local,bwrap,docker")
    ap.add_argument("--openclaw", action="store_true", help="also time OpenClaw rollouts (slow: ~10 s per turn)")
    a = ap.parse_args()
    for b in a.backends.split(","):
        ok, why = _available(b)
        if not ok:
            print(f"{b:7s} skipped: {why}")
            continue
        with get_factory(b) as f:
            run_rollout(demo_tasks()[0], "oracle", f)  # warm-up (server start, pools)
            seq, s_ok = measure(f, a.n, 1)
            par, p_ok = measure(f, a.n, a.workers)
        print(f"{b:7s} builtin oracle: sequential {a.n / seq:6.2f} rollouts/s ({seq / a.n:.2f} s each, "
              f"solved {s_ok:.0%}); {a.workers} workers {a.n / par:6.2f} rollouts/s (solved {p_ok:.0%}); "
              f"speed-up x{seq / par:.2f}")
        if a.openclaw and b != "local":
            from clawgym.agent.openclaw import openclaw_installed, openclaw_sandbox_config

            ok, why = openclaw_installed()
            if not ok:
                print(f"{b:7s} openclaw skipped: {why}")
                continue
            with get_factory(b, openclaw_sandbox_config()) as f:
                dt, o_ok = measure(f, 2, 1, runtime="openclaw")
            print(f"{b:7s} openclaw oracle: {dt / 2:.1f} s per rollout (solved {o_ok:.0%})")


if __name__ == "__main__":
    main()
