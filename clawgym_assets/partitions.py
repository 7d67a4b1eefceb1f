"""Every partitions definition of the graph, defined once (DESIGN §3)."""

import os

import dagster as dg

N_SHARDS = int(os.environ.get("CLAWGYM_SHARDS", "4"))
SUITES = ("procedural", "clawgym", "pinchbench")

policy_partitions = dg.DynamicPartitionsDefinition(name="policy")
shard_partitions = dg.StaticPartitionsDefinition([str(i) for i in range(N_SHARDS)])
# multi-partition keys read "policy|shard" (dimensions are ordered by name)
trajectory_partitions = dg.MultiPartitionsDefinition({"policy": policy_partitions, "shard": shard_partitions})
checkpoint_partitions = dg.DynamicPartitionsDefinition(name="checkpoint")
model_partitions = dg.DynamicPartitionsDefinition(name="model")  # bench_scores: checkpoints, policies, endpoints
suite_partitions = dg.StaticPartitionsDefinition(list(SUITES))
