"""Synthesis domain: personas, skills, imported and synthetic tasks, mock workspaces, verifiers."""

import os
import shutil
from pathlib import Path
from typing import List

import dagster as dg

from clawgym.lake.records import counts, group_mean, task_row, tasks_from_table, verification_row
from clawgym_assets._util import md_counts, md_histogram, md_table
from clawgym_resources import JudgeResource, LakeResource, SandboxResource

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
    lake.write("personas", rows)
    return dg.MaterializeResult(metadata={
        "n": len(rows), "by_domain": md_counts("domain", counts(p.domain for p in ps)),
        "by_role": md_counts("role", counts(p.role for p in ps)),
    })


class SkillsConfig(dg.Config):
    skills_dir: str = ""  # "" = the shipped data/skills


@dg.asset(group_name=GROUP, kinds={"python", "parquet"},
          description="OpenClaw skills parsed from SKILL.md folders (name, description, tools, operations).")
def skills(context: dg.AssetExecutionContext, config: SkillsConfig, lake: LakeResource) -> dg.MaterializeResult:
    import json

    from clawgym.synth import skills as sk

    sks = sk.load_skills(config.skills_dir or None)
    rows = []
    for s in sks:
        d = s.to_dict() if hasattr(s, "to_dict") else dict(s)
        rows.append({"skill_id": d.get("skill_id") or d.get("name"), "name": d.get("name"),
                     "description": d.get("description"), "n_operations": len(d.get("operations") or []),
                     "skill_json": json.dumps(d, default=str)})
    lake.write("skills", rows)
    return dg.MaterializeResult(metadata={"n": len(rows), "names": dg.MetadataValue.json([r["name"] for r in rows])})


class ImportedTasksConfig(dg.Config):
    folder: str = "data/seeds/example_suite"  # ClawGym task dirs or PinchBench *.md; relative = repo root
    format: str = "auto"  # auto | clawgym | pinchbench
    suite: str = "imported"


@dg.asset(group_name=GROUP, kinds={"python", "parquet"},
          description="A task suite imported from a folder (ClawGym task dirs or PinchBench markdown).")
def imported_tasks(context: dg.AssetExecutionContext, config: ImportedTasksConfig,
                   lake: LakeResource) -> dg.MaterializeResult:
    from clawgym.bench.suites import load_suite_folder

    rep = load_suite_folder(config.folder, suite=config.suite, split="train", fmt=config.format)
    for e in rep.errors:
        context.log.warning(f"import error: {e}")
    if not rep.tasks and rep.errors:
        raise rep.errors[0]
    tasks = rep.tasks
    for t in tasks:
        t.route = "imported"
    lake.write("tasks", [task_row(t, "imported") for t in tasks], {"source": "imported"})
    return dg.MaterializeResult(metadata={
        "n": len(tasks), "errors": len(rep.errors), "folder": config.folder,
        "by_category": md_counts("category", counts(t.category for t in tasks)),
    })


class SyntheticTasksConfig(dg.Config):
    route: str = "procedural"  # procedural (offline default) | llm (needs an endpoint)
    n: int = 24
    seed: int = 0
    families: List[str] = []  # [] = all registered families
    heldout_families: int = 2  # families kept out of training for the procedural bench suite


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, deps=[personas, skills],
          description="Task specs from the procedural route (default) — split by family into train and held-out bench.")
def synthetic_tasks(context: dg.AssetExecutionContext, config: SyntheticTasksConfig,
                    lake: LakeResource) -> dg.MaterializeResult:
    from clawgym.synth.families import generate_procedural
    from clawgym.synth.personas import Persona

    if config.route != "procedural":
        raise dg.Failure(f"route {config.route!r} is not available offline; use route=procedural")
    import json

    ptab = lake.read("personas")
    people = [Persona(**{**json.loads(s), "goals": tuple(json.loads(s)["goals"]), "tools": tuple(json.loads(s)["tools"])})
              for s in ptab.column("persona_json").to_pylist()]
    tasks = generate_procedural(config.n, seed=config.seed, families=config.families or None, personas=people or None)
    from clawgym.bench.suites import split_families

    bench_fams = split_families(sorted({t.family for t in tasks}), config.heldout_families, seed=config.seed)
    for t in tasks:
        t.suite = "procedural"
        t.split = "bench" if t.family in bench_fams else "train"
    lake.write("tasks", [task_row(t, "synthetic") for t in tasks], {"source": "synthetic"})
    return dg.MaterializeResult(metadata={
        "n": len(tasks), "n_train": sum(t.split == "train" for t in tasks),
        "n_bench": sum(t.split == "bench" for t in tasks),
        "heldout_families": dg.MetadataValue.json(sorted(bench_fams)),
        "by_category": md_counts("category", counts(t.category for t in tasks)),
        "by_family": md_counts("family", counts(t.family for t in tasks)),
        "by_route": md_counts("route", counts(t.route for t in tasks)),
    })


def _all_tasks(lake: LakeResource, sources=("imported", "synthetic")):
    out = []
    for s in sources:
        out += tasks_from_table(lake.read("tasks", {"source": s}))
    return out


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
    oracle_validation: bool = True  # procedural tasks: the oracle must score 1 and the no-op 0
    max_turns: int = 40


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, deps=[mock_workspaces], pool="sandboxes",
          description="Each task verified on its untouched workspace (the no-op baseline); procedural tasks "
                      "also validated by replaying their oracle solution. Failing tasks go to rejected_tasks.")
def verifiers(context: dg.AssetExecutionContext, config: VerifiersConfig, lake: LakeResource,
              sandbox: SandboxResource, judge: JudgeResource) -> dg.MaterializeResult:
    from clawgym.verify import verify_noop

    tasks = _all_tasks(lake)
    j = judge.judge()
    vrows, valid, rejected = [], [], []
    with sandbox.factory() as factory:
        for t in tasks:
            noop = verify_noop(t, factory, judge=j)
            vrows.append(verification_row(t, noop, "noop"))
            if not (config.oracle_validation and t.reference is not None):
                continue
            from clawgym.agent.loop import Limits
            from clawgym.agent.rollout import run_rollout

            ro = run_rollout(t, "oracle", factory, limits=Limits(max_turns=config.max_turns), judge=j)
            ores = ro.verification or {"score": ro.score, "error": ro.error}
            vrows.append(verification_row(t, ores, "oracle"))
            issues = []
            if ro.score is None or ro.score < 1.0 - 1e-9:
                issues.append(f"oracle scored {ro.score} ({ro.failure_class}: {ro.error})")
            if noop.score > 1e-9:
                issues.append(f"no-op scored {noop.score}")
            valid.append({"task_id": t.task_id, "route": t.route, "family": t.family, "category": t.category,
                          "passed": not issues, "oracle_score": ro.score, "noop_score": noop.score,
                          "deterministic": None, "issues_json": issues})
            if issues:
                rejected.append({**task_row(t, "synthetic"), "stage": "verifiers", "reason": "; ".join(issues)})
                context.log.warning(f"rejected {t.task_id}: {'; '.join(issues)}")
    lake.write("verifications", vrows)
    lake.write("task_validations", valid)
    lake.write("rejected_tasks", rejected)
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
    ids = set(lake.read("tasks", {"source": "synthetic"}).column("task_id").to_pylist())
    ids |= set(lake.read("tasks", {"source": "imported"}).column("task_id").to_pylist())
    return ids - set(lake.read("rejected_tasks").column("task_id").to_pylist())
