"""Synthesis domain: personas, skills, imported and synthetic tasks, mock workspaces, verifiers."""

import contextlib

import dagster as dg

from clawgym.lake import TRAIN_SOURCES, RejectedBy, Table, TaskSource
from clawgym.lake.records import counts, group_mean, task_row
from clawgym.synth.synthetic import ROUTES
from clawgym_assets._util import md_counts, md_histogram, md_table
from clawgym_assets.defs.lake.resources import LakeResource
from clawgym_assets.defs.rollouts.resources import (
    JudgeResource,
    ModelEndpointsResource,
    OpenClawResource,
    SandboxResource,
)
from clawgym_assets.partitions import LLM_SHARDS, llm_shard_partitions

GROUP = "synthesis"


class PersonasConfig(dg.Config):
    n: int = 24
    seed: int = 0


@dg.asset(group_name=GROUP, kinds={"python", "parquet"},
          description="User personas (role, domain, goals, tools, tone) expanded from data/seeds/personas.yaml.")
def personas(context: dg.AssetExecutionContext, config: PersonasConfig, lake: LakeResource) -> dg.MaterializeResult:
    import json

    from clawgym.synth.personas import expand_personas

    ps = expand_personas(limit=config.n or None, seed=config.seed)
    rows = [{**p.to_dict(), "persona_json": json.dumps(p.to_dict())} for p in ps]
    lake.write(Table.PERSONAS, rows)
    return dg.MaterializeResult(metadata={
        "n": len(rows), "by_domain": md_counts("domain", counts(p.domain for p in ps)),
        "by_role": md_counts("role", counts(p.role for p in ps)),
    })


class SkillsConfig(dg.Config):
    skills_dir: str = ""  # "" = the shipped data/skills


@dg.asset(group_name=GROUP, kinds={"python", "parquet"},
          description="OpenClaw skills parsed from SKILL.md folders (name, description, tools, operations).")
def skills(context: dg.AssetExecutionContext, config: SkillsConfig, lake: LakeResource,
           openclaw: OpenClawResource) -> dg.MaterializeResult:
    import json

    from clawgym.synth.skills import default_skill_dirs, load_skills

    # the shipped skills, the OpenClaw install's, then OpenClawResource.skill_dirs ($CLAWGYM_SKILL_DIRS)
    dirs = [config.skills_dir] if config.skills_dir else \
        default_skill_dirs(openclaw.install_dir or None, openclaw.extra_skill_dirs())
    sks, errors = load_skills(dirs)
    for e in errors:
        context.log.warning(f"skill parse error: {e}")
    rows = [{"skill_id": s.skill_id, "name": s.name, "description": s.description,
             "n_operations": len(s.operations), "skill_json": json.dumps(s.to_dict(), default=str)} for s in sks]
    lake.write(Table.SKILLS, rows)
    return dg.MaterializeResult(metadata={
        "n": len(rows), "errors": len(errors), "usable_offline": sum(s.usable_offline for s in sks),
        "by_source": md_counts("source", counts(s.source for s in sks)),
        "excluded": dg.MetadataValue.json({s.name: s.excluded_reason for s in sks if not s.usable_offline}),
    })


class ImportedTasksConfig(dg.Config):
    folder: str = "data/seeds/example_suite"  # ClawGym task dirs or PinchBench *.md; relative = repo root
    format: str = "auto"  # auto | clawgym | pinchbench
    suite: str = "imported"


@dg.asset(group_name=GROUP, kinds={"python", "parquet"},
          description="A task suite imported from a folder (ClawGym task dirs or PinchBench markdown).")
def imported_tasks(context: dg.AssetExecutionContext, config: ImportedTasksConfig,
                   lake: LakeResource) -> dg.MaterializeResult:
    from clawgym.bench.suites import load_suite_folder, resolve_dir

    if not resolve_dir(config.folder).is_dir():
        context.log.warning(f"imported_tasks: folder {resolve_dir(config.folder)} does not exist; no tasks imported")
        lake.write(Table.TASKS, [], {"source": TaskSource.IMPORTED})
        return dg.MaterializeResult(metadata={"n": 0, "folder": config.folder, "status": "folder missing"})
    rep = load_suite_folder(config.folder, suite=config.suite, split="train", fmt=config.format)
    for e in rep.errors:
        context.log.warning(f"import error: {e}")
    if not rep.tasks and rep.errors:
        raise rep.errors[0]
    tasks = rep.tasks
    for t in tasks:
        t.route = "imported"
    lake.write(Table.TASKS, [task_row(t, TaskSource.IMPORTED.value) for t in tasks], {"source": TaskSource.IMPORTED})
    return dg.MaterializeResult(metadata={
        "n": len(tasks), "errors": len(rep.errors), "folder": config.folder,
        "by_category": md_counts("category", counts(t.category for t in tasks)),
    })


