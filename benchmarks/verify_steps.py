"""Where verification time goes: quiesce, preparation (host scrub, neutralising, sealed guard) and the
verifier itself, per task, on the ClawGym fixture tasks.

    python benchmarks/verify_steps.py [--backend bwrap|docker] [--n 10] [--fixtures DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import clawgym.verify.guard as guard  # noqa: E402
import clawgym.verify.runtime as runtime  # noqa: E402
from clawgym.sandbox import get_factory, host_settings  # noqa: E402
from clawgym.sandbox.base import SandboxConfig  # noqa: E402
from clawgym.tasks import import_any  # noqa: E402

TIMES: dict[str, float] = {}


def timed(mod, name: str) -> None:
    """Wrap mod.name so its wall time adds up in TIMES[name]."""
    f = getattr(mod, name)

    def w(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            TIMES[name] = TIMES.get(name, 0.0) + time.perf_counter() - t

    setattr(mod, name, w)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", default="bwrap")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--fixtures", default=os.environ.get("CLAWGYM_FIXTURES", str(REPO.parent / "shared" / "fixtures")))
    a = ap.parse_args()
    rep = import_any(str(Path(a.fixtures) / "clawgym_train_sample"))
    tasks = list(getattr(rep, "tasks", rep))[: a.n]
    for n in ("_quiesce", "neutralize_controls", "_seal"):
        timed(guard, n)
    timed(runtime, "prepare_for_verification")
    timed(runtime.TaskVerifier, "_code_reward_dir")
    f = get_factory(a.backend, SandboxConfig(**host_settings(os.environ)))
    f.warm()
    try:
        for _round in range(2):  # the first round warms the pool and the page cache
            TIMES.clear()
            t0 = time.perf_counter()
            for t in tasks:
                with f.open(t.files) as sb:
                    t1 = time.perf_counter()
                    runtime.verify_task(t, sb, [])
                    TIMES["verify_task"] = TIMES.get("verify_task", 0.0) + time.perf_counter() - t1
            total = time.perf_counter() - t0
    finally:
        f.close()
    for k, v in TIMES.items():
        print(f"{a.backend}: {k:28s} {1000 * v / len(tasks):7.1f} ms/task")
    print(f"{a.backend}: {'open + verify + close':28s} {1000 * total / len(tasks):7.1f} ms/task")


if __name__ == "__main__":
    main()
