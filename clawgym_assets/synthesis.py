"""Synthesis domain: personas, skills, imported and synthetic tasks, mock workspaces, verifiers."""

import os
import shutil
from pathlib import Path
from typing import List

import dagster as dg

from clawgym.lake import TRAIN_SOURCES, Table, TaskSource
from clawgym.lake.records import counts, group_mean, task_row, verification_row
from clawgym_assets._util import md_counts, md_histogram, md_table
from clawgym_resources import JudgeResource, LakeResource, OpenClawResource, SandboxResource

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
    from clawgym.bench.suites import load_suite_folder

    from clawgym.bench.suites import resolve_dir

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


class SyntheticTasksConfig(dg.Config):
    route: str = "procedural"  # procedural (offline default) | llm (needs an endpoint)
    n: int = 24
    seed: int = 0
    families: List[str] = []  # [] = all registered families
    heldout_per_category: int = 1  # whole families per category kept out of training (procedural bench)


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, deps=[personas, skills],
          description="Task specs from the procedural route (default) — split by family into train and held-out bench.")
def synthetic_tasks(context: dg.AssetExecutionContext, config: SyntheticTasksConfig,
                    lake: LakeResource) -> dg.MaterializeResult:
    from clawgym.synth.families import generate_procedural
    from clawgym.synth.personas import Persona

    if config.route != "procedural":
        raise dg.Failure(f"route {config.route!r} is not available offline; use route=procedural")
    import json

    ptab = lake.personas()
    people = [Persona(**{**json.loads(s), "goals": tuple(json.loads(s)["goals"]),
                         "tools": tuple(json.loads(s)["tools"])})
              for s in ptab.column("persona_json").to_pylist()]
    tasks = generate_procedural(config.n, seed=config.seed, families=config.families or None, personas=people or None)
    from clawgym.synth.gates import split_by_family

    tasks = split_by_family(tasks, held_out_per_category=config.heldout_per_category, seed=config.seed)
    for t in tasks:
        t.suite = "procedural"
    bench_fams = {t.family for t in tasks if t.split == "bench"}
    lake.write(Table.TASKS, [task_row(t, TaskSource.SYNTHETIC.value) for t in tasks], {"source": TaskSource.SYNTHETIC})
    return dg.MaterializeResult(metadata={
        "n": len(tasks), "n_train": sum(t.split == "train" for t in tasks),
        "n_bench": sum(t.split == "bench" for t in tasks),
        "heldout_families": dg.MetadataValue.json(sorted(bench_fams)),
        "by_category": md_counts("category", counts(t.category for t in tasks)),
        "by_family": md_counts("family", counts(t.family for t in tasks)),
        "by_route": md_counts("route", counts(t.route for t in tasks)),
    })


def _all_tasks(lake: LakeResource, sources=TRAIN_SOURCES):
    return lake.task_objects(sources)


@dg.asset(group_name=GROUP, kinds={"python"}, deps=[synthetic_tasks, imported_tasks],
          description="The files each task starts with, materialised under data/workspaces/<task_id>/.")
def mock_workspaces(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    tasks = _all_tasks(lake)
    root = lake.path("workspaces")
    tmp = lake.path(f".workspaces.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    exts: dict = {}
    sizes = []
    for t in tasks:
        for f in t.files:
            p = tmp / t.task_id / f.path
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(f.content)
            os.chmod(p, f.mode)
            ext = Path(f.path).suffix.lower() or "(none)"
            exts[ext] = exts.get(ext, 0) + 1
        sizes.append(sum(len(f.content) for f in t.files))
    tmp.mkdir(parents=True, exist_ok=True)
    old = lake.path(f".workspaces.old-{os.getpid()}")
    if root.exists():
        os.replace(root, old)
    os.replace(tmp, root)
    shutil.rmtree(old, ignore_errors=True)
    return dg.MaterializeResult(metadata={
        "n_workspaces": len(tasks), "n_files": sum(exts.values()), "path": str(root),
        "by_extension": md_counts("extension", dict(sorted(exts.items()))),
        "bytes_histogram": md_histogram([min(s, 20000) for s in sizes], lo=0, hi=20000, title="bytes"),
    })


class VerifiersConfig(dg.Config):
    oracle_validation: bool = True  # procedural tasks: synth gates (oracle 1, no-op/scaffold 0, mutations, determinism)
    gate_timeout_s: float = 600.0


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, deps=[mock_workspaces, synthetic_tasks, imported_tasks],
          pool="sandboxes",
          description="Each task verified on its untouched workspace (the no-op baseline); tasks with a reference "
                      "solution also pass the synthesis gates (oracle scores 1, no-op/scaffold 0, mutations lower "
                      "the score, deterministic). Failing tasks go to rejected_tasks.")
def verifiers(context: dg.AssetExecutionContext, config: VerifiersConfig, lake: LakeResource,
              sandbox: SandboxResource, judge: JudgeResource) -> dg.MaterializeResult:
    from clawgym.verify import verify_noop

    tasks = _all_tasks(lake)
    j = judge.judge()
    vrows, valid, rejected = [], [], []
    with sandbox.factory() as factory:
        for t in tasks:
            vrows.append(verification_row(t, verify_noop(t, factory, judge=j), "noop"))
        gated = [t for t in tasks if t.reference is not None] if config.oracle_validation else []
        if gated:
            from clawgym.synth.gates import validate_many

            by_id = {t.task_id: t for t in gated}
            for v in validate_many(gated, factory, timeout=config.gate_timeout_s):
                t = by_id[v.task_id]
                d = v.to_dict()
                vrows.append(verification_row(t, {"score": v.oracle_score if v.oracle_score is not None else 0.0,
                                                  "code_score": v.oracle_score, "error": "; ".join(v.errors) or None,
                                                  "duration_s": v.duration_s, **{"gates": d}}, "oracle"))
                valid.append({"task_id": t.task_id, "route": t.route, "family": t.family, "category": t.category,
                              "passed": v.passed, "oracle_score": v.oracle_score, "noop_score": v.noop_score,
                              "deterministic": (v.oracle_score == v.oracle_score_2) if v.oracle_score_2 is not None
                              else None, "issues_json": [v.reason] if v.reason else []})
                if not v.passed:
                    rejected.append({**task_row(t, TaskSource.SYNTHETIC.value), "stage": "verifiers",
                                     "reason": v.reason})
                    context.log.warning(f"rejected {t.task_id}: {v.reason}")
    lake.write(Table.VERIFICATIONS, vrows)
    lake.write(Table.TASK_VALIDATIONS, valid)
    lake.write(Table.REJECTED_TASKS, rejected)
    noops = [r for r in vrows if r["kind"] == "noop"]
    return dg.MaterializeResult(metadata={
        "n_tasks": len(tasks), "n_validated": len(valid), "n_rejected": len(rejected),
        "noop_mean_by_category": md_table(["category", "mean no-op score"],
                                          list(group_mean(noops, "category", "score").items())),
        "oracle_pass_rate": (sum(v["passed"] for v in valid) / len(valid)) if valid else None,
        "noop_histogram": md_histogram([r["score"] for r in noops], title="no-op score"),
        "rejected": dg.MetadataValue.json([{"task_id": r["task_id"], "reason": r["reason"]} for r in rejected][:50]),
    })


def valid_task_ids(lake: LakeResource) -> set:
    """Tasks not rejected by the verifiers."""
    ids = set(lake.tasks(TaskSource.SYNTHETIC).column("task_id").to_pylist())
    ids |= set(lake.tasks(TaskSource.IMPORTED).column("task_id").to_pylist())
    return ids - lake.rejected_task_ids()