class LLMRouteConfig(dg.Config):
    """The LLM route's plan (ClawGym-SynData): `llm_candidates[shard]` and `synthetic_tasks` with the same values
    make the same requests, so shards filled by a backfill are read from the caches by `synthetic_tasks`."""

    seed: int = 0
    n_llm: int = 8  # LLM candidates (persona-driven + skill-grounded)
    skill_fraction: float = 0.25  # share of the LLM candidates grounded in a skill (the rest: a persona)
    categories: list[str] = []  # [] = the whole category taxonomy
    generator: str = "generator"  # endpoint name of the task generator (ModelEndpointsResource)
    reviewer: str = ""  # endpoint name of the reviewer ("" = the generator's)
    auditor: str = ""  # endpoint name of the auditor ("" = the reviewer's)
    max_repairs: int = 3
    llm_workers: int = 0  # LLM candidates in progress at once (0 = twice the requests allowed in flight)
    max_in_flight: int = 32  # chat requests overlapping at most, per server
    llm_hacker: str = "reject"  # hacker gate for LLM candidates: reject (repaired) | report | off
    max_tokens: int = 0  # completion tokens per LLM request (0 = the endpoint's: a local model's PolicySpec.max_tokens)


class SyntheticTasksConfig(LLMRouteConfig):
    route: str = "procedural"  # procedural (offline default) | llm | both (llm needs named endpoints)
    n: int = 24  # procedural tasks (route procedural | both)
    families: list[str] = []  # [] = all registered families
    heldout_per_category: int = 1  # whole families per category kept out of training (procedural bench)
    heldout_families: list[str] = []  # exactly these families are held out ([] = heldout_per_category per category)
    bench_new_seeds: int = 0  # per family, this many new seeds (1000, 1001, ...) join the bench (held-in rows)
    new_seed_families: list[str] = []  # the families that get those new seeds ([] = every generated family)
    gates: bool = True  # run the procedural tasks through the synthesis gates here (in the sandbox)
    dedupe_threshold: float = 0.90  # MiniLM cosine at or above which a task is a near-duplicate
    workers: int = 1  # gate workers (sandboxes) for the procedural tasks


class LLMCandidatesConfig(LLMRouteConfig):
    n_llm: int = 0  # 0: nothing to make (the offline default graph has no generator endpoint)


def _persona_dicts(lake: LakeResource) -> list:
    """The personas table's persona dicts."""
    import json

    return [json.loads(s) for s in lake.personas().column("persona_json").to_pylist()]


def _llm_plan(config: LLMRouteConfig, lake: LakeResource, endpoints: ModelEndpointsResource, pdicts: list,
              asset: str = "synthetic_tasks", stack=None):
    """The pipeline's LLMPlan for `config` (clawgym.synth.llm_plan.llm_plan; dg.Failure naming the bad field); local
    model endpoints are served on `stack` (an ExitStack the caller closes after synthesis)."""
    import json

    from clawgym.synth.llm_plan import PlanError, llm_plan

    skills_ = [json.loads(s) for s in lake.skills().column("skill_json").to_pylist()]
    try:
        return llm_plan(config, endpoints.policy, pdicts, skills_, cache_dir=str(lake.path("cache", "llm")),
                        gate_cache_dir=str(lake.path("cache", "gates")), asset=asset, stack=stack)
    except PlanError as e:
        raise dg.Failure(str(e)) from None


def _llm_metadata(stats: dict) -> dict:
    """The LLM route's request statistics as asset metadata."""
    return {"llm": dg.MetadataValue.json(stats), "llm_requests": int(stats.get("requests") or 0),
            "llm_cache_hits": int(stats.get("cache_hits") or 0)}


def _gate_table(counts_: dict) -> str:
    from clawgym.synth.pipeline import GATE_ORDER

    gates = [g for g in GATE_ORDER if any(g in d["passed"] for cats in counts_.values() for d in cats.values())]
    rows = [[route, cat, d["candidates"], *[d["passed"].get(g, "") for g in gates], d["accepted"]]
            for route, cats in sorted(counts_.items()) for cat, d in sorted(cats.items())]
    return md_table(["route", "category", "candidates", *[f"passed {g}" for g in gates], "accepted"], rows)


@dg.asset(group_name=GROUP, kinds={"python"}, partitions_def=llm_shard_partitions, deps=[personas, skills],
          description="The LLM route's candidates of one shard (candidate i of each route is in shard i % 16), made "
                      "and gated into the content-addressed response and gate caches: a backfill over the shards "
                      "spreads a large LLM synthesis over runs (and run workers); `synthetic_tasks` with the same "
                      "LLM config then reads every answer from the caches. Without a partition key: all shards.")
