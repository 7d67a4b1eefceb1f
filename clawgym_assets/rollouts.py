"""Rollouts domain: trajectories (policy × shard), steps, the SFT dataset."""

import json
from typing import List

import dagster as dg

from clawgym.lake.records import counts, group_mean, tasks_from_table
from clawgym_assets._util import md_counts, md_histogram, md_table
from clawgym_assets.partitions import N_SHARDS, trajectory_partitions
from clawgym_assets.synthesis import verifiers
from clawgym_resources import JudgeResource, LakeResource, ModelEndpointsResource, OpenClawResource, SandboxResource

GROUP = "rollouts"


class TrajectoriesConfig(dg.Config):
    sources: List[str] = ["synthetic"]  # which task sources to roll out (train split only)
    max_turns: int = 30
    max_wall_s: float = 600.0
    max_completion_tokens: int = 1024
    batch_size: int = 4  # rollouts per appended part file (the resume granularity)
    limit: int = 0  # 0 = every task of the shard


def _partition(context) -> tuple:
    keys = context.partition_key.keys_by_dimension
    return keys["policy"], int(keys["shard"])


def train_tasks_for_shard(lake: LakeResource, sources, shard: int, n_shards: int = N_SHARDS):
    from clawgym.bench.runner import shard_of

    rejected = set(lake.read("rejected_tasks").column("task_id").to_pylist())
    out = []
    for s in sources:
        for t in tasks_from_table(lake.read("tasks", {"source": s})):
            if t.split == "train" and t.task_id not in rejected and shard_of(t.task_id, n_shards) == shard:
                out.append(t)
    return sorted(out, key=lambda t: t.task_id)


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, partitions_def=trajectory_partitions, deps=[verifiers],
          pool="sandboxes",
          description="One row per rollout (messages, tool calls, tokens, timings, diff, verifier result, failure "
                      "class). Partitioned policy|shard (shard = sha1(task_id) % N). Resumable: task_ids already "
                      "in the partition are skipped.")
def trajectories(context: dg.AssetExecutionContext, config: TrajectoriesConfig, lake: LakeResource,
                 sandbox: SandboxResource, endpoints: ModelEndpointsResource, judge: JudgeResource,
                 openclaw: OpenClawResource) -> dg.MaterializeResult:
    from clawgym.agent.loop import Limits
    from clawgym.agent.policies import open_endpoint
    from clawgym.agent.rollout import run_rollout

    policy, shard = _partition(context)
    part = {"policy": policy, "shard": shard}
    tasks = train_tasks_for_shard(lake, config.sources, shard)
    if config.limit:
        tasks = tasks[: config.limit]
    done = lake.values("trajectories", "task_id", part)
    todo = [t for t in tasks if t.task_id not in done]
    context.log.info(f"{policy}|{shard}: {len(tasks)} tasks, {len(done)} already written, {len(todo)} to run")
    spec = endpoints.policy(policy)
    limits = Limits(max_turns=config.max_turns, max_wall_s=config.max_wall_s,
                    max_completion_tokens=config.max_completion_tokens)
    batch: list = []
    written = 0
    if todo:
        with sandbox.factory() as factory, open_endpoint(spec, todo) as ep:
            for t in todo:
                ro = run_rollout(t, ep, factory, limits=limits, judge=judge.judge(), runtime=openclaw.runtime(),
                                 openclaw_opts=openclaw.opts())
                ro.policy = policy
                batch.append(ro.to_row(shard=shard, run_id=context.run.run_id))
                if len(batch) >= config.batch_size:
                    lake.append("trajectories", batch, part)
                    written += len(batch)
                    batch = []
        if batch:
            lake.append("trajectories", batch, part)
            written += len(batch)
    rows = lake.read("trajectories", part).to_pylist()
    return dg.MaterializeResult(metadata={
        "n_rollouts": len(rows), "n_new": written, "n_skipped_resume": len(done),
        "mean_score": (sum(r["score"] or 0 for r in rows) / len(rows)) if rows else None,
        "failure_classes": md_counts("failure_class", counts(r["failure_class"] for r in rows)),
        "mean_score_by_category": md_table(["category", "mean score"],
                                           list(group_mean(rows, "category", "score").items())),
        "score_histogram": md_histogram([r["score"] for r in rows], title="score"),
    })


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, partitions_def=trajectory_partitions, deps=[trajectories],
          description="One row per tool call of every trajectory in the partition (call, arguments, result).")
def steps(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    from clawgym.agent.rollout import Rollout

    policy, shard = _partition(context)
    part = {"policy": policy, "shard": shard}
    out = []
    for r in lake.read("trajectories", part).to_pylist():
        ro = Rollout(rollout_id=r["rollout_id"], task_id=r["task_id"], policy=policy,
                     messages=json.loads(r["messages_json"] or "[]"))
        out += ro.steps(shard=shard)
    lake.write("steps", out, part)
    return dg.MaterializeResult(metadata={
        "n_steps": len(out), "by_tool": md_counts("tool", counts(s["tool_name"] for s in out)),
    })


class SftConfig(dg.Config):
    min_score: float = 1.0  # keep trajectories scoring at least this
    max_tokens: int = 8192
    policies: List[str] = []  # [] = every policy in the lake
    contamination_threshold: float = 0.9  # vs bench tasks (all-MiniLM-L6-v2 cosine)


@dg.asset(group_name=GROUP, kinds={"python", "parquet"},
          deps=[dg.AssetDep(trajectories, partition_mapping=dg.AllPartitionMapping()), "base_model"],
          description="Cleaned multi-turn SFT rows (OpenAI `messages` + `tools`) from successful trajectories; "
                      "heartbeat/cron turns dropped, duplicates and bench-contaminated tasks removed.")
def sft_dataset(context: dg.AssetExecutionContext, config: SftConfig, lake: LakeResource,
                endpoints: ModelEndpointsResource) -> dg.MaterializeResult:
    from clawgym.trajectories.sft import SFTCleanConfig, build_sft_dataset, save_hf_dataset

    rows = lake.read("trajectories").to_pylist()
    if config.policies:
        rows = [r for r in rows if r["policy"] in config.policies]
    tasks = tasks_from_table(lake.read("tasks", {"source": "synthetic"})) + \
        tasks_from_table(lake.read("tasks", {"source": "imported"}))
    bench = []
    for s in ("procedural", "clawgym", "pinchbench"):
        bench += tasks_from_table(lake.read("tasks", {"source": f"bench_{s}"}))
    bench += [t for t in tasks if t.split == "bench"]
    cfg = SFTCleanConfig(min_score=config.min_score, max_tokens=config.max_tokens,
                         tokenizer=str(endpoints.base_model_path()),
                         contamination_threshold=config.contamination_threshold)
    res = build_sft_dataset(rows, [t for t in tasks if t.split == "train"], bench, cfg)
    lake.write("sft", res.rows)
    hf_dir = save_hf_dataset(res.rows, lake.path("datasets", "sft"), stats=res.stats) if res.rows else None
    stats = {k: v for k, v in res.stats.items() if k != "config"}
    return dg.MaterializeResult(metadata={
        "n_rows": len(res.rows),
        "hf_dataset": dg.MetadataValue.path(str(hf_dir)) if hf_dir else "(empty)", "n_trajectories_in": len(rows), "n_rejected": len(res.rejected),
        "rejected_by_reason": md_counts("reason", counts(r["reason"] for r in res.rejected)),
        "stats": dg.MetadataValue.json(json.loads(json.dumps(stats, default=str))),
        "by_category": md_counts("category", counts(r.get("category") for r in res.rows)),
    })
