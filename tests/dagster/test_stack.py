"""The production-shaped stack end to end: `scripts/stack.sh up` (Postgres storage, daemon, webserver,
QueuedRunCoordinator, DockerRunLauncher + the offline-built project image), runs submitted through the webserver's
GraphQL API and the daemon's run queue, executed in launched containers that start their sandboxes as sibling
containers; a killed run container resumes without redoing finished rollouts; `stack.sh down` leaves nothing.

One module-scoped stack on its own ports, stack dir and data dir (never the repository's data/stack)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "deploy"))
import stackctl  # noqa: E402

pytestmark = [pytest.mark.stack, pytest.mark.docker, pytest.mark.timeout(900)]

SHARDS = 4
MAX_RUNS = 2
POLICIES = ("oracle", "noop")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sh(args, env, timeout=900):
    p = subprocess.run(["bash", str(REPO / "scripts" / "stack.sh"), *args], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=timeout)
    return p


def _tasks():
    from clawgym.agent.demo import demo_tasks

    train = [t.model_copy(update={"task_id": f"{t.task_id}-{i}", "split": "train"})
             for i in range(6) for t in demo_tasks()]
    bench = [t.model_copy(update={"task_id": f"{t.task_id}-bench", "split": "bench"}) for t in demo_tasks()]
    return train, bench


@pytest.fixture(scope="module")
def stack():
    if os.geteuid() != 0:
        pytest.skip("the stack runs Postgres as the postgres user and binds host paths: needs root")
    from clawgym.sandbox import images
    from clawgym.sandbox.base import SandboxError

    try:
        os.environ["DOCKER_HOST"] = images.ensure_docker()  # this test is an entry point: its clients use that engine
    except SandboxError as e:
        pytest.skip(f"no Docker engine can start on this machine: {e}")
    images.ensure_image()  # the sandbox image (and its rootfs, which the project image starts from)
    from clawgym import lake as lk
    from clawgym.lake.records import task_row

    (REPO / "data").mkdir(exist_ok=True)
    sdir = Path(tempfile.mkdtemp(prefix="stack-test-", dir=REPO / "data"))  # reachable by the postgres user
    sdir.chmod(0o755)
    data = sdir / "data"
    tasks, bench = _tasks()
    lk.write_table("tasks", [task_row(t, "synthetic") for t in tasks + bench], {"source": "synthetic"},
                   root=data / "lake")
    env = {**os.environ, "CLAWGYM_STACK_DIR": str(sdir), "CLAWGYM_DATA": str(data),
           "CLAWGYM_PG_PORT": str(_free_port()), "CLAWGYM_STACK_PORT": str(_free_port()),
           "CLAWGYM_SHARDS": str(SHARDS), "CLAWGYM_STACK_MAX_RUNS": str(MAX_RUNS),
           "DOCKER_HOST": os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"}
    url = f"http://127.0.0.1:{env['CLAWGYM_STACK_PORT']}"
    import docker

    client = docker.from_env()
    volumes_before = {v.name for v in client.volumes.list()}
    t0 = time.monotonic()
    p = _sh(["up"], env)
    info = {"dir": sdir, "data": data, "env": env, "url": url, "tasks": tasks, "bench": bench, "client": client,
            "volumes_before": volumes_before, "up_s": time.monotonic() - t0, "down": False}
    try:
        assert p.returncode == 0, f"stack.sh up failed:\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
        stackctl.add_partitions("policy", POLICIES, url)
        stackctl.add_partitions("model", ["oracle"], url)
        # the bench suite, queued now so it is ready by the bench_scores test (the queue runs it beside the others)
        info["bench_tasks_run"] = stackctl.launch_run("bench_tasks", "procedural", url=url)
        yield info
    finally:
        if not info["down"]:
            _sh(["down"], env)
        client.close()
        shutil.rmtree(sdir, ignore_errors=True)


def _instance(stack):
    from dagster import DagsterInstance
    from dagster._core.instance.ref import InstanceRef

    os.environ["DAGSTER_PG_PASSWORD"] = (stack["dir"] / "pg.secret").read_text().strip()
    return DagsterInstance.from_ref(InstanceRef.from_dir(str(stack["dir"] / "home")))


def _rows(stack, policy, shard):
    from clawgym import lake as lk

    try:
        t = lk.read_table("trajectories", {"policy": policy, "shard": shard}, root=stack["data"] / "lake")
        return t.to_pylist()
    except Exception:
        return []


def _shard_tasks(stack, shard):
    from clawgym.agent.resume import shard_of

    return sorted(t.task_id for t in stack["tasks"] if shard_of(t.task_id, SHARDS) == shard)


def test_stack_is_up_with_postgres_queue_and_docker_launcher(stack):
    p = _sh(["status"], stack["env"], timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "postgres   running" in p.stdout and "daemon     running" in p.stdout
    inst = _instance(stack)
    try:
        assert type(inst.run_storage).__name__ == "PostgresRunStorage"
        assert type(inst.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(inst.schedule_storage).__name__ == "PostgresScheduleStorage"
        assert type(inst.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert type(inst.run_launcher).__name__ == "DockerRunLauncher"
        assert inst.get_concurrency_config().run_queue_config.max_concurrent_runs == MAX_RUNS
    finally:
        inst.dispose()
    # the UI the stack serves answers and lists the code location
    data = stackctl.gql("{ workspaceOrError { ... on Workspace { locationEntries { name } } } }", url=stack["url"])
    assert [e["name"] for e in data["workspaceOrError"]["locationEntries"]] == ["clawgym"]


def _biggest_shard(stack):
    return max(range(SHARDS), key=lambda s: len(_shard_tasks(stack, s)))


def test_killed_run_container_resumes_without_redoing_finished_rollouts(stack):
    shard = _biggest_shard(stack)
    mine = _shard_tasks(stack, shard)
    assert len(mine) >= 5
    key = f"oracle|{shard}"
    cfg = {"ops": {"trajectories": {"config": {"batch_size": 1}}}}  # one part file per rollout
    run1 = stackctl.launch_run("trajectories", key, cfg, url=stack["url"])
    inst = _instance(stack)
    client = stack["client"]
    try:
        deadline = time.monotonic() + 240
        cid = None
        while time.monotonic() < deadline:  # wait until some, not all, rollouts of the partition are written
            run = inst.get_run_by_id(run1)
            cid = cid or run.tags.get("docker/container_id")
            n = len(_rows(stack, "oracle", shard))
            if cid and 1 <= n < len(mine):
                break
            assert n < len(mine), "the run finished before it could be killed"
            time.sleep(0.1)
        else:
            pytest.fail(f"no rollout of {key} written within 240 s (run {run1})")
        client.containers.get(cid).kill()  # SIGKILL mid-partition: the run's process and its sandboxes' owner
        killed_rows = _rows(stack, "oracle", shard)
        done_before = {r["task_id"] for r in killed_rows if r["failure_class"] != "infra"}
        assert 1 <= len(done_before) < len(mine)
        # run monitoring notices the dead container and fails the run
        assert stackctl.wait_run(run1, timeout=120, url=stack["url"]) == "FAILURE"
        assert client.containers.get(cid).status == "exited"
        # re-executing the run (UI "Re-execute from failure": again through the queue, in a new container) resumes
        run2 = stackctl.reexecute(run1, url=stack["url"])
        assert stackctl.wait_run(run2, timeout=300, url=stack["url"]) == "SUCCESS"
        r2 = inst.get_run_by_id(run2)
        assert r2.parent_run_id == run1 and r2.tags["dagster/partition"] == key
        assert r2.tags["docker/container_id"] != cid
    finally:
        inst.dispose()
    rows = _rows(stack, "oracle", shard)
    by_run = {}
    for r in rows:
        by_run.setdefault(r["run_id"], []).append(r["task_id"])
    assert set(by_run) <= {run1, run2}
    redone = set(by_run.get(run2, [])) & done_before
    assert not redone, f"finished rollouts were redone: {sorted(redone)}"
    assert {r["task_id"] for r in rows} == set(mine)  # every task rolled out once the resume finished
    assert sorted(r["task_id"] for r in rows if r["failure_class"] != "infra") == mine  # each finished exactly once
    assert all(r["score"] == 1.0 for r in rows if r["failure_class"] == "ok")


def test_bench_scores_through_the_stack(stack):
    from clawgym import lake as lk

    assert stackctl.wait_run(stack["bench_tasks_run"], timeout=300, url=stack["url"]) == "SUCCESS"
    rid = stackctl.launch_run("bench_scores", "oracle", url=stack["url"])
    assert stackctl.wait_run(rid, timeout=300, url=stack["url"]) == "SUCCESS"
    inst = _instance(stack)
    try:
        assert inst.get_run_by_id(rid).tags.get("docker/container_id")
    finally:
        inst.dispose()
    root = stack["data"] / "lake"
    results = lk.read_table("bench_results", {"model": "oracle"}, root=root).to_pylist()
    assert sorted(r["task_id"] for r in results) == sorted(t.task_id for t in stack["bench"])
    assert {r["run_id"] for r in results} == {rid}
    overall = [r for r in lk.read_table("bench_scores", {"model": "oracle"}, root=root).to_pylist()
               if r["category"] == "overall"]
    assert overall and overall[0]["mean"] == 100.0


def test_backfill_runs_as_launched_containers_under_the_queue_limit(stack):
    from dagster import DagsterRunStatus, RunsFilter

    keys = [f"{p}|{s}" for p in POLICIES for s in range(SHARDS)]
    inst = _instance(stack)
    t0 = time.monotonic()
    bid = stackctl.launch_backfill("trajectories", keys, url=stack["url"])
    b = stackctl.wait_backfill(bid, timeout=600, url=stack["url"])
    wall = time.monotonic() - t0
    try:
        assert b["status"] == "COMPLETED_SUCCESS", json.dumps(b)[:2000]
        records = inst.get_run_records(RunsFilter(tags={"dagster/backfill": bid}))
        assert sorted(r.dagster_run.tags["dagster/partition"] for r in records) == sorted(keys)
        for r in records:  # every run was launched in its own container of the project image
            assert r.dagster_run.status == DagsterRunStatus.SUCCESS
            assert r.dagster_run.tags.get("docker/container_id")
            assert r.dagster_run.tags.get("dagster/image") == "clawgym-project:latest"
        assert len({r.dagster_run.tags["docker/container_id"] for r in records}) == len(keys)
        stack["backfill"], stack["backfill_runs"] = bid, [r.dagster_run.run_id for r in records]
        timeline = _queue_timeline(inst, [r.dagster_run.run_id for r in records])
        # every other run of the instance holds slots of the same queue (the bench run the fixture queued, the
        # re-executed run, a run the checkpoint sensor launched): a slot count of the backfill's runs alone would
        # read a queue that one of those keeps half full as a queue that never filled
        others = _queue_timeline(inst, [r.dagster_run.run_id for r in inst.get_run_records()
                                        if r.dagster_run.run_id not in timeline], partial=True)
    finally:
        inst.dispose()
    every = {**others, **timeline}
    # the queue as the run records in Postgres say it was (no polling that can miss a moment): a run holds a slot
    # from its dequeue to its end; never more than MAX_RUNS slots are held at once ...
    held = lambda t, skip=None: sum(1 for rid, (_, d, e) in every.items() if rid != skip and d <= t < e)  # noqa: E731
    overlap = max(held(d) for _, d, _ in every.values())
    assert overlap <= MAX_RUNS, _fmt_timeline(every, timeline)
    # ... and the limit bit: some run sat in the queue while every slot was held. The slots held change only at a
    # dequeue (up) or an end (down), so their most over a run's wait [enqueued, dequeued) is at its enqueue or at a
    # dequeue of another run inside that wait
    def full_while_queued(rid, q, d):
        moments = [q] + [d2 for r2, (_, d2, _) in timeline.items() if r2 != rid and q <= d2 < d]
        return any(held(t, rid) >= MAX_RUNS for t in moments)

    waited = [rid for rid, (q, d, _) in timeline.items() if full_while_queued(rid, q, d)]
    assert waited, "no run ever waited in a full queue:\n" + _fmt_timeline(every, timeline)
    n_rollouts = 0
    for p in POLICIES:
        for s in range(SHARDS):
            rows = [r for r in _rows(stack, p, s) if r["failure_class"] != "infra"]
            assert sorted(r["task_id"] for r in rows) == _shard_tasks(stack, s), (p, s)
            n_rollouts += len(rows)
            if p == "oracle":
                assert all(r["score"] == 1.0 for r in rows)
            else:
                assert all(r["score"] < 1.0 for r in rows)
    print(f"\nstack: up {stack['up_s']:.0f} s; backfill of {len(keys)} partitions ({n_rollouts} rollouts) "
          f"in {wall:.0f} s, max overlap {overlap}, {len(waited)} runs waited in the full queue")


def _queue_timeline(inst, run_ids, partial: bool = False) -> dict:
    """run id -> (enqueued, dequeued, ended): the run coordinator's own events, as the instance recorded them.
    partial: keep runs that were dequeued but have not ended (they hold their slot to the end of time) and leave
    out runs that never left the queue, instead of failing on them."""
    from dagster import DagsterEventType

    # RUN_STARTING: the coordinator took the run off the queue and handed it to the launcher (it holds a slot)
    kinds = {DagsterEventType.RUN_ENQUEUED: 0, DagsterEventType.RUN_STARTING: 1, DagsterEventType.RUN_SUCCESS: 2,
             DagsterEventType.RUN_FAILURE: 2, DagsterEventType.RUN_CANCELED: 2}
    out = {}
    for rid in run_ids:
        t = [None, None, None]
        for e in inst.all_logs(rid, of_type=set(kinds)):
            t[kinds[e.dagster_event.event_type]] = e.timestamp
        if partial:
            if t[1] is None:
                continue
            t[0] = t[1] if t[0] is None else t[0]  # a run launched past the queue enqueues nothing
            t[2] = float("inf") if t[2] is None else t[2]
        assert None not in t, f"run {rid}: enqueue/starting/end events missing: {t}"
        out[rid] = tuple(t)
    return out


def _fmt_timeline(timeline: dict, mine: dict | None = None) -> str:
    """The timeline, one run a line; runs outside `mine` (when given) are marked as not the backfill's."""
    t0 = min(q for q, _, _ in timeline.values())
    return "\n".join(f"  {rid[:8]} enqueued {q - t0:7.2f}  dequeued {d - t0:7.2f}  ended {e - t0:7.2f}"
                     + ("" if mine is None or rid in mine else "  (not the backfill's)")
                     for rid, (q, d, e) in sorted(timeline.items(), key=lambda kv: kv[1]))


