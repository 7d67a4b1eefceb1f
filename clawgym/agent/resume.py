"""One shard of rollouts, resumable: the tasks of a (policy, shard) partition, the ones already finished skipped,
the rest rolled out and appended in batches (a crash loses at most one batch).

    tasks = shard_tasks(all_tasks, rejected_ids, shard, n_shards)
    report = run_shard(tasks, prior_rows, spec, open_factory, policy="oracle", shard=0, settings=settings,
                       append=lambda rows: lake.append(Table.TRAJECTORIES, rows, part))

Finished = any failure class but infra (clawgym.lake.records.finished_keys): an infra-only task is run again and
its earlier rows stay as history (readers take the latest non-infra row per task: effective_rows).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any


def shard_of(task_id: str, n_shards: int) -> int:
    """Stable shard of a task (sha1, not Python's salted hash())."""
    return int(hashlib.sha1(task_id.encode()).hexdigest(), 16) % max(1, n_shards)


def shard_tasks(tasks: Iterable, rejected: set, shard: int, n_shards: int, limit: int = 0) -> list:
    """The train tasks of `shard` (of `n_shards`) not in `rejected`, sorted by task_id; the first `limit`
    when it is positive."""
    out = sorted((t for t in tasks if t.split == "train" and t.task_id not in rejected
                  and shard_of(t.task_id, n_shards) == shard), key=lambda t: t.task_id)
    return out[:limit] if limit else out


@dataclass
class ShardReport:
    """What one run over a shard did."""

    n_tasks: int = 0  # tasks of the shard
    n_finished: int = 0  # skipped: a finished rollout was already stored
    n_retried_infra: int = 0  # run again: only infra rows so far
    n_todo: int = 0
    n_written: int = 0  # rows appended by this run


def resume_plan(tasks: Sequence, prior: Iterable[Mapping[str, Any]]) -> tuple[list, set, int]:
    """(tasks to run, task_ids finished, how many of the tasks to run are infra retries) given the partition's
    stored rows (task_id, failure_class, score; lake-encoded strings)."""
    from clawgym.lake.codec import decode_text
    from clawgym.lake.records import finished_keys

    prior = list(prior)
    done = {decode_text(t) for t in finished_keys(prior)}
    seen = {decode_text(r["task_id"]) for r in prior}
    todo = [t for t in tasks if t.task_id not in done]
    return todo, done, sum(1 for t in todo if t.task_id in seen)


def run_shard(tasks: Sequence, prior: Iterable[Mapping[str, Any]], policy_spec,
              open_factory: Callable[[], AbstractContextManager], *, policy: str, shard: int, settings=None, judge=None,
              run_id: str = "", batch_size: int = 4, append: Callable[[list[dict]], Any],
              log: Callable[[str], Any] | None = None) -> ShardReport:
    """Roll out the tasks of one (policy, shard) partition that have no finished rollout in `prior`, with one
    endpoint for `policy_spec` (a PolicySpec or a registry name) and sandboxes of `open_factory()` (entered only
    when there is something to run), each rollout as `settings` (RolloutSettings) say; trajectories rows go to
    `append` every `batch_size` rollouts."""
    from clawgym.agent.policies import get_policy, open_endpoint
    from clawgym.agent.rollout import RolloutSettings, run_rollout
    from clawgym.agent.runtimes import get_runtime

    todo, done, n_retry = resume_plan(tasks, prior)
    rep = ShardReport(n_tasks=len(tasks), n_finished=len(done), n_retried_infra=n_retry, n_todo=len(todo))
    if log:
        log(f"{policy}|{shard}: {len(tasks)} tasks, {len(done)} finished, {n_retry} infra to retry, "
            f"{len(todo)} to run")
    if not todo:
        return rep
    batch: list[dict] = []

    def flush() -> None:
        append(list(batch))
        rep.n_written += len(batch)
        batch.clear()

    settings = settings or RolloutSettings()
    # one runtime for the shard: closed before the factory
    with open_factory() as factory, open_endpoint(get_policy(policy_spec), todo) as ep, \
            get_runtime(settings.runtime) as rt:
        for t in todo:
            ro = run_rollout(t, ep, factory, settings, judge=judge, runtime=rt)
            ro.policy = policy
            batch.append(ro.to_row(shard=shard, run_id=run_id))
            if len(batch) >= max(1, batch_size):
                flush()
    if batch:
        flush()
    return rep


__all__ = ["ShardReport", "resume_plan", "run_shard", "shard_of", "shard_tasks"]