def llm_candidates(context: dg.AssetExecutionContext, config: LLMCandidatesConfig, lake: LakeResource,
                   sandbox: SandboxResource, endpoints: ModelEndpointsResource) -> dg.MaterializeResult:
    from clawgym.synth.pipeline import generate_llm, rejection_stage_counts

    if config.n_llm <= 0:
        return dg.MaterializeResult(metadata={"n_candidates": 0, "status": "n_llm is 0: nothing to make"})
    pdicts = _persona_dicts(lake)
    with contextlib.ExitStack() as servers:  # local model endpoints: served for this run, stopped on the way out
        plan = _llm_plan(config, lake, endpoints, pdicts, asset="llm_candidates", stack=servers)
        if context.has_partition_key:
            plan.shard, plan.n_shards = int(context.partition_key), LLM_SHARDS
        with sandbox.factory() as factory:
            acc, rej, stats = generate_llm(plan, factory=factory, seed=config.seed)
    return dg.MaterializeResult(metadata={
        "shard": context.partition_key if context.has_partition_key else "all",
        "n_candidates": int(stats.get("candidates") or 0), "n_accepted": len(acc), "n_rejected": len(rej),
        "rejected_by_gate": md_counts("gate", rejection_stage_counts(rej)),
        **_llm_metadata(stats),
    })


# no declared dep on llm_candidates: it fills caches synthetic_tasks would otherwise fill itself (it reads no table
# of it), and a partitioned upstream would make `--select *verifiers` need a partition key
@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, deps=[personas, skills],
          description="Task specs from clawgym.synth.pipeline.synthesize: the procedural route (default), the LLM "
                      "route (persona-driven and skill-grounded, via named endpoints) or both -> gates -> dedupe -> "
                      "split by held-out family into train and bench. Every rejection (gate, reason) goes to "
                      "rejected_tasks.")
def synthetic_tasks(context: dg.AssetExecutionContext, config: SyntheticTasksConfig, lake: LakeResource,
                    sandbox: SandboxResource, endpoints: ModelEndpointsResource) -> dg.MaterializeResult:
    from clawgym.synth.embed import minilm_embedder
    from clawgym.synth.synthetic import synthesize_tasks

    if config.route not in ROUTES:
        raise dg.Failure(f"synthetic_tasks.config.route: {config.route!r} is not one of {', '.join(ROUTES)}")
    pdicts = _persona_dicts(lake)
    embed = minilm_embedder(str(lake.path("cache", "minilm_embeddings.npz")))
    # local model endpoints (generator / reviewer / auditor) are served for this run and stopped on the way out
    with contextlib.ExitStack() as servers, sandbox.factory() as factory:
        plan = _llm_plan(config, lake, endpoints, pdicts, stack=servers) if config.route in ("llm", "both") else None
        run = synthesize_tasks(config.route, config.n, seed=config.seed, factory=factory, personas=pdicts,
                               families=config.families, workers=config.workers,
                               heldout_per_category=config.heldout_per_category,
                               heldout_families=config.heldout_families, bench_new_seeds=config.bench_new_seeds,
                               new_seed_families=config.new_seed_families,
                               dedupe_threshold=config.dedupe_threshold, gates=config.gates, embed=embed, llm=plan,
                               gate_cache_dir=str(lake.path("cache", "gates")))
    tasks, res = run.tasks, run.result
    lake.write(Table.TASKS, [task_row(t, TaskSource.SYNTHETIC.value) for t in tasks], {"source": TaskSource.SYNTHETIC})
    # rejected_tasks: this asset's own partition (stage = the gate); the verifiers' partition is theirs
    lake.write(Table.REJECTED_TASKS, res.rejections, {"writer": RejectedBy.SYNTHESIS})
    for r in res.rejections:
        context.log.info(f"rejected {r['task_id']} ({r['route']}, {r['category']}) at {r['stage']}: "
                         f"{r['reason'][:200]}")
    gc, div = run.gate_counts, run.diversity
    return dg.MaterializeResult(metadata={
        "route": config.route,
        "n": len(tasks), "n_train": sum(t.split == "train" for t in tasks),
        "n_bench": sum(t.split == "bench" for t in tasks),
        "n_candidates": len(res.candidates), "n_rejected": len(res.rejections),
        "heldout_families": dg.MetadataValue.json(run.bench_families),
        "by_category": md_counts("category", counts(t.category for t in tasks)),
        "by_family": md_counts("family", counts(t.family for t in tasks)),
        "by_route": md_counts("route", counts(t.route for t in tasks)),
        "gates": _gate_table(gc),
        "gate_counts": dg.MetadataValue.json(gc),
        "rejected_by_gate": md_counts("gate", counts(r["stage"] for r in res.rejections)),
        "diversity": md_table(["route", "category", "tasks", "families", "spread (mean pairwise cosine distance)",
                               "mean distance to centroid"],
                              [[d["route"], d["category"], d["n"], d["families"], d["spread"], d["centroid_dist"]]
                               for d in div]),
        "diversity_json": dg.MetadataValue.json(div),
        "timings_s": dg.MetadataValue.json({k: round(v, 3) for k, v in res.timings.items()}),
        **({**_llm_metadata(res.llm_stats),
            "llm_tokens_per_accepted_task": float(res.llm_stats.get("tokens_per_accepted_task") or 0.0)}
           if res.llm_stats else {}),
    })