@pytest.mark.browser
def test_ui_served_by_the_stack_shows_the_launched_runs(stack):
    chromium = os.environ.get("CLAWGYM_CHROMIUM", "/usr/bin/chromium")
    if not Path(chromium).exists():
        pytest.skip(f"chromium not found at {chromium}")
    if not stack.get("backfill_runs"):
        pytest.skip("the backfill test did not run")
    from playwright.sync_api import sync_playwright

    shots = REPO / "data" / "ui"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1800, "height": 1400})
            page.set_default_timeout(90_000)
            page.goto(f"{stack['url']}/runs")  # the feed lists the backfill (its runs fold into it)
            page.get_by_text(stack["backfill"]).first.wait_for()
            page.screenshot(path=str(shots / "stack_runs.png"), full_page=True)
            page.goto(f"{stack['url']}/runs/b/{stack['backfill']}?tab=runs")
            first = stack["backfill_runs"][0][:8]  # the UI shows run ids by their first 8 characters
            page.get_by_text(first).first.wait_for()
            page.wait_for_timeout(2000)
            page.screenshot(path=str(shots / "stack_backfill_runs.png"), full_page=True)
            body = page.inner_text("body")
            missing = [r[:8] for r in stack["backfill_runs"] if r[:8] not in body]
            assert not missing, f"runs not listed in the UI: {missing}"
            assert "Success" in body and "docker/container_id" in body  # launched: each run names its container
        finally:
            browser.close()


