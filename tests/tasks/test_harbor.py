"""Harbor interop: our tasks as Harbor task folders and back, Harbor tasks in our graph.

- procedural bench tasks (4 code-only tasks per category, 24) -> Harbor folders -> imported back: our `oracle`
  scores 1.0 and `noop` equals verify_noop of the original, on bwrap;
- the ClawGym fixture tasks -> Harbor -> back: noop equals the fixture's noop scores JSON;
- a hand-made Harbor task (tests/harbor_tasks/hello-offline: FROM clawgym-sandbox:latest, an offline test.sh)
  imports and scores 1.0 with its solution; with FROM ubuntu:24.04 mapped to ours by config, the same;
- the three third-party cookbook tasks import with every part read, and as a bench suite each is one recorded
  error naming the task, the file and the line (their Dockerfiles pull, their test.sh downloads);
- clear errors: no instruction.md, a task.toml that does not parse, a test.sh that writes no reward;
- marked `harbor` (and docker): the real Harbor (`harbor run -a oracle` / `-a nop` on the local engine) on
  exported tasks, its rewards from its own result files equal to verify_task's.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from clawgym.tasks import TaskError, detect_format, import_any
from clawgym.tasks.harbor import (
    DEFAULT_BASE_IMAGE,
    import_harbor_folder,
    import_harbor_task,
    offline_problems,
    parse_dockerfile,
)
from clawgym.tasks.harbor_export import export_harbor_dataset, export_harbor_task

REPO = Path(__file__).resolve().parents[2]
FIX = Path(os.environ.get("CLAWGYM_FIXTURES") or REPO.parent / "shared" / "fixtures")
COOKBOOK = FIX / "harbor_cookbook_sample"
CLAWGYM_SAMPLE = FIX / "clawgym_train_sample"
HELLO = REPO / "tests" / "harbor_tasks" / "hello-offline"
HARBOR_VENV = Path(os.environ.get("HARBOR_VENV") or REPO / "data" / "harbor-venv")


def procedural_tasks(per_category: int = 4) -> list:
    """`per_category` code-only procedural tasks per category (held-out families first), seed 3."""
    from clawgym.synth.dedupe import split_by_family
    from clawgym.synth.families import all_families

    tasks = split_by_family([f.generate(3) for f in all_families()])
    by_cat = collections.defaultdict(list)
    for t in sorted(tasks, key=lambda t: (t.split != "bench", t.task_id)):
        if not t.verifier.rubric and len(by_cat[t.category]) < per_category:
            by_cat[t.category].append(t)
    assert len(by_cat) == 6 and all(len(v) == per_category for v in by_cat.values()), dict(by_cat)
    return [t for c in sorted(by_cat) for t in by_cat[c]]


# ------------------------------------------------------------------------------------------ export ----
def test_export_layout(tmp_path):
    t = procedural_tasks(1)[0]
    d = export_harbor_task(t, tmp_path / t.task_id)
    for rel in ("instruction.md", "task.toml", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh",
                "tests/clawgym_verify.py", "tests/check_code.py", "tests/grade_driver.py", "solution/toolcore.py"):
        assert (d / rel).is_file(), rel
    assert (d / "instruction.md").read_text().strip() == t.instruction.strip()
    conf = tomllib.loads((d / "task.toml").read_text())
    assert conf["verifier"]["environment_mode"] == "separate"
    assert conf["artifacts"] == ["/tmp/clawgym-export"] and conf["verifier"]["collect"][0]["command"]
    assert conf["metadata"]["family"] == t.family and conf["metadata"]["seed"] == t.seed
    assert conf["metadata"]["category"] == t.category and conf["metadata"]["split"] == t.split
    assert conf["agent"]["timeout_sec"] == t.timeout_s
    df = parse_dockerfile((d / "environment/Dockerfile").read_text())
    assert df["from"][0][1] == DEFAULT_BASE_IMAGE and df["workdir"] == t.workspace_dir
    for f in t.files:
        assert (d / "environment/workspace" / f.path).read_bytes() == f.content
    text = "\n".join(p.read_text() for p in (d / "tests").glob("*.sh"))
    assert "curl" not in text and "pip install" not in text and "uv" not in text.split()
    d2 = export_harbor_task(t, tmp_path / "other", base_image="registry.example.com/clawgym-sandbox:1")
    assert "FROM registry.example.com/clawgym-sandbox:1" in (d2 / "environment/Dockerfile").read_text()
    # the rubric is marked, never silently dropped
    from clawgym.synth.families import all_families

    rt = next(x for x in (f.generate(3) for f in all_families()) if x.verifier.rubric)
    d3 = export_harbor_task(rt, tmp_path / rt.task_id)
    assert "not scored in Harbor" in tomllib.loads((d3 / "task.toml").read_text())["metadata"]["clawgym_rubric"]
    assert json.loads((d3 / "tests/rubric.json").read_text())["rules"]


def test_round_trip_procedural_bwrap(tmp_path, bwrap_factory):
    """24 procedural tasks (4 per category) -> Harbor -> back: oracle 1.0, noop == verify_noop of the original."""
    from clawgym.agent.rollout import run_rollout
    from clawgym.verify.runtime import verify_noop

    tasks = procedural_tasks(4)
    export_harbor_dataset(tasks, tmp_path / "ds")
    assert detect_format(tmp_path / "ds") == "harbor_folder"
    rep = import_any(tmp_path / "ds")
    assert rep.ok and len(rep.tasks) == 24, rep.summary()
    orig = {t.task_id: t for t in tasks}
    for t in rep.tasks:
        o = orig[t.task_id]
        assert (t.family, t.category, t.seed, t.split) == (o.family, o.category, o.seed, o.split)
        assert t.file_map() == o.file_map() and t.workspace_dir == o.workspace_dir
        assert offline_problems(t) == []
        ro = run_rollout(t, "oracle", bwrap_factory)
        assert ro.failure_class == "ok" and ro.score == 1.0, (t.task_id, ro.error, ro.verification)
        n = run_rollout(t, "noop", bwrap_factory)
        assert n.score == verify_noop(o, bwrap_factory).score, t.task_id


def test_clawgym_fixture_round_trip_noop(tmp_path, bwrap_factory):
    if not CLAWGYM_SAMPLE.is_dir():
        pytest.skip(f"ClawGym fixtures not found at {CLAWGYM_SAMPLE} (set CLAWGYM_FIXTURES)")
    from clawgym.verify.runtime import verify_noop

    expected = json.loads((FIX / "clawgym_train_sample_noop_scores.json").read_text())
    src = import_any(CLAWGYM_SAMPLE)
    assert src.ok
    export_harbor_dataset(src.tasks, tmp_path / "ds")
    back = import_harbor_folder(tmp_path / "ds")
    assert back.ok and len(back.tasks) == len(src.tasks) == len(expected)
    for t in back.tasks:
        assert verify_noop(t, bwrap_factory).score == pytest.approx(expected[t.task_id], abs=1e-9), t.task_id


# ------------------------------------------------------------------------------------------ import ----
def test_hand_made_task_scores_its_solution(tmp_path, bwrap_factory):
    from clawgym.agent.rollout import run_rollout

    t = import_harbor_task(HELLO)
    assert t.task_id == "hello-offline" and t.workspace_dir == "/app" and offline_problems(t) == []
    assert [f.path for f in t.files] == ["names.txt"] and t.reference and t.timeout_s == 120.0
    assert run_rollout(t, "oracle", bwrap_factory).score == 1.0
    n = run_rollout(t, "noop", bwrap_factory)
    assert n.score == 0.0 and n.failure_class == "ok"
    # the same task FROM ubuntu:24.04: a pull offline, unless the base image is mapped to ours by config
    d = tmp_path / "hello-ubuntu"
    shutil.copytree(HELLO, d)
    df = d / "environment" / "Dockerfile"
    df.write_text(df.read_text().replace(f"FROM {DEFAULT_BASE_IMAGE}", "FROM ubuntu:24.04"))
    rep = import_harbor_folder(d, runnable_only=True)
    assert not rep.tasks and "Dockerfile line 1: FROM ubuntu:24.04 needs a registry pull" in str(rep.errors[0])
    mapped = import_harbor_folder(d, runnable_only=True, base_images={"ubuntu:24.04": DEFAULT_BASE_IMAGE})
    assert mapped.ok and run_rollout(mapped.tasks[0], "oracle", bwrap_factory).score == 1.0


def test_cookbook_tasks_import_every_part():
    if not COOKBOOK.is_dir():
        pytest.skip(f"Harbor cookbook fixtures not found at {COOKBOOK} (set CLAWGYM_FIXTURES)")
    rep = import_harbor_folder(COOKBOOK)
    assert rep.ok and sorted(t.task_id for t in rep.tasks) == ["multi-reward", "simple-task", "skills"]
    by = {t.task_id: t for t in rep.tasks}
    for name, t in by.items():
        h = t.source["harbor"]
        root = COOKBOOK / name
        assert t.instruction == (root / "instruction.md").read_text()
        assert h["task_toml"] == (root / "task.toml").read_text() and h["config"]["verifier"]["timeout_sec"] == 120
        assert h["dockerfile"] == (root / "environment/Dockerfile").read_text() and h["image"] == "ubuntu:24.04"
        assert t.workspace_dir == "/app" and t.reference is not None
        tests = {f.path: f.content for f in t.verifier.reward_files if f.path.startswith("tests/")}
        assert tests == {f"tests/{p.relative_to(root / 'tests')}": p.read_bytes()
                         for p in (root / "tests").rglob("*") if p.is_file()}
        assert "README.md" in h["other_files"]
        probs = offline_problems(t)
        assert any("Dockerfile line 1: FROM ubuntu:24.04 needs a registry pull" in p for p in probs)
        assert any("tests/test.sh line 6: curl -LsSf https://astral.sh/uv" in p for p in probs)
    assert set(by["multi-reward"].source["harbor"]["other_files"]) == {"README.md", "config.yaml",
                                                                        "metrics/per_dimension.py"}
    assert by["skills"].source["harbor"]["skills_dir"] == "/skills"
    assert [f.path for f in by["skills"].files] == ["skills/generate-greeting/SKILL.md"]  # where OpenClaw looks
    assert by["multi-reward"].timeout_s == 120.0 and by["skills"].timeout_s == 600.0


def test_cookbook_as_bench_suite_records_errors():
    if not COOKBOOK.is_dir():
        pytest.skip(f"Harbor cookbook fixtures not found at {COOKBOOK} (set CLAWGYM_FIXTURES)")
    from clawgym.bench.suites import load_suite_folder

    rep = load_suite_folder(str(COOKBOOK), suite="harbor", fmt="harbor")
    assert rep.tasks == [] and len(rep.errors) == 3  # recorded, the suite goes on; never a rollout
    for e in rep.errors:
        assert isinstance(e, TaskError) and "cannot run offline" in str(e)
        assert e.file in ("multi-reward", "simple-task", "skills") and "line" in str(e)
    # with the base image mapped the Dockerfile is fine, but the tests still download: still one error each
    rep = load_suite_folder(str(COOKBOOK), suite="harbor", fmt="harbor",
                            base_images={"ubuntu:24.04": DEFAULT_BASE_IMAGE})
    assert rep.tasks == [] and all("downloads at" in str(e) for e in rep.errors)
    assert all("registry pull" not in str(e) for e in rep.errors)


def _hello_copy(tmp_path, name="t") -> Path:
    d = tmp_path / name
    shutil.copytree(HELLO, d)
    return d


def test_clear_errors(tmp_path, bwrap_factory):
    d = _hello_copy(tmp_path, "no-instruction")
    (d / "instruction.md").unlink()
    with pytest.raises(TaskError, match=r"no-instruction/instruction.md: missing"):
        import_harbor_task(d)
    d = _hello_copy(tmp_path, "bad-toml")
    (d / "task.toml").write_text("[verifier\ntimeout_sec = 1\n")
    with pytest.raises(TaskError, match=r"bad-toml/task.toml: is not valid TOML"):
        import_harbor_task(d)
    d = _hello_copy(tmp_path, "bad-field")
    (d / "task.toml").write_text('[agent]\ntimeout_sec = "soon"\n')
    with pytest.raises(TaskError, match=r'bad-field/task.toml: "agent.timeout_sec" must be a positive number'):
        import_harbor_task(d)
    d = _hello_copy(tmp_path, "no-test")
    (d / "tests" / "test.sh").unlink()
    with pytest.raises(TaskError, match=r"no-test/tests/test.sh: missing"):
        import_harbor_task(d)
    # in a folder: one error each, the rest imported
    rep = import_harbor_folder(tmp_path)
    assert len(rep.errors) == 4 and rep.tasks == []
    # a test.sh that writes no reward: 0 with that error (the verifier's fault, said so, not the model's)
    d = _hello_copy(tmp_path / "x", "no-reward")
    (d / "tests" / "test.sh").write_text("#!/bin/bash\necho checked but wrote nothing\n")
    from clawgym.agent.rollout import run_rollout

    ro = run_rollout(import_harbor_task(d), "oracle", bwrap_factory)
    assert ro.score == 0.0 and ro.failure_class == "ok"
    errs = " ".join(ro.verification.errors)
    assert "harbor test.sh wrote no reward" in errs and "/logs/verifier/reward.txt" in errs


def test_symlink_refused(tmp_path):
    d = _hello_copy(tmp_path, "linked")
    (d / "tests" / "check_greetings.py").unlink()
    (d / "tests" / "check_greetings.py").symlink_to("/etc/passwd")
    with pytest.raises(TaskError, match="symlink"):
        import_harbor_task(d)


# ------------------------------------------------------------------------------------- real Harbor ----
def _harbor_bin() -> Path:
    h = HARBOR_VENV / "bin" / "harbor"
    if not h.exists():
        pytest.skip(f"Harbor not installed at {HARBOR_VENV} (scripts/install_harbor.sh)")
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("docker compose v2 not available (scripts/install_harbor.sh links it)")
    return h


def harbor_rewards(dataset: Path, agent: str, jobs: Path, n_concurrent: int = 4) -> dict[str, float | None]:
    """`harbor run -p dataset -a agent` on the local docker engine; {task name: rewards["reward"]} read from
    Harbor's own per-trial result.json files (None: the trial has no verifier result)."""
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    r = subprocess.run([str(_harbor_bin()), "run", "-p", str(dataset), "-a", agent, "-o", str(jobs), "-q",
                        "-n", str(n_concurrent)], capture_output=True, text=True, env=env, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out: dict[str, float | None] = {}
    for res in jobs.glob("*/*/result.json"):
        d = json.loads(res.read_text())
        name = d.get("task_name") or res.parent.name.split("__")[0]
        vr = d.get("verifier_result") or {}
        out[name] = (vr.get("rewards") or {}).get("reward")
    return out


@pytest.mark.harbor
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_real_harbor_oracle_and_nop(tmp_path, bwrap_factory):
    """The real Harbor on the local docker engine: procedural bench tasks (code-only, one per category: 6;
    CLAWGYM_HARBOR_PER_CATEGORY=4 for 24) exported, `-a oracle` -> every task 1.0; `-a nop` on them and on
    ClawGym fixture tasks (no solutions: nop only; by default a representative few: the first 4 that score 0
    untouched and up to 4 that score above 0 (the sample has 3); CLAWGYM_HARBOR_FIXTURES=all for the 37, =N for
    the first N) -> what our verifier gives the untouched workspace. Rewards from Harbor's own result files ==
    verify_task's.
    CLAWGYM_HARBOR_FULL=1 runs everything (24 + 37): a Harbor trial costs ≈ 8 s here, the whole set ≈ 12 min."""
    _harbor_bin()
    from clawgym.verify.runtime import verify_noop

    full = os.environ.get("CLAWGYM_HARBOR_FULL") == "1"
    tasks = procedural_tasks(int(os.environ.get("CLAWGYM_HARBOR_PER_CATEGORY", "4" if full else "1")))
    export_harbor_dataset(tasks, tmp_path / "ds")
    oracle = harbor_rewards(tmp_path / "ds", "oracle", tmp_path / "jobs-oracle")
    assert oracle == {t.task_id: 1.0 for t in tasks}
    fixture = []
    if CLAWGYM_SAMPLE.is_dir():
        fixture = import_any(CLAWGYM_SAMPLE).tasks
        n = os.environ.get("CLAWGYM_HARBOR_FIXTURES", "all" if full else "")
        if n and n != "all":
            fixture = fixture[: int(n)]
        elif not n:
            noop = json.loads((FIX / "clawgym_train_sample_noop_scores.json").read_text())
            zero = [t for t in fixture if noop[t.task_id] == 0.0][:4]
            above = [t for t in fixture if noop[t.task_id] > 0.0][:4]
            fixture = zero + above
        export_harbor_dataset(fixture, tmp_path / "ds")  # the same folder: nop over both kinds
    nop = harbor_rewards(tmp_path / "ds", "nop", tmp_path / "jobs-nop")
    ours = {t.task_id: verify_noop(t, bwrap_factory).score for t in tasks + fixture}
    assert nop.keys() == ours.keys()
    for k in ours:
        assert nop[k] == pytest.approx(ours[k], abs=1e-9), k
    if fixture:
        expected = json.loads((FIX / "clawgym_train_sample_noop_scores.json").read_text())
        assert {t.task_id: nop[t.task_id] for t in fixture} == pytest.approx(
            {t.task_id: expected[t.task_id] for t in fixture}, abs=1e-9)



def test_harbor_datasets_asset_and_cli(tmp_path):
    """The graph's harbor_datasets[bench] and `clawgym export harbor` write the accepted tasks of the lake."""
    import dagster as dg
    from typer.testing import CliRunner

    from clawgym.lake import Table, TaskSource
    from clawgym.lake.records import task_row
    from clawgym_assets.defs.harbor.assets import harbor_datasets
    from clawgym_assets.defs.lake.resources import LakeResource

    tasks = procedural_tasks(1)
    for i, t in enumerate(tasks):
        t.split = "bench" if i < 3 else "train"
    lake = LakeResource(data_dir=str(tmp_path / "data"))
    lake.write(Table.TASKS, [task_row(t, TaskSource.SYNTHETIC) for t in tasks], {"source": str(TaskSource.SYNTHETIC)})
    r = dg.materialize([harbor_datasets], partition_key="bench", resources={"lake": lake})
    assert r.success
    out = Path(lake.path("harbor", "bench"))
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(t.task_id for t in tasks[:3])
    assert json.loads((out / "clawgym_dataset.json").read_text())["n"] == 3

    from clawgym.cli import app

    res = CliRunner().invoke(app, ["export", "harbor", str(tmp_path / "cli"), "--from", str(HELLO)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "cli" / "hello-offline" / "task.toml").is_file()
    res = CliRunner(env={"CLAWGYM_DATA": str(tmp_path / "data")}).invoke(
        app, ["export", "harbor", str(tmp_path / "cli2"), "--split", "bench"])
    assert res.exit_code == 0, res.output
    assert len([p for p in (tmp_path / "cli2").iterdir() if p.is_dir()]) == 3
