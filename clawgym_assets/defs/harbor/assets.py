"""Harbor domain: accepted tasks as Harbor dataset folders, one per split.

`harbor_datasets[split]` writes <data>/harbor/<split>/ (one Harbor task folder per accepted synthetic task of the
split, plus clawgym_dataset.json): `harbor run -p data/harbor/bench -a oracle` runs it unchanged (docs/HARBOR.md).
"""

import shutil

import dagster as dg

from clawgym.lake.records import counts
from clawgym_assets._util import md_counts
from clawgym_assets.defs.lake.resources import LakeResource
from clawgym_assets.defs.synthesis.assets import synthetic_tasks, verifiers

GROUP = "harbor"
split_partitions = dg.StaticPartitionsDefinition(["train", "bench"])


class HarborDatasetsConfig(dg.Config):
    base_image: str = "clawgym-sandbox:latest"  # the Dockerfiles' FROM (a registry copy for cloud sandboxes)
    separate_verifier: bool = True  # Harbor's environment_mode = "separate": the clean room
    limit: int = 0  # 0 = every accepted task of the split


@dg.asset(group_name=GROUP, kinds={"python"}, partitions_def=split_partitions, deps=[synthetic_tasks, verifiers],
          description="Accepted synthetic tasks of one split as a Harbor dataset folder (data/harbor/<split>/): "
                      "every task runs in Harbor unchanged (FROM the offline sandbox image, our verifier in a "
                      "separate verifier environment, the reference as solution/solve.sh).")
def harbor_datasets(context: dg.AssetExecutionContext, config: HarborDatasetsConfig,
                    lake: LakeResource) -> dg.MaterializeResult:
    from clawgym.lake.records import lake_tasks
    from clawgym.tasks.harbor_export import export_harbor_dataset

    split = context.partition_key
    tasks = lake_tasks(lake, "synthetic", split)
    if config.limit:
        tasks = tasks[: config.limit]
    out = lake.path("harbor", split)
    tmp = lake.path("harbor", f".{split}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    export_harbor_dataset(tasks, tmp, name=f"clawgym-{split}", base_image=config.base_image,
                          separate=config.separate_verifier)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return dg.MaterializeResult(metadata={
        "n": len(tasks), "path": str(out), "run_with": f"harbor run -p {out} -a oracle",
        "by_category": md_counts("category", counts(t.category for t in tasks)),
    })
