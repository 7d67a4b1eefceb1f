"""Per-operation overhead of each sandbox backend on this machine.

    python -m clawgym.sandbox.bench [docker] [bwrap] [local] [-n 30]

Prints median/p90 milliseconds for exec(["true"]), exec("true") (through bash -lc), write+read
of a 4 KiB file, open (docker: from a full warm pool) and close. docker also prints "close+reset":
close() until the container is reset and idle in the pool again (the reaper does this in the
background; close() itself returns at once). `--docker-exec` measures docker's fallback path
(`docker exec` instead of the in-container exec server) and `--no-recycle` destroy+create.
"""

from __future__ import annotations

import argparse
import statistics
import time

from clawgym.sandbox import get_factory
from clawgym.sandbox.base import SandboxConfig


def _ms(fn, n: int) -> tuple[float, float]:
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        xs.append((time.perf_counter() - t) * 1000)
    xs.sort()
    return statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.9))]


def measure(backend: str, n: int = 30, **docker_kw) -> dict[str, tuple[float, float]]:
    """Time the basic sandbox operations of `backend`: {operation: (median ms, p90 ms)}."""
    kw = {"pool_size": 2, **docker_kw} if backend == "docker" else {}
    out = {}
    with get_factory(backend, SandboxConfig(), **kw) as f:
        if backend == "docker":
            f.warm(60)
        with f.open() as sb:
            sb.exec(["true"])  # warm caches
            out["exec argv true"] = _ms(lambda: sb.exec(["true"]), n)
            out["exec 'true' (bash -lc)"] = _ms(lambda: sb.exec("true"), n)
            data = b"x" * 4096
            out["write+read 4 KiB"] = _ms(lambda: (sb.write_file("f", data), sb.read_file("f")), n)

        opens, closes, settles = [], [], []
        for _ in range(max(3, n // 5)):
            if backend == "docker":
                f.warm(60)  # not timed: open() takes a container from the warm pool
            t = time.perf_counter()
            sb = f.open()
            opens.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            sb.close()
            closes.append((time.perf_counter() - t) * 1000)
            if backend in ("docker", "bwrap"):  # recycled: reset in the background
                f.settle(60)
                settles.append((time.perf_counter() - t) * 1000)
        for k, xs in (("open", opens), ("close", closes), ("close+reset", settles)):
            if not xs:
                continue
            xs.sort()
            out[k] = statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.9))]
    return out


def main(argv=None) -> int:
    """Command line: print the timings of :func:`measure` for each backend named."""
    ap = argparse.ArgumentParser(prog="python -m clawgym.sandbox.bench")
    ap.add_argument("backends", nargs="*", default=["docker", "bwrap"])
    ap.add_argument("-n", type=int, default=30)
    ap.add_argument("--docker-exec", action="store_true", help="docker: use `docker exec`, not the exec server")
    ap.add_argument("--no-recycle", action="store_true", help="docker: destroy closed containers")
    a = ap.parse_args(argv)
    dkw = {"use_execd": not a.docker_exec, "recycle": not a.no_recycle}
    for b in a.backends:
        for k, (med, p90) in measure(b, a.n, **dkw).items():
            print(f"{b:7s} {k:24s} median {med:8.1f} ms   p90 {p90:8.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
