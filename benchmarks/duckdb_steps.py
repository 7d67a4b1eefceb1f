"""How fast users' SQL runs over the lake: pass rate by category × policy over 1M generated step rows.

Writes a synthetic lake (trajectories + steps, hive-partitioned policy=/shard=, through clawgym.lake's own
writers and schemas) under a temp dir, builds the DuckDB catalog with clawgym.lake.catalog, and times the
query a user would type. Goal: < 1 s.

    python benchmarks/duckdb_steps.py [--steps 1000000] [--repeats 5]
"""

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without an install too

from clawgym import lake as lk  # noqa: E402
from clawgym.lake.catalog import refresh_catalog  # noqa: E402
from clawgym.tasks import CATEGORIES  # noqa: E402

QUERY = """
SELECT t.category, t.policy,
       count(DISTINCT t.rollout_id)                       AS rollouts,
       avg(CASE WHEN t.score >= 1.0 THEN 1 ELSE 0 END)    AS pass_rate,
       count(s.step)                                      AS steps
FROM trajectories t JOIN steps s USING (rollout_id)
GROUP BY ALL ORDER BY 1, 2
"""


def generate(root: Path, n_steps: int, policies=("oracle", "smollm2-base", "sft-a", "sft-b"), shards=4, seed=0):
    rng = random.Random(seed)
    per_rollout = 10
    n_roll = n_steps // per_rollout
    tools = ["read", "write", "edit", "exec", "ls"]
    for p_i, policy in enumerate(policies):
        for shard in range(shards):
            trajs, steps = [], []
            for i in range(p_i * shards + shard, n_roll, len(policies) * shards):
                rid = f"r{i:08d}"
                trajs.append({"rollout_id": rid, "task_id": f"task-{i % 5000:05d}", "policy": policy, "shard": shard,
                              "category": CATEGORIES[i % 6], "score": float(rng.random() < 0.3 + 0.1 * p_i),
                              "failure_class": "ok", "n_tool_calls": per_rollout})
                steps += [{"rollout_id": rid, "task_id": trajs[-1]["task_id"], "policy": policy, "shard": shard,
                           "step": k, "role": "assistant", "tool_name": tools[k % 5], "tool_args_json": "{}",
                           "duration_s": 0.01} for k in range(per_rollout)]
            part = {"policy": policy, "shard": shard}
            lk.write_table("trajectories", trajs, part, root=root)
            lk.write_table("steps", steps, part, root=root)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "lake"
        t0 = time.perf_counter()
        generate(root, a.steps)
        t_gen = time.perf_counter() - t0
        db = refresh_catalog(Path(d) / "clawgym.duckdb", root=root)
        con = duckdb.connect(str(db), read_only=True)
        n = con.execute("SELECT count(*) FROM steps").fetchone()[0]
        times = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            rows = con.execute(QUERY).fetchall()
            times.append(time.perf_counter() - t0)
        print(f"step rows: {n:,} (generated + written in {t_gen:.1f}s); result rows: {len(rows)}")
        print(f"pass rate by category x policy: median {statistics.median(times) * 1000:.0f} ms, "
              f"min {min(times) * 1000:.0f} ms over {a.repeats} runs; goal < 1000 ms "
              f"-> ratio to goal {statistics.median(times):.3f}")


if __name__ == "__main__":
    main()
