"""Rollouts domain: trajectories (policy × shard), steps, the SFT dataset."""

import json

import dagster as dg

from clawgym.lake import Table
from clawgym.lake.codec import decode_text, loads
from clawgym.lake.records import counts, effective_rows, group_mean, outcome, outcome_counts
from clawgym.tasks.names import check_name
from clawgym_assets._util import failure_on_value_error, md_counts, md_histogram, md_table
from clawgym_assets.defs.lake.resources import LakeResource
from clawgym_assets.defs.rollouts.config import RolloutConfig
from clawgym_assets.defs.rollouts.resources import (
    JudgeResource,
    ModelEndpointsResource,
    OpenClawResource,
    SandboxResource,
)
from clawgym_assets.defs.synthesis.assets import imported_tasks, synthetic_tasks, verifiers
from clawgym_assets.partitions import DEFAULT_SHARDS, SUITES, n_shards_of, trajectory_partitions_def

GROUP = "rollouts"


class TrajectoriesConfig(RolloutConfig):  # + max_turns, max_wall_s, ..., attempts, retries (RolloutConfig)
    sources: list[str] = ["synthetic"]  # which task sources to roll out (train split only)
    batch_size: int = 4  # rollouts per appended part file (the resume granularity)
    limit: int = 0  # 0 = every task of the shard


def _partition(context) -> tuple:
    keys = context.partition_key.keys_by_dimension
    # a policy key may name a folder under checkpoints/ (resolve_policy): one plain name
    with failure_on_value_error():
        return check_name(keys["policy"], "policy partition key"), int(keys["shard"])


def build_rollout_assets(n_shards: int = DEFAULT_SHARDS) -> tuple[dg.AssetsDefinition, dg.AssetsDefinition]:
    """`trajectories` and `steps` over policy × `n_shards` shards (GraphSettings.n_shards, read when the
    definitions load). A task's shard is sha1(task_id) % n_shards with n taken from the partitions definition
    itself, so shard membership and partition keys never disagree."""
    partitions = trajectory_partitions_def(n_shards)
    return _trajectories_asset(partitions), _steps_asset(partitions)


def _trajectories_asset(partitions: dg.MultiPartitionsDefinition) -> dg.AssetsDefinition:
    n_shards = n_shards_of(partitions)

    @dg.asset(name="trajectories", group_name=GROUP, kinds={"python", "parquet"}, partitions_def=partitions,
              deps=[verifiers, synthetic_tasks, imported_tasks],  # rejected_tasks + the tasks of its sources
              pool="sandboxes",
              description="One row per rollout (messages, tool calls, tokens, timings, diff, verifier result, failure "
                          "class). Partitioned policy|shard (shard = sha1(task_id) % N). Resumable: tasks with a "
                          "finished rollout (any class but infra) are skipped; infra rows are retried and kept as "
                          "history (readers use the latest non-infra row per policy, task, repeat).")
    def trajectories(context: dg.AssetExecutionContext, config: TrajectoriesConfig, lake: LakeResource,
                     sandbox: SandboxResource, endpoints: ModelEndpointsResource, judge: JudgeResource,
                     openclaw: OpenClawResource) -> dg.MaterializeResult:
        from clawgym.agent.resume import run_shard, shard_tasks

        policy, shard = _partition(context)
        part = {"policy": policy, "shard": shard}
        tasks = shard_tasks(lake.task_objects(config.sources), lake.rejected_task_ids(), shard, n_shards,
                            limit=config.limit)
        prior = lake.trajectories(policy, shard).select(["task_id", "failure_class", "score"]).to_pylist()
        rep = run_shard(tasks, prior, endpoints.policy(policy), sandbox.factory, policy=policy, shard=shard,
                        settings=config.rollout_settings(openclaw), judge=judge.judge(), run_id=context.run.run_id,
                        batch_size=config.batch_size, append=lambda rows: lake.append(Table.TRAJECTORIES, rows, part),
                        log=context.log.info)
        history = (lake.trajectories(policy, shard)
                   .drop_columns(["messages_json", "diff_json", "tools_json"]).to_pylist())
        rows = effective_rows(history)  # the row that counts per task: latest non-infra, else latest infra
        oc = outcome_counts(rows)
        scored = [r for r in rows if outcome(r) == "scored"]
        return dg.MaterializeResult(metadata={
            "n_rollouts": len(rows), "n_rows_with_history": len(history), "n_new": rep.n_written,
            "n_skipped_resume": rep.n_finished, "n_retried_infra": rep.n_retried_infra,
            "n_scored": oc["n_scored"], "n_infra": oc["n_infra"], "n_unjudged": oc["n_unjudged"],
            "infra_rate": dg.MetadataValue.float(round(oc["infra_rate"], 4)),
            "mean_score": (sum(r["score"] for r in scored) / len(scored)) if scored else None,  # scored rollouts only
            "failure_classes": md_counts("failure_class", counts(r["failure_class"] for r in rows)),
            "mean_score_by_category": md_table(["category", "mean score"],
                                               list(group_mean(scored, "category", "score").items())),
            "score_histogram": md_histogram([r["score"] for r in scored], title="score"),
        })

    return trajectories


