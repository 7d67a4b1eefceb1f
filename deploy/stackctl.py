"""A small client of the stack's webserver (GraphQL), used by tests/test_stack.py, benchmarks/stack_throughput.py
and docs/DEPLOY.md: everything goes through the webserver and the daemon's run queue, as a user's would.

    python deploy/stackctl.py partitions policy oracle noop
    python deploy/stackctl.py backfill trajectories 'oracle|0' 'noop|1' ...   # prints the backfill id
    python deploy/stackctl.py run trajectories 'oracle|0' [--config JSON]     # prints the run id
    python deploy/stackctl.py reexecute RUN_ID [--all-steps]                  # prints the new run id
    python deploy/stackctl.py wait-backfill ID | wait-run ID

URL: $CLAWGYM_STACK_URL (default http://127.0.0.1:$CLAWGYM_STACK_PORT or :3300). Needs only httpx.
"""

import json
import os
import sys
import time

import httpx

LOCATION = "clawgym"  # deploy/workspace.yaml location_name
REPOSITORY = "__repository__"
ASSET_JOB = "__ASSET_JOB"
FINISHED = {"SUCCESS", "FAILURE", "CANCELED"}


def default_url() -> str:
    """$CLAWGYM_STACK_URL, else the webserver on 127.0.0.1:$CLAWGYM_STACK_PORT (3300)."""
    return os.environ.get("CLAWGYM_STACK_URL") or f"http://127.0.0.1:{os.environ.get('CLAWGYM_STACK_PORT', '3300')}"


class StackError(RuntimeError):
    """The webserver refused a request, or a run/backfill did not finish in time."""


def gql(query: str, variables: dict | None = None, url: str | None = None, timeout: float = 120.0) -> dict:
    """One GraphQL request; GraphQL errors raise StackError."""
    r = httpx.post(f"{url or default_url()}/graphql", json={"query": query, "variables": variables or {}},
                   timeout=timeout)
    r.raise_for_status()
    body = r.json()
    if body.get("errors"):
        raise StackError(json.dumps(body["errors"])[:2000])
    return body["data"]


def _ok(res: dict, want: str) -> dict:
    if res.get("__typename") != want:
        raise StackError(f"{res.get('__typename')}: {json.dumps(res)[:2000]}")
    return res


def add_partitions(name: str, keys, url: str | None = None) -> None:
    """Add dynamic partition keys (e.g. policy: oracle, noop); existing keys are fine."""
    q = """mutation($r: RepositorySelector!, $n: String!, $k: String!) {
      addDynamicPartition(repositorySelector: $r, partitionsDefName: $n, partitionKey: $k) {
        __typename ... on PythonError { message } ... on UnauthorizedError { message }
        ... on DuplicateDynamicPartitionError { partitionName } } }"""
    for k in keys:
        res = gql(q, {"r": {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY}, "n": name, "k": k},
                  url)["addDynamicPartition"]
        if res["__typename"] not in ("AddDynamicPartitionSuccess", "DuplicateDynamicPartitionError"):
            raise StackError(json.dumps(res))


