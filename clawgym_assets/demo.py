"""The demo: the whole graph at demo scale on embedded defaults, recorded in the Dagster instance
($DAGSTER_HOME) so `dagster dev` shows every run, materialization and check afterwards.

It shows the loop teaching an agent (clawgym.train.demo_plan.DemoPlan): synthesize a few procedural training families
(each task carries its family's program solution), the program teacher's trajectories, an SFT set, a few SFT steps
of the embedded SmolLM2-135M, then `sft-demo` against `smollm2-base` on new seeds of the training families
(held-in), on held-out compositions of the shared operations and on held-out families, paired, with bootstrap
95% CIs, in the leaderboard."""

import importlib.util
import time
from collections.abc import Callable

import dagster as dg

from clawgym.lake.io import REPO_ROOT
from clawgym.train.demo_plan import DemoPlan, learning_rows
from clawgym_assets.definitions import CHECKS, graph_assets
from clawgym_assets.resources import default_resources
from clawgym_assets.settings import GraphSettings

EXAMPLE_SUITE = REPO_ROOT / "data" / "seeds" / "example_suite"
TEACHER = "program"
# measured on the 2-core box (docs/figures.md, the section "the demo teaches"), seconds per stage; the header's
# estimate and each stage's "expected" come from here
EXPECTED_S = {"base_model": 10, "synthesis": 90, "bench_tasks": 10, "trajectories": 40, "bench oracle + noop": 60,
              "sft_dataset": 30, "checkpoints (SFT)": 300, "bench smollm2-base": 240, "bench sft-demo": 150,
              "leaderboard": 10}


def _run_on(instance, selection, log, partition_key=None, run_config=None, resources=None, assets=None):
    t0 = time.perf_counter()
    r = dg.materialize([*(assets or graph_assets(GraphSettings().n_shards)), *CHECKS], selection=selection,
                       partition_key=partition_key, instance=instance, resources=resources or default_resources(),
                       run_config=run_config or {}, raise_on_error=True)
    what = ",".join(selection) + (f" [{partition_key}]" if partition_key else "")
    log(f"  [green]✓[/green] {what} ({time.perf_counter() - t0:.1f}s)")
    return r


def describe(plan: DemoPlan, models: bool = True) -> str:
    """What the demo will show and how long it takes (printed first)."""
    n_in, n_comp, n_out = plan.n_bench()
    train_c, _ = plan.compositions()
    total = sum(EXPECTED_S.values()) if models else sum(v for k, v in EXPECTED_S.items() if k in (
        "synthesis", "bench_tasks", "trajectories", "bench oracle + noop", "leaderboard"))
    lines = [f"clawgym demo: the loop teaching an agent, ≈ {total / 60:.0f} min on 2 CPU cores "
             f"({len(EXPECTED_S) if models else 5} stages).",
             f"  synthesize tasks of {len(plan.train_families)} training families ({', '.join(plan.train_families)}) "
             f"and {len(plan.heldout_families)} held-out ({', '.join(plan.heldout_families)}); each task carries its "
             f"family's program solution",
             (f"  and {len(train_c)} training + {plan.heldout_compositions} held-out compositions of shared operations "
              "(read / filter / join / aggregate / write), each task with its composed program" if train_c else
              f"  and {plan.heldout_compositions} held-out compositions of shared operations (read / filter / join / "
              "aggregate / write) on the bench: the demo trains on none (their transfer: benchmarks/lift.py)"),
             "  the program teacher (one exec of that program) makes the SFT set"]
    if models:
        lines += [f"  {plan.sft['max_steps']} SFT steps of SmolLM2-135M (lr {plan.sft['learning_rate']}) -> sft-demo",
                  f"  bench: {n_in} tasks on new seeds of the training families (held-in) + {n_comp} of held-out "
                  f"compositions + {n_out} of held-out families; oracle, noop, smollm2-base, sft-demo",
                  "  shows: sft-demo vs smollm2-base, paired Δ with a bootstrap 95% CI: held-in, held-out "
                  "compositions, held-out families"]
    else:
        lines.append(f"  bench: oracle and noop on {n_in + n_comp + n_out} tasks (no models)")
    return "\n".join(lines)


