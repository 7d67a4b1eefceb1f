"""Bench domain: suites, per-model scores with CIs, the leaderboard."""


import dagster as dg

from clawgym.lake import Table, TaskSource, bench_source
from clawgym.lake.records import counts, task_row, tasks_from_table
from clawgym.tasks.names import check_name
from clawgym_assets._util import failure_on_value_error, md_counts, md_table
from clawgym_assets.defs.lake.resources import LakeResource
from clawgym_assets.defs.rollouts.config import RolloutConfig
from clawgym_assets.defs.rollouts.resources import (
    JudgeResource,
    ModelEndpointsResource,
    OpenClawResource,
    SandboxResource,
)
from clawgym_assets.defs.synthesis.assets import synthetic_tasks, verifiers
from clawgym_assets.defs.training.assets import checkpoints
from clawgym_assets.partitions import model_partitions, suite_partitions

GROUP = "bench"


def _refresh(context, lake: LakeResource) -> None:
    """Rebuild the DuckDB views; a catalog held open by another process is not worth failing a run for."""
    try:
        lake.refresh_catalog()
    except Exception as e:  # duckdb lock held elsewhere
        context.log.warning(f"catalog not refreshed ({type(e).__name__}: {e}); run `clawgym sql` later")


# bench_tasks may prefer tasks that separate a strong from a weak policy, measured by EARLIER bench_scores runs
# (their bench_results rows). That is a feedback edge (bench_tasks -> bench_scores -> bench_tasks) a DAG cannot
# hold, so the earlier results enter as this external asset: the read is declared, and visible in the lineage.
bench_history = dg.AssetSpec(
    "bench_history", group_name=GROUP, kinds={"parquet"},
    description="bench_results rows left by earlier bench_scores runs (the `bench_results` lake table): the "
                "difficulty signal bench_tasks[procedural] uses when its config names a weak_policy. Written by "
                "bench_scores; declared as an external asset because bench_tasks -> bench_scores -> bench_tasks "
                "is a cycle.")


class BenchTasksConfig(dg.Config):
    clawgym_dir: str = ""  # a ClawGym-Bench task folder ("" = suite left empty)
    pinchbench_dir: str = ""  # a PinchBench tasks/ folder ("" = suite left empty)
    harbor_dir: str = ""  # a Harbor task or dataset folder ("" = suite left empty)
    # FROM image -> local image, e.g. {"ubuntu:24.04": "clawgym-sandbox:latest"}
    harbor_base_images: dict[str, str] = {}
    limit: int = 0  # 0 = all tasks of the suite
    procedural_n: int = 200  # procedural suite size, balanced over the six categories (ClawGym-Bench has 200)
    strong_policy: str = "oracle"  # once both have bench results, prefer tasks that separate them
    weak_policy: str = ""  # e.g. the base model; "" = no difficulty signal yet


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, partitions_def=suite_partitions,
          deps=[verifiers, synthetic_tasks, bench_history],  # rejected_tasks, synthetic tasks, earlier results
          description="Held-out suites: procedural (held-out families that passed validation), clawgym, "
                      "pinchbench and harbor (imported from configurable folders).")
def bench_tasks(context: dg.AssetExecutionContext, config: BenchTasksConfig,
                lake: LakeResource) -> dg.MaterializeResult:
    suite = context.partition_key
    errors = 0
    n_separating = 0
    if suite == "procedural":
        rejected = lake.rejected_task_ids()
        tasks = [t for t in tasks_from_table(lake.tasks(TaskSource.SYNTHETIC))
                 if t.split == "bench" and t.task_id not in rejected]
        from clawgym.bench.suites import select_balanced, separation

        sep = separation(lake.bench_results(suite="procedural").to_pylist(), config.strong_policy,
                         config.weak_policy) if config.weak_policy else {}
        tasks = select_balanced(tasks, config.procedural_n, sep)
        n_separating = sum(1 for t in tasks if sep.get(t.task_id, 0) > 0)
    else:
        folder = {"clawgym": config.clawgym_dir, "harbor": config.harbor_dir}.get(suite, config.pinchbench_dir)
        tasks = []
        if folder:
            from clawgym.bench.suites import load_suite_folder

            rep = load_suite_folder(folder, suite=suite, split="bench", fmt=suite,
                                    base_images=dict(config.harbor_base_images) if suite == "harbor" else None)
            errors = len(rep.errors)
            for e in rep.errors:
                context.log.warning(f"import error: {e}")
            tasks = rep.tasks
        else:
            context.log.info(f"suite {suite}: no folder configured; the suite is empty")
    for t in tasks:
        t.suite, t.split = suite, "bench"
    if config.limit:
        tasks = tasks[: config.limit]
    lake.write(Table.TASKS, [task_row(t, bench_source(suite)) for t in tasks], {"source": bench_source(suite)})
    return dg.MaterializeResult(metadata={
        "n": len(tasks), "import_errors": errors, "n_separating": n_separating,
        "by_category": md_counts("category", counts(t.category for t in tasks)),
        "by_family": md_counts("family", counts(t.family for t in tasks)),
    })