def _steps_asset(partitions: dg.MultiPartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(name="steps", group_name=GROUP, kinds={"python", "parquet"}, partitions_def=partitions,
              deps=["trajectories"],
              description="One row per tool call of every trajectory in the partition (call, arguments, result); "
                          "retried infra attempts included (rows carry their rollout_id).")
    def steps(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
        from clawgym.agent.rollout import Rollout

        policy, shard = _partition(context)
        part = {"policy": policy, "shard": shard}
        out = []
        for r in lake.trajectories(policy, shard).to_pylist():
            ro = Rollout(rollout_id=decode_text(r["rollout_id"]), task_id=decode_text(r["task_id"]), policy=policy,
                         messages=loads(r["messages_json"], []))
            out += ro.steps(shard=shard)
        lake.write(Table.STEPS, out, part)
        return dg.MaterializeResult(metadata={
            "n_steps": len(out), "by_tool": md_counts("tool", counts(s["tool_name"] for s in out)),
        })

    return steps


trajectories, steps = build_rollout_assets()  # the default graph's (DEFAULT_SHARDS); definitions may rebuild


class SftConfig(dg.Config):
    min_score: float = 1.0  # keep trajectories scoring at least this
    max_tokens: int = 8192
    policies: list[str] = []  # [] = every policy in the lake
    contamination_threshold: float = 0.9  # vs bench tasks (all-MiniLM-L6-v2 cosine)
    contamination_scope: str = "family"  # family | all | workspace (only the bench task itself; SFTCleanConfig)


@dg.asset(group_name=GROUP, kinds={"python", "parquet"},
          deps=[dg.AssetDep("trajectories", partition_mapping=dg.AllPartitionMapping()), "base_model",
                # the tasks it reads: train tasks, and every bench suite's tasks (contamination filter)
                synthetic_tasks, imported_tasks,
                dg.AssetDep("bench_tasks", partition_mapping=dg.AllPartitionMapping())],
          description="Cleaned multi-turn SFT rows (OpenAI `messages` + `tools`) from successful trajectories; "
                      "heartbeat/cron turns dropped, duplicates and bench-contaminated tasks removed.")
def sft_dataset(context: dg.AssetExecutionContext, config: SftConfig, lake: LakeResource,
                endpoints: ModelEndpointsResource) -> dg.MaterializeResult:
    from clawgym.trajectories.sft import SFTCleanConfig, build_sft_dataset, save_hf_dataset

    history = lake.trajectories().to_pylist()
    rows = effective_rows(history)  # retried infra attempts are history: the latest non-infra row per task
    if config.policies:
        rows = [r for r in rows if r["policy"] in config.policies]
    tasks = lake.task_objects(("synthetic", "imported"))
    bench = lake.bench_task_objects(SUITES) + [t for t in tasks if t.split == "bench"]
    cfg = SFTCleanConfig(min_score=config.min_score, max_tokens=config.max_tokens,
                         tokenizer=str(endpoints.base_model_path()),
                         contamination_threshold=config.contamination_threshold,
                         contamination_scope=config.contamination_scope)
    res = build_sft_dataset(rows, [t for t in tasks if t.split == "train"], bench, cfg)
    lake.write(Table.SFT, res.rows)
    # with the base model's tokenizer: the rows carry input_ids + assistant_masks (control text in the content as
    # ordinary pieces, whatever trainer reads the folder); a row that cannot be encoded exactly is not exported
    hf_dir = save_hf_dataset(res.rows, lake.path("datasets", "sft"), stats=res.stats,
                             tokenizer=cfg.tokenizer) if res.rows else None
    stats = {k: v for k, v in res.stats.items() if k != "config"}
    return dg.MaterializeResult(metadata={
        "n_rows": len(res.rows),
        "hf_dataset": dg.MetadataValue.path(str(hf_dir)) if hf_dir else "(empty)", "n_trajectories_in": len(rows),
        "n_superseded_infra": len(history) - len(rows), "n_rejected": len(res.rejected),
        "rejected_by_reason": md_counts("reason", counts(r["reason"] for r in res.rejected)),
        "stats": dg.MetadataValue.json(json.loads(json.dumps(stats, default=str))),
        "by_category": md_counts("category", counts(r.get("category") for r in res.rows)),
    })