def run_demo(plan: DemoPlan | None = None, models: bool = True, checkpoint: str = "sft-demo",
             log: Callable[[str], None] = print, settings: GraphSettings | None = None,
             resources: dict | None = None) -> list[str]:
    """Returns the stages that failed (the model stages are allowed to fail without stopping the rest).
    settings / resources: the graph's (default: GraphSettings() and default_resources())."""
    plan = plan or DemoPlan()
    failed: list[str] = []
    t_start = time.perf_counter()
    stages = [k for k in EXPECTED_S if models or k in (
        "synthesis", "bench_tasks", "trajectories", "bench oracle + noop", "leaderboard")]
    done = [0]

    def stage(name: str):
        done[0] += 1
        el = time.perf_counter() - t_start
        left = sum(EXPECTED_S[k] for k in stages[done[0] - 1:])
        log(f"[bold][{done[0]}/{len(stages)}] {name}[/bold] (elapsed {el / 60:.1f} min, expected ≈ "
            f"{EXPECTED_S.get(name, 0):.0f}s, ≈ {left / 60:.0f} min left)")

    def optional(name, fn):
        try:
            fn()
            return True
        except Exception as e:  # a model stage failed: report it, keep the data/bench stages going
            log(f"[red]✗ {name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}[/red]")
            failed.append(name)
            return False

    log(describe(plan, models))
    settings = settings or GraphSettings()
    assets = graph_assets(settings.n_shards)

    def _run(*a, **kw):  # every stage on the same graph
        return _run_on(*a, assets=assets, **kw)

    instance = dg.DagsterInstance.get()
    res = resources or default_resources()
    trained: list[str] = []
    engine = None  # the base model's engine, started first: it compiles while synthesis and SFT run
    if models:
        stage("base_model")
        if optional("base_model", lambda: _run(instance, ["base_model"], log, resources=res)):
            trained.append(res["endpoints"].base_policy_name)
            from clawgym.agent.policies import warm_engine

            engine = warm_engine(res["endpoints"].policy(res["endpoints"].base_policy_name))
            log("  the base model's engine starts in the background (its bench joins it)")
    try:
        _run_stages(plan, models, checkpoint, log, instance, res, _run, stage, optional, trained, settings, engine)
    finally:
        if engine is not None:
            engine.release()
    stage("leaderboard")
    _run(instance, ["leaderboard"], log, resources=res)
    log(f"demo stages done in {(time.perf_counter() - t_start) / 60:.1f} min")
    return failed


