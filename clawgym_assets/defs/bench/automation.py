"""Automation: a sensor that benchmarks new checkpoints; a weekly schedule that re-scores every model."""

import datetime as _dt

import dagster as dg

from clawgym.lake import Lake
from clawgym.lake import data_root as _data_root
from clawgym.tasks.names import is_name
from clawgym_assets.defs.bench.assets import bench_scores
from clawgym_assets.defs.lake.resources import LakeResource
from clawgym_assets.partitions import model_partitions

bench_job = dg.define_asset_job("bench_scores_job", selection=[bench_scores],
                                description="Score one model / checkpoint / policy on the bench suites.")


def discover_checkpoints(data_root=None, lake=None) -> list[str]:
    """Checkpoint names known to the lake: registry rows plus model folders dropped under <data>/checkpoints/
    (`data_root`: the data folder, default <repo>/data; `lake`: the tables to read the registry from, e.g. a
    LakeResource on object storage, default the local lake of `data_root`; the sensor passes its LakeResource)."""
    root = _data_root(data_root)
    names = set()
    try:
        names |= {r for r in (lake or Lake.at(root)).checkpoints().column("checkpoint").to_pylist() if r}
    except Exception:  # an unreadable registry must not stop the sensor from seeing folders
        pass
    ck = root / "checkpoints"
    if ck.is_dir():
        names |= {p.name for p in ck.iterdir() if p.is_dir() and (p / "config.json").exists()
                  and not p.name.startswith(".")}
    return sorted(n for n in names if is_name(n))  # a name becomes a partition key and a folder


@dg.sensor(job=bench_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Sees new checkpoints (registry or a folder under data/checkpoints/), adds the bench_scores "
                       "partition and requests its scoring.")
def new_checkpoint_sensor(context: dg.SensorEvaluationContext, lake: LakeResource) -> dg.SensorResult:
    known = set(context.instance.get_dynamic_partitions(model_partitions.name))
    new = [n for n in discover_checkpoints(lake.root(), lake) if n not in known]
    if not new:
        return dg.SensorResult(skip_reason="no new checkpoints")
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=n, run_key=f"bench-{n}") for n in new],
        dynamic_partitions_requests=[model_partitions.build_add_request(new)],
    )


@dg.schedule(job=bench_job, cron_schedule="0 3 * * 1", execution_timezone="UTC",
             description="Weekly: re-score every registered model / checkpoint.")
def weekly_rescore_schedule(context: dg.ScheduleEvaluationContext):
    keys = context.instance.get_dynamic_partitions(model_partitions.name)
    stamp = (context.scheduled_execution_time or _dt.datetime.now(_dt.UTC)).strftime("%Y-%m-%d")
    if not keys:
        return dg.SkipReason("no models registered")
    return [dg.RunRequest(partition_key=k, run_key=f"rescore-{k}-{stamp}") for k in keys]
