"""Every partitions definition of the graph, defined once.

The shard count is not read here: it is a graph setting (``clawgym_assets.settings.GraphSettings.n_shards``,
$CLAWGYM_SHARDS, default 4) that ``clawgym_assets.definitions`` passes to :func:`trajectory_partitions_def`
when the definitions load. Keys are unchanged: ``policy|shard`` with shards "0".."n-1"."""

from functools import cache

import dagster as dg

DEFAULT_SHARDS = 4
SUITES = ("procedural", "clawgym", "pinchbench", "harbor")

policy_partitions = dg.DynamicPartitionsDefinition(name="policy")
checkpoint_partitions = dg.DynamicPartitionsDefinition(name="checkpoint")
model_partitions = dg.DynamicPartitionsDefinition(name="model")  # bench_scores: checkpoints, policies, endpoints
suite_partitions = dg.StaticPartitionsDefinition(list(SUITES))
LLM_SHARDS = 16  # the LLM synthesis route's shards: candidate i of each route belongs to shard i % LLM_SHARDS
llm_shard_partitions = dg.StaticPartitionsDefinition([f"{i:02d}" for i in range(LLM_SHARDS)])


@cache
def shard_partitions_def(n_shards: int = DEFAULT_SHARDS) -> dg.StaticPartitionsDefinition:
    return dg.StaticPartitionsDefinition([str(i) for i in range(n_shards)])


@cache
def trajectory_partitions_def(n_shards: int = DEFAULT_SHARDS) -> dg.MultiPartitionsDefinition:
    """policy × shard; multi-partition keys read "policy|shard" (dimensions are ordered by name)."""
    return dg.MultiPartitionsDefinition({"policy": policy_partitions, "shard": shard_partitions_def(n_shards)})


def n_shards_of(partitions_def: dg.MultiPartitionsDefinition) -> int:
    """The shard count of a trajectory partitions definition."""
    dim = next(d for d in partitions_def.partitions_defs if d.name == "shard")
    return len(dim.partitions_def.get_partition_keys())


shard_partitions = shard_partitions_def()
trajectory_partitions = trajectory_partitions_def()  # the default graph's (DEFAULT_SHARDS)