class BenchScoresConfig(RolloutConfig):  # + max_turns, max_wall_s, ..., attempts, retries (RolloutConfig)
    suites: list[str] = ["procedural"]
    repeats: int = 1  # >1 gives pass@k
    n_boot: int = 2000
    seed: int = 0
    pass_threshold: float = 1.0
    max_infra_rate: float = 0.05  # above this share of infra rollouts the model is flagged and not ranked
    max_unjudged_rate: float = 1.0  # likewise for unjudged rollouts (1.0 = never flags)
    workers: int = 1  # rollouts in flight at once (a local model server batches them)


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, partitions_def=model_partitions, pool="sandboxes",
          deps=[dg.AssetDep(bench_tasks, partition_mapping=dg.AllPartitionMapping()),
                dg.AssetDep(checkpoints, partition_mapping=dg.AllPartitionMapping())],
          description="Per task, per category and overall scores (0–100, seeded bootstrap 95% CIs, pass@k) of one "
                      "model / checkpoint / policy on the bench suites; every row traced to its rollout + "
                      "verification. "
                      "Means and CIs are over scored rollouts (ok, agent_error, limit) only; infra and unjudged "
                      "rollouts are counted (n_infra, n_unjudged, infra_rate) and a model above max_infra_rate is "
                      "flagged (not ranked).")
def bench_scores(context: dg.AssetExecutionContext, config: BenchScoresConfig, lake: LakeResource,
                 sandbox: SandboxResource, endpoints: ModelEndpointsResource, judge: JudgeResource,
                 openclaw: OpenClawResource) -> dg.MaterializeResult:
    from clawgym.bench.scores import ScoreSettings, score_model

    # a model key may name a folder under checkpoints/ (resolve_policy): one plain name
    with failure_on_value_error():
        model = check_name(context.partition_key, "model partition key")
    spec = endpoints.policy(model)
    parent = (lake.checkpoint_registry().get(model) or {}).get("parent")
    suite_tasks = {}
    for suite in config.suites:
        suite_tasks[suite] = tasks_from_table(lake.bench_tasks(suite))
        if not suite_tasks[suite]:
            context.log.warning(f"suite {suite}: no bench tasks (materialize bench_tasks[{suite}] first)")
            del suite_tasks[suite]

    def write(ss) -> None:
        lake.write(Table.BENCH_RESULTS, ss.results, {"model": model, "suite": ss.suite})
        # written even when empty: stale scores of an earlier run must not stand in for this one
        lake.write(Table.BENCH_SCORES, ss.scores, {"model": model, "suite": ss.suite})

    with sandbox.factory() as factory:
        scored = score_model(
            suite_tasks, spec, factory, model=model, parent=parent, rollout=config.rollout_settings(openclaw),
            judge=judge.judge(), run_id=context.run.run_id, log=context.log.info, on_suite=write,
            scoring=ScoreSettings(repeats=config.repeats, n_boot=config.n_boot, seed=config.seed,
                                  pass_threshold=config.pass_threshold, max_infra_rate=config.max_infra_rate,
                                  max_unjudged_rate=config.max_unjudged_rate, workers=config.workers))
    md: dict = {}
    unscored: list[str] = []
    for ss in scored:
        md.update(_suite_metadata(ss))
        if ss.overall.flagged:
            context.log.warning(f"{model} on {ss.suite} flagged, not ranked: {ss.overall.flag_reason}")
        if ss.overall.mean is None:
            unscored.append(f"{ss.suite}: {ss.overall.flag_reason}")
    all_rows = [r for ss in scored for r in ss.effective]
    summary_rows = [r for ss in scored for r in ss.scores]
    _refresh(context, lake)
    if unscored:
        raise dg.Failure(f"{model}: nothing scored on " + "; ".join(unscored) + " (infra = endpoint or sandbox "
                         "failures, unjudged = no rubric judge). See the run log for the errors.", metadata=md)
    return dg.MaterializeResult(metadata={
        **md, "model": model, "policy_kind": spec.kind, "parent": parent or "", "n_results": len(all_rows),
        "flagged": any(r["flagged"] for r in summary_rows),
        "failure_classes": md_counts("failure_class", counts(r["failure_class"] for r in all_rows)),
    })


