"""Procedural families of part B (content, planning, software): every family x 2 seeds passes every gate
(oracle 1.0, no-op 0, scaffold 0, each generic mutation loses score) in an isolating sandbox, plus
well-formedness, determinism, persona voicing and the official unbatched gate path."""

from __future__ import annotations

import pytest

from clawgym.synth.families import all_families
from clawgym.synth.families.software import run_tests
from clawgym.synth.gates import validate_many, validate_task
from clawgym.synth.personas import expand_personas
from clawgym.tasks.model import Task

MY_MODULES = ("content", "planning", "software")
MY_CATS = ("content_domain_support", "planning_knowledge", "software_development")
MY_FAMILIES = [f for f in all_families() if f.build.__module__.split(".")[-1] in MY_MODULES]
SEEDS = (0, 1)


def test_at_least_seven_families_per_category():
    for cat in MY_CATS:
        n = sum(1 for f in MY_FAMILIES if f.category == cat)
        assert n >= 7, (cat, n)
    assert all(f.category in MY_CATS for f in MY_FAMILIES)


def test_generation_is_deterministic_and_well_formed():
    calls = []
    for fam in MY_FAMILIES:
        a, b = fam.generate(7), fam.generate(7)
        assert a.to_json() == b.to_json(), fam.name
        assert a.task_id == f"{fam.name}-00007" and a.route == "procedural" and a.family == fam.name
        assert fam.generate(8).fingerprint() != a.fingerprint(), f"{fam.name}: seeds give identical tasks"
        assert "output/" in a.instruction or any(o in a.instruction for o in a.source["outputs"])
        assert a.verifier.kind == "grade" and "def grade(transcript, workspace_path)" in a.verifier.code
        assert "/root/.openclaw" not in a.verifier.code.split("# --- task-specific ---")[1]
        assert all(c.name in ("read", "write", "edit", "exec") for c in a.reference)
        for c in a.reference:  # OpenClaw argument names
            want = {"read": {"path"}, "write": {"path", "content"}, "edit": {"path", "oldText", "newText"},
                    "exec": {"command"}}[c.name]
            assert set(c.arguments) == want, (fam.name, c)
        assert len(a.files) >= 3, f"{fam.name}: workspace needs inputs plus distractors"
        calls.append(len(a.reference))
        Task.from_json(a.to_json())
    assert sum(calls) / len(calls) >= 4.0, sum(calls) / len(calls)


def test_families_differ_in_structure():
    """Not just numbers: the families of one category use different file types / outputs / check names."""
    for cat in MY_CATS:
        fams = [f for f in MY_FAMILIES if f.category == cat]
        shapes = set()
        for f in fams:
            t = f.generate(3)
            checks = tuple(sorted(l.split("s[")[1].split("]")[0] for l in t.verifier.code.splitlines()
                                  if l.strip().startswith("s[")))
            shapes.add((tuple(sorted(t.source["outputs"])), checks))
            assert len(checks) >= 4, (f.name, checks)  # several named sub-checks -> partial credit
        assert len(shapes) == len(fams), cat


def test_persona_changes_only_the_instruction():
    p = expand_personas(limit=3)
    for fam in MY_FAMILIES[::3]:
        plain, voiced = fam.generate(3), fam.generate(3, p[0])
        assert voiced.instruction != plain.instruction and p[0].role in voiced.instruction
        assert [f.model_dump() for f in voiced.files] == [f.model_dump() for f in plain.files]
        assert voiced.verifier.code == plain.verifier.code


def test_in_process_test_runner_counts_failures():
    mod = "def add(a, b):\n    return a + b\n"
    tests = ("import calcx\n\ndef test_ok():\n    assert calcx.add(1, 2) == 3\n\n"
             "def test_bad():\n    assert calcx.add(1, 1) == 3\n\n"
             "def test_tmp(tmp_path):\n    assert tmp_path.exists()\n")
    assert run_tests("calcx", mod, tests) == (3, 1)
    assert run_tests("calcx", "def add(a, b):\n    return a - b\n", tests) == (3, 2)  # test_tmp still passes
    assert run_tests("calcx", "def add(a, b):\n    return a - b\n", tests.replace("tmp_path", "capsys")) == (3, 3)


@pytest.fixture(scope="module")
def validations(any_isolating_factory):
    tasks = [f.generate(s) for f in MY_FAMILIES for s in SEEDS]
    return tasks, validate_many(tasks, any_isolating_factory, chunk=200)


def test_every_family_passes_all_gates(validations):
    tasks, vals = validations
    bad = [(v.task_id, v.reason, v.errors[:2]) for v in vals if not v.passed]
    assert not bad, bad
    kinds: dict[str, int] = {}
    for v in vals:
        assert v.compiles and v.noop_score == 0.0 and v.scaffold_score == 0.0
        assert v.oracle_score == 1.0 and v.oracle_score_2 == 1.0
        assert {"missing_file", "wrong_path"} <= set(v.mutation_scores)
        assert all(s < 1.0 for s in v.mutation_scores.values()), (v.task_id, v.mutation_scores)
        for k in v.mutation_scores:
            kinds[k] = kinds.get(k, 0) + 1
    assert kinds.get("row_dropped", 0) >= 0.8 * len(vals) and kinds.get("number_off", 0) >= 0.8 * len(vals), kinds


def test_oracle_replays_without_errors(validations):
    """The oracle's exec calls (pytest, make, the CLI) really run in the sandbox."""
    tasks, vals = validations
    errs = [(v.task_id, v.errors[:2]) for v in vals if any(e.startswith(("exec", "edit", "write")) for e in v.errors)]
    assert not errs, errs


def test_official_gate_path_on_software_tasks(any_isolating_factory):
    """One-sandbox-per-variant path (apply_reference + verify_task) agrees with the batch path."""
    fams = {f.name: f for f in MY_FAMILIES}
    for name in ("makefile_stats_target", "fix_failing_test"):
        t = fams[name].generate(5)
        v = validate_task(t, any_isolating_factory)
        assert v.passed, (name, v.reason, v.errors[:3])
        assert v.oracle_score == 1.0 and v.noop_score == 0.0


def test_prose_families_have_rubrics_with_offline_proxies(any_isolating_factory):
    """Hybrid tasks (code 0.7 + rubric 0.3): the oracle gets 1.0 from the offline judge too, no-op gets 0."""
    from clawgym.agent.tools import apply_reference
    from clawgym.verify import verify_task

    prose = [f for f in MY_FAMILIES if f.generate(0).verifier.rubric]
    assert len(prose) >= 3
    for fam in prose:
        t = fam.generate(4)
        assert all(r.proxy is not None for r in t.verifier.rubric), fam.name
        with any_isolating_factory.open(t.files) as sb:
            apply_reference(sb, t.reference)
            done = verify_task(t, sb, transcript=[], judge="offline")
        with any_isolating_factory.open(t.files) as sb:
            noop = verify_task(t, sb, transcript=[], judge="offline")
        assert done.weights == (0.7, 0.3) and done.score == 1.0 and done.rubric_score == 1.0, (fam.name, done.errors)
        assert noop.score == 0.0, fam.name
