"""What the lake on object storage costs: write + read of a `trajectories` table, local folder vs S3 on loopback.

Starts a moto S3 server (``pip install 'moto[server]'``) on 127.0.0.1 with an ephemeral port, writes the same
rollout rows (realistic JSON message payloads) into `trajectories` partitions policy × shard through
``clawgym.lake`` — once into a temp folder, once into ``s3://bench/lake`` — then reads the whole table back
and runs one DuckDB query over the catalog. Prints the times and the S3 / local ratio (moto is a Python
server, so this is an upper bound on the client-side overhead, not a cloud-S3 latency figure).

    python benchmarks/lake_s3.py [--rows 2000] [--shards 4] [--repeats 3]
"""

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without an install too

from clawgym import lake as lk  # noqa: E402

SQL = "SELECT policy, shard, count(*), avg(score) FROM trajectories GROUP BY ALL ORDER BY ALL"


def rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        msgs = [{"role": "user", "content": "do the task " * 20}] + [
            {"role": "assistant", "tool_calls": [{"name": "exec", "arguments": {"cmd": f"ls -la /w/{j}"}}]}
            for j in range(rng.randint(3, 12))]
        out.append({"rollout_id": f"r{seed}-{i}", "task_id": f"t{i}", "suite": "procedural", "category": "files",
                    "score": rng.random(), "failure_class": "ok", "n_turns": len(msgs), "messages_json": msgs,
                    "diff_json": {"changed": [f"out/{i}.csv"]}, "duration_s": rng.random() * 10})
    return out


def start_moto() -> tuple[subprocess.Popen, str]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return p, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    p.kill()
    raise SystemExit("moto server did not start")


def run(root, data: dict, db: Path) -> dict:
    t0 = time.perf_counter()
    for (policy, shard), rs in data.items():
        lk.write_table("trajectories", rs, {"policy": policy, "shard": shard}, root=root)
    t1 = time.perf_counter()
    n = lk.read_table("trajectories", root=root).num_rows
    t2 = time.perf_counter()
    _, res = lk.query(SQL, db, root=root)
    t3 = time.perf_counter()
    assert n == sum(len(v) for v in data.values()) and len(res) == len(data)
    return {"write_s": t1 - t0, "read_s": t2 - t1, "sql_s": t3 - t2}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2000, help="rows per partition")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    data = {(p, s): rows(a.rows, seed=17 * s + len(p)) for p in ("oracle", "noop") for s in range(a.shards)}
    proc, url = start_moto()
    try:
        import pyarrow.fs as pafs

        opts = lk.S3Options(endpoint_url=url, region="us-east-1", access_key_id="bench", secret_access_key="bench")
        pafs.S3FileSystem(access_key="bench", secret_key="bench", endpoint_override=url.split("//")[1],
                          scheme="http", region="us-east-1", allow_bucket_creation=True).create_dir("bench")
        remote = lk.open_lake("s3://bench/lake", opts)
        res: dict[str, list] = {"local": [], "s3": []}
        with tempfile.TemporaryDirectory() as d:
            for _ in range(a.repeats):  # interleaved: the box is noisy
                res["local"].append(run(Path(d) / "lake", data, Path(d) / "c.duckdb"))
                res["s3"].append(run(remote, data, Path(d) / "c.duckdb"))
        size = sum(i.size for i in remote.list_files(remote.key("trajectories")))
    finally:
        proc.terminate()
        proc.wait()
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("write_s", "read_s", "sql_s")} for k, v in res.items()}
    tot = {k: v["write_s"] + v["read_s"] for k, v in med.items()}
    out = {"rows": a.rows * len(data), "partitions": len(data), "parquet_mb": round(size / 2**20, 2),
           "median": {k: {m: round(x, 3) for m, x in v.items()} for k, v in med.items()},
           "write_plus_read_s": {k: round(v, 3) for k, v in tot.items()},
           "ratio_s3_over_local": round(tot["s3"] / tot["local"], 2),
           "sql_ratio_s3_over_local": round(med["s3"]["sql_s"] / med["local"]["sql_s"], 2)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