def _suite_metadata(ss) -> dict:
    """Run metadata of one suite's SuiteScores: counts, flag, the per-category table, overall mean and CI."""
    suite, ov, stats = ss.suite, ss.overall, ss.stats
    md = {f"{suite}/n_tasks": ov.n_tasks, f"{suite}/n_scored": ov.n_scored, f"{suite}/n_infra": ov.n_infra,
          f"{suite}/n_unjudged": ov.n_unjudged, f"{suite}/infra_rate": dg.MetadataValue.float(round(ov.infra_rate, 4)),
          f"{suite}/flagged": ov.flagged, f"{suite}/flag_reason": ov.flag_reason,
          f"{suite}/by_category": md_table(
              ["category", "n", "mean", "ci_low", "ci_high", "pass@1", f"pass@{ov.k}", "n_tasks", "n_scored",
               "n_infra", "n_unjudged", "infra_rate"],
              [[s.category, s.n, s.mean, s.ci_low, s.ci_high, s.pass_at_1, s.pass_at_k, s.n_tasks, s.n_scored,
                s.n_infra, s.n_unjudged, s.infra_rate] for s in stats])}
    if ov.mean is not None:
        md[f"{suite}/overall"] = dg.MetadataValue.float(round(ov.mean, 2))
        md[f"{suite}/ci95"] = f"[{ov.ci_low:.1f}, {ov.ci_high:.1f}]"
    return md


class LeaderboardConfig(dg.Config):
    suite: str = "procedural"
    max_infra_rate: float = 0.05  # models above it are flagged (as are those bench_scores flagged) and not ranked


@dg.asset(group_name=GROUP, kinds={"python"},
          deps=[dg.AssetDep(bench_scores, partition_mapping=dg.AllPartitionMapping()),
                dg.AssetDep(checkpoints, partition_mapping=dg.AllPartitionMapping())],  # the parent registry
          description="All scored models side by side per category, with a plot and the delta vs parent checkpoint "
                      "(over tasks scored for both). Flagged models (infra rate above the bound) are listed, not "
                      "ranked.")
def leaderboard(context: dg.AssetExecutionContext, config: LeaderboardConfig,
                lake: LakeResource) -> dg.MaterializeResult:
    from clawgym.bench.leaderboard import leaderboard_rows, markdown_table, plot_png, png_markdown

    rows = lake.bench_scores(suite=config.suite).to_pylist()
    results = lake.bench_results(suite=config.suite).to_pylist()
    reg = lake.checkpoint_registry()
    board = leaderboard_rows(rows, results, reg, max_infra_rate=config.max_infra_rate)
    flagged = [b for b in board if b["flagged"]]
    png = plot_png(rows, config.suite, title=f"{config.suite} bench")
    out = lake.path("leaderboard.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(png)
    _refresh(context, lake)
    return dg.MaterializeResult(metadata={
        "n_models": len(board), "n_ranked": len(board) - len(flagged), "n_flagged": len(flagged),
        "flagged": md_table(["model", "reason", "n_infra", "n_unjudged", "infra_rate"],
                            [[b["model"], b["flag_reason"], b["n_infra"], b["n_unjudged"], b["infra_rate"]]
                             for b in flagged]),
        "trust": md_table(["rank", "model", "overall", "n_tasks", "n_scored", "n_infra", "n_unjudged", "infra_rate",
                           "flagged"],
                          [[b["rank"], b["model"], b["overall"], b["n_tasks"], b["n_scored"], b["n_infra"],
                            b["n_unjudged"], b["infra_rate"], b["flagged"]] for b in board]),
        "table": dg.MetadataValue.md(markdown_table(rows, config.suite, max_infra_rate=config.max_infra_rate)),
        "plot": dg.MetadataValue.md(png_markdown(png, "leaderboard")), "plot_path": dg.MetadataValue.path(str(out)),
        "deltas_vs_parent": md_table(["model", "parent", "overall", "delta", "ci_low", "ci_high", "n_common",
                                      "regression"],
                                     [[b["model"], b["parent"], b["overall"], b["delta"], b["delta_ci_low"],
                                       b["delta_ci_high"], b["delta_n_common"], b["regression"]] for b in board]),
        "board": dg.MetadataValue.json(board),
    })