def launch_backfill(asset: str, partitions, url: str | None = None, tags: dict | None = None) -> str:
    """An asset backfill of `partitions` of `asset`; the daemon submits one run per partition to the queue."""
    q = """mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
      __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message stack }
      ... on InvalidSubsetError { message } ... on UnauthorizedError { message } } }"""
    p = {"partitionNames": list(partitions), "assetSelection": [{"path": asset.split("/")}], "fromFailure": False,
         "tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]}
    return _ok(gql(q, {"p": p}, url)["launchPartitionBackfill"], "LaunchBackfillSuccess")["backfillId"]


def partition_tags(key: str, dims=("policy", "shard")) -> dict:
    """The run tags Dagster puts on a run of one multi-partition key ("policy|shard")."""
    tags = {"dagster/partition": key}
    for d, v in zip(sorted(dims), key.split("|")):
        tags[f"dagster/partition/{d}"] = v
    return tags


def launch_run(asset: str, partition: str | None = None, run_config: dict | None = None, url: str | None = None,
               tags: dict | None = None, checks: bool = True) -> str:
    """One run of `asset` (one partition) through the queue; checks=False leaves its asset checks out; -> run id."""
    q = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename
      ... on LaunchRunSuccess { run { runId } } ... on PythonError { message stack }
      ... on RunConfigValidationInvalid { errors { message } } ... on InvalidSubsetError { message }
      ... on UnauthorizedError { message } ... on PipelineNotFoundError { message } } }"""
    t = {**(partition_tags(partition) if partition and "|" in partition else
            ({"dagster/partition": partition} if partition else {})), **(tags or {})}
    p = {"selector": {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY, "jobName": ASSET_JOB,
                      "assetSelection": [{"path": asset.split("/")}],
                      **({} if checks else {"assetCheckSelection": []})},
         "runConfigData": run_config or {},
         "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in t.items()]}}
    return _ok(gql(q, {"p": p}, url)["launchRun"], "LaunchRunSuccess")["run"]["runId"]


def reexecute(run_id: str, strategy: str = "FROM_FAILURE", url: str | None = None) -> str:
    """Re-execute a finished run (UI "Re-execute"; FROM_FAILURE or ALL_STEPS) through the queue, with its config
    and partition tags; -> the new run id."""
    q = """mutation($p: ReexecutionParams!) { launchRunReexecution(reexecutionParams: $p) { __typename
      ... on LaunchRunSuccess { run { runId } } ... on PythonError { message stack }
      ... on RunConfigValidationInvalid { errors { message } } ... on UnauthorizedError { message } } }"""
    res = gql(q, {"p": {"parentRunId": run_id, "strategy": strategy}}, url)["launchRunReexecution"]
    return _ok(res, "LaunchRunSuccess")["run"]["runId"]


def run_status(run_id: str, url: str | None = None) -> str:
    """QUEUED, STARTING, STARTED, SUCCESS, FAILURE, CANCELED, ..."""
    q = """query($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }"""
    return gql(q, {"id": run_id}, url)["runOrError"].get("status", "?")


def backfill(backfill_id: str, url: str | None = None) -> dict:
    """The backfill's status and its runs (id, status, tags)."""
    q = """query($id: String!) { partitionBackfillOrError(backfillId: $id) { __typename
      ... on PartitionBackfill { status numPartitions runs(limit: 100) { runId status tags { key value } } } } }"""
    return gql(q, {"id": backfill_id}, url)["partitionBackfillOrError"]


def wait_run(run_id: str, timeout: float = 600, url: str | None = None) -> str:
    """Until the run finished; -> its final status."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        s = run_status(run_id, url)
        if s in FINISHED:
            return s
        time.sleep(1)
    raise StackError(f"run {run_id} not finished after {timeout:.0f} s (status {s})")


def wait_backfill(backfill_id: str, timeout: float = 600, url: str | None = None) -> dict:
    """Until the backfill is no longer REQUESTED and each of its runs finished; -> the backfill."""
    end = time.monotonic() + timeout
    b: dict = {}
    while time.monotonic() < end:
        b = backfill(backfill_id, url)
        if b.get("status") not in (None, "REQUESTED") and all(r["status"] in FINISHED for r in b.get("runs", [])):
            return b
        time.sleep(1)
    raise StackError(f"backfill {backfill_id} not finished after {timeout:.0f} s: {json.dumps(b)[:1500]}")


def main(argv: list[str]) -> int:
    """The command line (module docstring)."""
    import argparse

    ap = argparse.ArgumentParser(prog="stackctl", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("partitions")
    s.add_argument("name")
    s.add_argument("keys", nargs="+")
    s = sub.add_parser("backfill")
    s.add_argument("asset")
    s.add_argument("partitions", nargs="+")
    s = sub.add_parser("run")
    s.add_argument("asset")
    s.add_argument("partition", nargs="?")
    s.add_argument("--config", default="{}")
    s = sub.add_parser("reexecute")
    s.add_argument("id")
    s.add_argument("--all-steps", action="store_true")
    s = sub.add_parser("wait-backfill")
    s.add_argument("id")
    s = sub.add_parser("wait-run")
    s.add_argument("id")
    a = ap.parse_args(argv)
    if a.cmd == "partitions":
        add_partitions(a.name, a.keys)
    elif a.cmd == "backfill":
        print(launch_backfill(a.asset, a.partitions))
    elif a.cmd == "run":
        print(launch_run(a.asset, a.partition, json.loads(a.config)))
    elif a.cmd == "reexecute":
        print(reexecute(a.id, "ALL_STEPS" if a.all_steps else "FROM_FAILURE"))
    elif a.cmd == "wait-backfill":
        b = wait_backfill(a.id)
        print(json.dumps({"status": b["status"], "runs": {r["runId"]: r["status"] for r in b["runs"]}}, indent=1))
    elif a.cmd == "wait-run":
        print(wait_run(a.id))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
