"""Stack throughput: oracle rollouts/s through launched runs (the production-shaped stack: queue,
DockerRunLauncher, project image, docker sandboxes started from inside the run containers) vs in-process on the
same work in the same invocation, plus the run launch latency.

    python benchmarks/stack_throughput.py [--tasks 48] [--shards 4] [--max-runs 2]

Work: `--tasks` train tasks (copies of the demo tasks) over `--shards` shards, policy oracle, docker sandboxes.
  in-process: one Python process materializes trajectories[oracle|s] for every shard in turn (dg.materialize,
              the same assets and resources as the definitions, checks left out).
  launched:   one run per shard submitted at once through the webserver (checks left out); the queue runs
              --max-runs at a time, each in a fresh container of the project image.
Both start from an empty lake of their own. Prints rollouts/s of each, the ratio (goal >= 0.8) and the launch
latency per run: enqueue -> run process started (queue wait + container start + code load), and
STARTING -> started (container start + code load only).
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "deploy"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import stackctl  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tasks(n: int):
    from clawgym.agent.demo import demo_tasks

    base = demo_tasks()
    return [base[i % len(base)].model_copy(update={"task_id": f"{base[i % len(base)].task_id}-{i}", "split": "train"})
            for i in range(n)]


def _seed(data: Path, tasks) -> None:
    from clawgym import lake as lk
    from clawgym.lake.records import task_row

    lk.write_table("tasks", [task_row(t, "synthetic") for t in tasks], {"source": "synthetic"}, root=data / "lake")


def _count(data: Path, shards: int) -> int:
    from clawgym import lake as lk

    n = 0
    for s in range(shards):
        try:
            rows = lk.read_table("trajectories", {"policy": "oracle", "shard": s}, root=data / "lake").to_pylist()
        except Exception:
            continue
        n += sum(1 for r in rows if r["failure_class"] != "infra")
    return n


def in_process(data: Path, shards: int) -> tuple[float, int]:
    import dagster as dg

    from clawgym_assets.defs.lake.resources import LakeResource
    from clawgym_assets.defs.rollouts import assets as rollouts
    from clawgym_assets.defs.rollouts.resources import (
        JudgeResource,
        ModelEndpointsResource,
        OpenClawResource,
        SandboxResource,
    )

    lake = LakeResource(data_dir=str(data))
    res = {"lake": lake, "sandbox": SandboxResource(backend="docker"), "endpoints": ModelEndpointsResource(lake=lake),
           "judge": JudgeResource(), "openclaw": OpenClawResource()}
    traj, steps = rollouts.build_rollout_assets(shards)
    t0 = time.perf_counter()
    with dg.instance_for_test() as inst:
        inst.add_dynamic_partitions("policy", ["oracle"])
        for s in range(shards):
            r = dg.materialize([traj, steps, dg.AssetSpec("verifiers"), dg.AssetSpec("synthetic_tasks"),
                                dg.AssetSpec("imported_tasks")], selection=["trajectories"], resources=res,
                               instance=inst, partition_key=dg.MultiPartitionKey({"policy": "oracle", "shard": str(s)}))
            assert r.success
    return time.perf_counter() - t0, _count(data, shards)


def launched(root: Path, data: Path, shards: int, max_runs: int) -> tuple[float, int, list, list]:
    env = {**os.environ, "CLAWGYM_STACK_DIR": str(root / "stack"), "CLAWGYM_DATA": str(data),
           "CLAWGYM_PG_PORT": str(_free_port()), "CLAWGYM_STACK_PORT": str(_free_port()),
           "CLAWGYM_SHARDS": str(shards), "CLAWGYM_STACK_MAX_RUNS": str(max_runs)}
    url = f"http://127.0.0.1:{env['CLAWGYM_STACK_PORT']}"
    sh = [str(REPO / "scripts" / "stack.sh")]
    t_up = time.perf_counter()
    p = subprocess.run(["bash", *sh, "up"], env=env, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"stack.sh up failed:\n{p.stderr[-4000:]}")
    print(f"stack up: {time.perf_counter() - t_up:.1f} s", flush=True)
    try:
        stackctl.add_partitions("policy", ["oracle"], url)
        t0 = time.perf_counter()
        ids = [stackctl.launch_run("trajectories", f"oracle|{s}", url=url, checks=False) for s in range(shards)]
        for rid in ids:
            assert stackctl.wait_run(rid, timeout=1800, url=url) == "SUCCESS", rid
        wall = time.perf_counter() - t0
        os.environ["DAGSTER_PG_PASSWORD"] = (root / "stack" / "pg.secret").read_text().strip()
        from dagster import DagsterEventType, DagsterInstance
        from dagster._core.instance.ref import InstanceRef

        inst = DagsterInstance.from_ref(InstanceRef.from_dir(str(root / "stack" / "home")))
        queue_to_start, container_to_start = [], []
        for rid in ids:
            ts = {}
            for e in inst.all_logs(rid):
                if e.dagster_event and e.dagster_event.event_type not in ts:
                    ts[e.dagster_event.event_type] = e.timestamp
            queue_to_start.append(ts[DagsterEventType.RUN_START] - ts[DagsterEventType.RUN_ENQUEUED])
            container_to_start.append(ts[DagsterEventType.RUN_START] - ts[DagsterEventType.RUN_STARTING])
        inst.dispose()
        return wall, _count(data, shards), queue_to_start, container_to_start
    finally:
        subprocess.run(["bash", *sh, "down"], env=env, capture_output=True, text=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=48)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--max-runs", type=int, default=2)
    a = ap.parse_args()
    (REPO / "data").mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="stack-bench-", dir=REPO / "data"))  # reachable by the postgres user
    root.chmod(0o755)
    try:
        tasks = _tasks(a.tasks)
        d_in, d_l = root / "inproc", root / "launched"
        _seed(d_in, tasks)
        _seed(d_l, tasks)
        w_in, n_in = in_process(d_in, a.shards)
        print(f"in-process: {n_in} oracle rollouts in {w_in:.1f} s = {n_in / w_in:.2f}/s", flush=True)
        w_l, n_l, q2s, c2s = launched(root, d_l, a.shards, a.max_runs)
        print(f"launched:   {n_l} oracle rollouts in {w_l:.1f} s = {n_l / w_l:.2f}/s "
              f"({a.shards} runs, queue limit {a.max_runs})")
        assert n_in == n_l == len(tasks), (n_in, n_l)
        print(f"ratio launched/in-process: {(n_l / w_l) / (n_in / w_in):.2f} (goal >= 0.8)")
        print(f"run launch latency: enqueue->start median {statistics.median(q2s):.1f} s "
              f"(max {max(q2s):.1f}); container start + code load (STARTING->START) median "
              f"{statistics.median(c2s):.1f} s (max {max(c2s):.1f})")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
