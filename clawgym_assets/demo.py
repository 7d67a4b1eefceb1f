"""The demo: the whole graph at demo scale on embedded defaults, recorded in the Dagster instance
($DAGSTER_HOME) so `dagster dev` shows every run, materialization and check afterwards."""

import importlib.util
import time
from typing import Callable

import dagster as dg

from clawgym.lake.io import REPO_ROOT
from clawgym_assets.checks import CHECKS
from clawgym_assets.definitions import graph_assets
from clawgym_resources import GraphSettings, default_resources

EXAMPLE_SUITE = REPO_ROOT / "data" / "seeds" / "example_suite"


def _run_on(instance, selection, log, partition_key=None, run_config=None, resources=None, assets=None):
    t0 = time.perf_counter()
    r = dg.materialize([*(assets or graph_assets(GraphSettings().n_shards)), *CHECKS], selection=selection,
                       partition_key=partition_key, instance=instance, resources=resources or default_resources(),
                       run_config=run_config or {}, raise_on_error=True)
    what = ",".join(selection) + (f" [{partition_key}]" if partition_key else "")
    log(f"[green]✓[/green] {what} ({time.perf_counter() - t0:.1f}s)")
    return r


def run_demo(n_tasks: int = 24, sft_steps: int = 2, models: bool = True, checkpoint: str = "sft-demo",
             log: Callable[[str], None] = print, settings: GraphSettings | None = None,
             resources: dict | None = None) -> list[str]:
    """Returns the stages that failed (the model stages are allowed to fail without stopping the rest).
    settings / resources: the graph's (default: GraphSettings() and default_resources())."""
    failed: list[str] = []

    def optional(name, fn):
        try:
            fn()
            return True
        except Exception as e:  # a model stage failed: report it, keep the data/bench stages going
            log(f"[red]✗ {name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}[/red]")
            failed.append(name)
            return False

    settings = settings or GraphSettings()
    assets = graph_assets(settings.n_shards)

    def _run(*a, **kw):  # every stage on the same graph
        return _run_on(*a, assets=assets, **kw)

    instance = dg.DagsterInstance.get()
    res = resources or default_resources()
    imported = EXAMPLE_SUITE.is_dir() and any(EXAMPLE_SUITE.iterdir())
    stage1 = ["personas", "skills", "synthetic_tasks", "mock_workspaces", "verifiers"]
    cfg = {"ops": {"synthetic_tasks": {"config": {"n": n_tasks}}}}
    if imported:
        stage1.insert(2, "imported_tasks")
    else:
        log(f"no example suite at {EXAMPLE_SUITE}: imported_tasks skipped")
    _run(instance, stage1, log, run_config=cfg, resources=res)
    _run(instance, ["bench_tasks"], log, partition_key="procedural", resources=res)
    instance.add_dynamic_partitions("policy", ["oracle"])
    for s in range(settings.n_shards):
        _run(instance, ["trajectories", "steps"], log,
             partition_key=dg.MultiPartitionKey({"policy": "oracle", "shard": str(s)}), resources=res)
    bench_models = ["oracle", "noop"]
    model_cfg = {"ops": {"bench_scores": {"config": {"max_turns": 3, "max_completion_tokens": 192}}}}
    if models and optional("base_model", lambda: _run(instance, ["base_model"], log, resources=res)):
        bench_models.append(res["endpoints"].base_policy_name)
        ok = optional("sft_dataset", lambda: _run(instance, ["sft_dataset"], log, resources=res))
        if ok and importlib.util.find_spec("clawgym.train.pipes_sft") is not None:
            instance.add_dynamic_partitions("checkpoint", [checkpoint])
            from clawgym_resources import TrainerResource

            tr = {**res, "trainer": TrainerResource(max_steps=sft_steps)}
            if optional("checkpoints", lambda: _run(instance, ["checkpoints"], log, partition_key=checkpoint,
                                                    resources=tr)):
                bench_models.append(checkpoint)
    instance.add_dynamic_partitions(
        "model", [m for m in bench_models if not instance.has_dynamic_partition("model", m)])
    for m in bench_models:
        if m in ("oracle", "noop"):
            _run(instance, ["bench_scores"], log, partition_key=m, resources=res)
        else:
            optional(f"bench_scores[{m}]", lambda m=m: _run(instance, ["bench_scores"], log, partition_key=m,
                                                            resources=res, run_config=model_cfg))
    _run(instance, ["leaderboard"], log, resources=res)
    return failed