def _all_tasks(lake: LakeResource, sources=TRAIN_SOURCES):
    return lake.task_objects(sources)


@dg.asset(group_name=GROUP, kinds={"python"}, deps=[synthetic_tasks, imported_tasks],
          description="The files each task starts with, materialised under data/workspaces/<task_id>/.")
def mock_workspaces(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    from clawgym.tasks.workspaces import write_workspaces

    root = lake.path("workspaces")
    rep = write_workspaces(_all_tasks(lake), root, warn=context.log.warning)
    return dg.MaterializeResult(metadata={
        "n_workspaces": rep.n_written, "n_failed": len(rep.failed), "failed": dg.MetadataValue.json(rep.failed),
        "n_files": rep.n_files, "path": str(root),
        "by_extension": md_counts("extension", dict(sorted(rep.by_extension.items()))),
        "bytes_histogram": md_histogram([min(s, 20000) for s in rep.sizes], lo=0, hi=20000, title="bytes"),
    })


class VerifiersConfig(dg.Config):
    oracle_validation: bool = True  # procedural tasks: synth gates (oracle 1, no-op/scaffold 0, mutations, determinism)
    hacker_imported: bool = True  # imported tasks: the hacker gate's exploits (flagged, never dropped)
    gate_timeout_s: float = 600.0


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, deps=[mock_workspaces, synthetic_tasks, imported_tasks],
          pool="sandboxes",
          description="Each task verified on its untouched workspace (the no-op baseline); tasks with a reference "
                      "solution also pass the synthesis gates (oracle scores 1, no-op/scaffold 0, mutations lower "
                      "the score, deterministic). Failing tasks go to rejected_tasks.")
def verifiers(context: dg.AssetExecutionContext, config: VerifiersConfig, lake: LakeResource,
              sandbox: SandboxResource, judge: JudgeResource) -> dg.MaterializeResult:
    from clawgym.synth.verifiers import hack_summary, verify_tasks

    tasks = _all_tasks(lake)
    with sandbox.factory() as factory:
        rep = verify_tasks(tasks, factory, judge=judge.judge(), oracle_validation=config.oracle_validation,
                           hacker_imported=config.hacker_imported, gate_timeout_s=config.gate_timeout_s,
                           cache_dir=str(lake.path("cache", "gates")), warn=context.log.warning)
    lake.write(Table.VERIFICATIONS, rep.verifications)
    lake.write(Table.TASK_VALIDATIONS, rep.validations)
    # rejected_tasks: this asset's own partition; synthetic_tasks' rejections (stage = the gate) are theirs
    lake.write(Table.REJECTED_TASKS, rep.rejected, {"writer": RejectedBy.VERIFIERS})
    noops = [r for r in rep.verifications if r["kind"] == "noop"]
    hacks = rep.hacks
    return dg.MaterializeResult(metadata={
        "n_tasks": len(tasks), "n_validated": rep.n_validated, "n_rejected": len(rep.rejected),
        "noop_mean_by_category": md_table(["category", "mean no-op score"],
                                          list(group_mean(noops, "category", "score").items())),
        "oracle_pass_rate": rep.oracle_pass_rate,
        "gate_cache_hits": int(rep.gate_stats.get("cache_hits", 0)),
        "noop_histogram": md_histogram([r["score"] for r in noops], title="no-op score"),
        "rejected": dg.MetadataValue.json([{"task_id": r["task_id"], "reason": r["reason"]}
                                           for r in rep.rejected][:50]),
        "hackable_by_source": md_table(["source", "tasks", "exploits run", "hackable", "rate", "by exploit"],
                                       hack_summary(hacks)),
        "hackable": dg.MetadataValue.json({h["task_id"]: {x: h["scores"][x] for x in h["hackable"]}
                                           for h in hacks if h["hackable"]}),
    })


def valid_task_ids(lake: LakeResource) -> set:
    """Tasks not rejected by the verifiers."""
    ids = set(lake.tasks(TaskSource.SYNTHETIC).column("task_id").to_pylist())
    ids |= set(lake.tasks(TaskSource.IMPORTED).column("task_id").to_pylist())
    return ids - lake.rejected_task_ids()
