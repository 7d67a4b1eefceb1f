"""What the clean room costs: oracle rollouts verified in a fresh room (export -> room -> verify, the default)
against the same rollouts verified in place in the agent's own sandbox (quiesce -> scrub -> verify, the path
before the clean room), interleaved round by round in one process on each backend (the box is noisy: ratios of
neighbours, not absolute numbers).

    python benchmarks/clean_room_cost.py [--n 12] [--rounds 3] [--workers 2] [--backends bwrap,docker]
                                         [--docker-reset]

--docker-reset adds a third mode on docker, interleaved with the other two: the clean room with the earlier container
reset (the exec server's in-container reset op after the host-side IPC clear, ~40 ms each; today it runs only where
the host side could not clear and check everything, see clawgym.sandbox.docker.container.Slot.quiesce).

Prints per backend: rollouts/s and verification latency per task (ms, median over tasks: from the end of
the agent phase to the score) for both modes, and the ratio clean/in-place.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import clawgym.verify as verify_pkg  # noqa: E402
from clawgym.agent.demo import demo_tasks  # noqa: E402
from clawgym.agent.rollout import run_rollout  # noqa: E402
from clawgym.sandbox import SandboxConfig, get_factory, host_settings  # noqa: E402
from clawgym.sandbox.docker.container import Slot  # noqa: E402
from clawgym.verify.runtime import verify_after_agent, verify_task  # noqa: E402

_HOST_CLEAR = Slot.clear_host_side


def _s9_clear(slot):
    """The earlier reset: the host-side clear, and then always the server's reset op (as if the host side failed)."""
    return _HOST_CLEAR(slot) or "benchmark: the earlier reset (the in-container op always follows)"

LAT: list[float] = []


def _clean(task, sandbox, rooms, transcript=None, judge=None, export=None):
    t0 = time.perf_counter()
    try:
        return verify_after_agent(task, sandbox, rooms, transcript, judge, export=export)
    finally:
        LAT.append(time.perf_counter() - t0)


def _in_place(task, sandbox, rooms, transcript=None, judge=None, export=None):
    t0 = time.perf_counter()
    try:
        return verify_task(task, sandbox, transcript, judge)
    finally:
        LAT.append(time.perf_counter() - t0)


def run(factory, mode, n: int, workers: int) -> tuple[float, float, float]:
    verify_pkg.verify_after_agent = _in_place if mode == "in_place" else _clean
    Slot.clear_host_side = _s9_clear if mode == "clean_s9_reset" else _HOST_CLEAR
    LAT.clear()
    tasks = [demo_tasks()[i % 3] for i in range(n)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max(1, workers)) as ex:
        rs = list(ex.map(lambda t: run_rollout(t, "oracle", factory), tasks))
    dt = time.perf_counter() - t0
    solved = sum(r.score == 1.0 for r in rs) / n
    return n / dt, statistics.median(LAT) * 1000 if LAT else float("nan"), solved


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--backends", default="bwrap,docker")
    ap.add_argument("--docker-reset", action="store_true")
    a = ap.parse_args()
    for b in [x for x in a.backends.split(",") if x]:
        try:
            f = get_factory(b, SandboxConfig(**host_settings(os.environ)), pool_size=max(2, a.workers))
        except Exception as e:
            print(f"{b}: skipped ({e})")
            continue
        with f:
            f.warm(120)
            f.rooms().warm(120)
            verify_pkg.verify_after_agent = _clean
            run_rollout(demo_tasks()[0], "oracle", f)  # warm-up: policy server, page cache, both pools
            modes = ["clean", "in_place"] + (["clean_s9_reset"] if a.docker_reset and b == "docker" else [])
            res: dict[str, list] = {m: [] for m in modes}
            for r in range(a.rounds):
                for mode in (modes if r % 2 == 0 else modes[::-1]):
                    res[mode].append(run(f, mode, a.n, a.workers))
                    f.settle(60)
                    f.rooms().settle(60)
            Slot.clear_host_side = _HOST_CLEAR
            for mode, rows in res.items():
                rate = statistics.median(x[0] for x in rows)
                lat = statistics.median(x[1] for x in rows)
                print(f"{b:7s} {mode:14s}: {rate:6.2f} oracle rollouts/s, verification {lat:6.1f} ms per task "
                      f"(median of {len(rows)} rounds x {a.n}, solved {min(x[2] for x in rows):.0%})")
            rc = statistics.median(x[0] for x in res["clean"]) / statistics.median(x[0] for x in res["in_place"])
            lc = statistics.median(x[1] for x in res["clean"]) / statistics.median(x[1] for x in res["in_place"])
            print(f"{b:7s} clean / in place: throughput {rc:.2f}x, verification latency {lc:.2f}x "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
            if "clean_s9_reset" in res:
                med = {m: statistics.median(x[0] for x in res[m]) for m in ("clean", "clean_s9_reset")}
                rs = med["clean"] / med["clean_s9_reset"]
                print(f"{b:7s} clean / clean with the earlier reset: throughput {rs:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