def test_down_leaves_no_container_volume_mount_or_process(stack):
    client, sdir = stack["client"], str(stack["dir"])
    p = _sh(["down"], stack["env"], timeout=300)
    stack["down"] = True
    assert p.returncode == 0, p.stdout + p.stderr
    left = []
    for c in client.containers.list(all=True):
        mounts = [m.get("Source", "") for m in c.attrs.get("Mounts", [])]
        if any(m.startswith(sdir) for m in mounts) or c.labels.get("clawgym.stack"):
            left.append((c.name, c.status))
    assert not left, f"containers left: {left}"
    assert {v.name for v in client.volumes.list()} <= stack["volumes_before"]
    with open("/proc/self/mounts") as f:
        assert not [ln for ln in f if ln.split()[1].startswith(sdir)]
    procs = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            env = Path(f"/proc/{d}/environ").read_bytes()
        except OSError:
            continue
        if sdir.encode() in cmd or f"DAGSTER_HOME={sdir}".encode() in env:
            procs.append((d, cmd.replace(b"\0", b" ")[:120]))
    assert not procs, f"processes left: {procs}"
    for port in (stack["env"]["CLAWGYM_PG_PORT"], stack["env"]["CLAWGYM_STACK_PORT"]):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", int(port))) != 0, f"port {port} still answers"
    p = _sh(["status"], stack["env"], timeout=60)
    assert p.returncode == 3 and "stopped" in p.stdout