def _run_stages(plan, models, checkpoint, log, instance, res, _run, stage, optional, trained, settings,
                engine=None) -> None:
    """The stages between the base model and the leaderboard: synthesis, the teacher's trajectories, the scale's
    ends, the SFT set and checkpoint, the models' benches (`engine`, the base model's warm engine, is released
    once its bench is done)."""
    imported = EXAMPLE_SUITE.is_dir() and any(EXAMPLE_SUITE.iterdir())
    stage1 = ["personas", "skills", "synthetic_tasks", "mock_workspaces", "verifiers"]
    cfg = {"ops": {"synthetic_tasks": {"config": plan.synth_config()}}}
    if imported:
        stage1.insert(2, "imported_tasks")
    else:
        log(f"no example suite at {EXAMPLE_SUITE}: imported_tasks skipped")
    stage("synthesis")
    _run(instance, stage1, log, run_config=cfg, resources=res)
    stage("bench_tasks")
    _run(instance, ["bench_tasks"], log, partition_key="procedural", resources=res)
    stage("trajectories")
    instance.add_dynamic_partitions("policy", [p for p in (TEACHER,) if not instance.has_dynamic_partition(
        "policy", p)])
    for s in range(settings.n_shards):
        _run(instance, ["trajectories", "steps"], log,
             partition_key=dg.MultiPartitionKey({"policy": TEACHER, "shard": str(s)}), resources=res)
    bench_cfg = {"max_turns": plan.max_turns, "max_completion_tokens": plan.max_completion_tokens,
                 "workers": plan.workers}
    model_cfg = {"ops": {"bench_scores": {"config": bench_cfg}}}
    # the scale's ends (oracle: the task's own reference replayed, one call a turn; noop) run at the graph's
    # default limits: the models' budget of `plan.max_turns` turns (a program in one call) would cut the
    # reference replay of a longer task and make the ceiling look like a failure (measured: oracle 46.6)
    ends_cfg = {"ops": {"bench_scores": {"config": {"workers": plan.workers}}}}
    instance.add_dynamic_partitions(
        "model", [m for m in ("oracle", "noop") if not instance.has_dynamic_partition("model", m)])
    stage("bench oracle + noop")
    for m in ("oracle", "noop"):
        _run(instance, ["bench_scores"], log, partition_key=m, resources=res, run_config=ends_cfg)
    if models:
        if trained:
            stage("sft_dataset")
            sft_cfg = {"ops": {"sft_dataset": {"config": {"policies": [TEACHER],
                                                          "contamination_scope": "workspace"}}}}
            ok = optional("sft_dataset", lambda: _run(instance, ["sft_dataset"], log, resources=res,
                                                      run_config=sft_cfg))
            stage("checkpoints (SFT)")
            if ok and importlib.util.find_spec("clawgym.train.pipes_sft") is not None:
                instance.add_dynamic_partitions(
                    "checkpoint", [c for c in (checkpoint,) if not instance.has_dynamic_partition("checkpoint", c)])
                from clawgym_assets.defs.training.resources import TrainerResource

                sft = dict(plan.sft)
                named = {k: sft.pop(k) for k in ("max_steps", "num_train_epochs", "learning_rate") if k in sft}
                tr = {**res, "trainer": TrainerResource(**named, sft_config=sft)}
                if optional("checkpoints", lambda: _run(instance, ["checkpoints"], log, partition_key=checkpoint,
                                                        resources=tr)):
                    trained.append(checkpoint)
        instance.add_dynamic_partitions(
            "model", [m for m in trained if not instance.has_dynamic_partition("model", m)])
        for name in (res["endpoints"].base_policy_name, checkpoint):
            stage(f"bench {'smollm2-base' if name == res['endpoints'].base_policy_name else 'sft-demo'}")
            if name in trained:
                optional(f"bench_scores[{name}]", lambda m=name: _run(instance, ["bench_scores"], log,
                                                                      partition_key=m, resources=res,
                                                                      run_config=model_cfg))
            else:
                log(f"  skipped: {name} was not made")
            if engine is not None and name == res["endpoints"].base_policy_name:
                engine.release()  # the checkpoint's engine starts next, warm from the compile cache


def learning_report(plan: DemoPlan | None = None, model: str = "sft-demo", parent: str = "",
                    resources: dict | None = None) -> list[dict]:
    """`model` vs its parent (default: the base policy) on the procedural bench now in the lake: held-in (new
    seeds of the plan's training families), held-out compositions and held-out families
    (clawgym.train.demo_plan.learning_rows)."""
    from clawgym.lake.records import BENCH_RESULT_KEY, effective_rows, tasks_from_table

    plan = plan or DemoPlan()
    res = resources or default_resources()
    lake = res["lake"]
    parent = parent or res["endpoints"].base_policy_name
    tasks = tasks_from_table(lake.bench_tasks("procedural"))
    ids = {t.task_id for t in tasks}
    rows = [r for m in (model, parent) for r in effective_rows(
        lake.bench_results(model=m, suite="procedural").to_pylist(), BENCH_RESULT_KEY) if r["task_id"] in ids]
    return learning_rows(rows, {t.task_id: t.family for t in tasks}, plan.trained_families, model, parent)
