"""Verifier throughput: the no-op verification of the ClawGym fixture tasks through our harness
(clawgym.verify.verify_noop on a sandbox factory) against a bare bubblewrap loop that copies each task's
input_files/ and reward/ into a temp dir and runs reward.sh directly in bwrap. Prints the ratios.

    python benchmarks/verify_throughput.py [--rounds 3] [--backends bwrap,docker] [--fixtures DIR]

Goal: harness/bare <= 1.2 with bwrap, <= 2.0 with docker (warm pool). Both loops run in the same process,
interleaved round by round (the machine is shared); the best round of each is compared, and the scores of
both loops are checked against clawgym_train_sample_noop_scores.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clawgym import DEFAULT_WORKSPACE  # noqa: E402
from clawgym.sandbox import get_factory, host_settings  # noqa: E402
from clawgym.sandbox.base import SandboxConfig  # noqa: E402
from clawgym.sandbox.bwrap.backend import find_rootfs  # noqa: E402
from clawgym.tasks.clawgym_format import import_clawgym_folder  # noqa: E402
from clawgym.verify import verify_noop_many  # noqa: E402


def bare_argv(rootfs: str | None, ws_host: str) -> list[str]:
    a = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
    if rootfs:
        a += ["--ro-bind", rootfs, "/"]
    else:
        a += ["--ro-bind", "/", "/", "--tmpfs", "/root"]
    a += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/root/.openclaw",
          "--bind", ws_host, DEFAULT_WORKSPACE, "--chdir", DEFAULT_WORKSPACE,
          "--setenv", "HOME", "/root", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin"]
    return a


def bare_loop(task_dirs: list[Path], rootfs: str | None) -> tuple[float, dict[str, float]]:
    scores: dict[str, float] = {}
    t0 = time.perf_counter()
    for d in task_dirs:
        ws = tempfile.mkdtemp(prefix="cg-bare-")
        try:
            shutil.copytree(d / "input_files", ws, dirs_exist_ok=True, copy_function=shutil.copyfile)
            shutil.copytree(d / "reward", os.path.join(ws, "reward"), copy_function=shutil.copyfile)
            p = subprocess.run(bare_argv(rootfs, ws) + ["bash", "reward/reward.sh"], capture_output=True,
                               timeout=120)
            lines = p.stdout.decode().strip().splitlines()
            try:
                scores[d.name] = float(lines[-1]) if p.returncode == 0 and lines else 0.0
            except ValueError:
                scores[d.name] = 0.0
        finally:
            shutil.rmtree(ws, ignore_errors=True)
    return time.perf_counter() - t0, scores


CODE_S: list[float] = []  # per sequential harness round: summed time inside verify's code step (mostly exec)


def harness_loop(tasks, factory, workers: int = 1) -> tuple[float, dict[str, float]]:
    t0 = time.perf_counter()
    results = verify_noop_many(tasks, factory, workers=workers)
    dt = time.perf_counter() - t0
    if workers == 1:
        CODE_S.append(sum(r.code_duration_s for r in results))
    return dt, {r.task_id: r.score for r in results}


def host_tuning() -> str:
    """What the bwrap figure depends on: joining a cgroup (v1) waits for an RCU grace period unless the kernel
    expedites them (scripts/setup.sh: CLAWGYM_TUNE_HOST=1)."""
    from clawgym.sandbox.host.cgroups import mode

    try:
        with open("/sys/kernel/rcu_expedited") as f:
            exp = f.read().strip()
    except OSError:
        exp = "?"
    return f"cgroups {mode() or 'none'}, rcu_expedited={exp}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures",
                    default=os.environ.get("CLAWGYM_FIXTURES") or str(REPO.parent / "shared" / "fixtures"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backends", default="bwrap,docker")
    ap.add_argument("--workers", type=int, default=2, help="also time the harness with this many concurrent "
                    "verifications (the bare loop stays sequential); 1 = sequential only")
    args = ap.parse_args()
    sample = Path(args.fixtures) / "clawgym_train_sample"
    expected = json.loads((Path(args.fixtures) / "clawgym_train_sample_noop_scores.json").read_text())
    rep = import_clawgym_folder(sample)
    if rep.errors:
        print(rep.summary())
        return 1
    tasks = rep.tasks
    dirs = [sample / t.source["dirname"] for t in tasks]
    rootfs = find_rootfs(SandboxConfig(**host_settings(os.environ)))
    print(f"{len(tasks)} tasks; bare bwrap root: {rootfs or 'host /'}; rounds: {args.rounds}; {host_tuning()}")
    rc = 0
    bare_best = float("inf")
    for backend in [b for b in args.backends.split(",") if b]:
        try:
            factory = get_factory(backend, SandboxConfig(**host_settings(os.environ)))
            if hasattr(factory, "warm"):
                factory.warm()
        except Exception as e:
            print(f"{backend}: unavailable ({e})")
            continue
        with factory:
            harness_loop(tasks[:2], factory)  # warm-up (pool, page cache)
            best, best_conc = float("inf"), float("inf")
            for _ in range(args.rounds):
                tb, sb = bare_loop(dirs, rootfs)
                th, sh = harness_loop(tasks, factory)
                bare_best, best = min(bare_best, tb), min(best, th)
                runs = [sh, sb]
                if args.workers > 1:
                    tc, sc = harness_loop(tasks, factory, args.workers)
                    best_conc = min(best_conc, tc)
                    runs.append(sc)
                bad = [k for k, v in expected.items() if any(r.get(k) != v for r in runs)]
                if bad:
                    print(f"{backend}: score mismatch on {bad[:5]}")
                    rc = 1
        goal = 1.2 if backend == "bwrap" else 2.0
        n = len(tasks)
        print(f"{backend}: bare bwrap loop {bare_best:.2f} s ({bare_best / n * 1000:.0f} ms/task)")
        ratio = best / bare_best
        print(f"{backend}: harness sequential {best:.2f} s ({best / n * 1000:.0f} ms/task) -> ratio {ratio:.2f} "
              f"(goal <= {goal}) {'OK' if ratio <= goal else 'OVER'}")
        if CODE_S:
            inside = min(CODE_S[-args.rounds:])
            print(f"{backend}:   of which reward.sh exec + reward/ copy {inside / n * 1000:.0f} ms/task; "
                  f"sandbox open/close + harness {(best - inside) / n * 1000:.0f} ms/task")
        if args.workers > 1:
            rc_ = best_conc / bare_best
            print(f"{backend}: harness {args.workers} workers {best_conc:.2f} s ({best_conc / n * 1000:.0f} ms/task) "
                  f"-> ratio {rc_:.2f} (goal <= {goal}) {'OK' if rc_ <= goal else 'OVER'}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
