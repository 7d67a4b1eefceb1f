"""Harbor's own run time against ours on the same tasks: 24 procedural tasks (4 code-only per
category) exported as a Harbor dataset, run by the real Harbor (`harbor run -a oracle` on the local docker
engine, -n workers) and by clawgym (`run_rollouts(tasks, "oracle", factory, workers)`: sandbox, oracle
replay, clean-room verification). Prints both wall times, the ratio harbor/ours, and checks both score every
task 1.0.

    python benchmarks/harbor_vs_ours.py [--per-category 4] [--workers 4] [--backend docker|bwrap]

Needs data/harbor-venv (scripts/install_harbor.sh) and the docker engine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from test_harbor import procedural_tasks  # noqa: E402

from clawgym.agent.rollout import run_rollouts  # noqa: E402
from clawgym.sandbox import SandboxConfig, get_factory, host_settings  # noqa: E402
from clawgym.tasks.harbor_export import export_harbor_dataset  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-category", type=int, default=4)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--backend", default="docker")
    ap.add_argument("--harbor", default=str(Path(os.environ.get("HARBOR_VENV") or REPO / "data/harbor-venv")
                                            / "bin" / "harbor"))
    a = ap.parse_args()
    tasks = procedural_tasks(a.per_category)
    tmp = Path(tempfile.mkdtemp(prefix="harbor-bench-"))
    export_harbor_dataset(tasks, tmp / "ds")

    f = get_factory(a.backend, SandboxConfig(**host_settings(os.environ)))
    try:
        t0 = time.perf_counter()
        ros = run_rollouts(tasks, "oracle", f, workers=a.workers)
        ours = time.perf_counter() - t0
    finally:
        f.close()
    ok_ours = sum(1 for r in ros if r.score == 1.0)

    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    t0 = time.perf_counter()
    r = subprocess.run([a.harbor, "run", "-p", str(tmp / "ds"), "-a", "oracle", "-o", str(tmp / "jobs"), "-q",
                        "-n", str(a.workers)], capture_output=True, text=True, env=env)
    harbor = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"harbor run failed: {r.stdout[-2000:]}{r.stderr[-2000:]}")
    rewards = [((json.loads(p.read_text()).get("verifier_result") or {}).get("rewards") or {}).get("reward")
               for p in (tmp / "jobs").glob("*/*/result.json")]
    ok_harbor = sum(1 for x in rewards if x == 1.0)
    n = len(tasks)
    print(f"tasks: {n} ({a.per_category} per category), workers: {a.workers}, our backend: {a.backend}")
    print(f"ours   : {ours:7.1f} s  ({ours / n:.2f} s/task)  oracle 1.0: {ok_ours}/{n}")
    print(f"harbor : {harbor:7.1f} s  ({harbor / n:.2f} s/task)  oracle 1.0: {ok_harbor}/{n}")
    print(f"ratio harbor/ours: {harbor / ours:.1f}")


if __name__ == "__main__":
    main()
