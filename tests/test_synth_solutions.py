"""Program solutions (the program teacher of benchmarks/lift.py): each family's program, run in a real sandbox,
solves new seeds as the family's own verifier scores them; a trajectory of the teacher is one exec + an answer."""

from __future__ import annotations

import pytest

from clawgym.synth.families import all_families, get_family
from clawgym.synth.solutions import (check_programs, program_command, program_families, program_reference,
                                     program_source, with_program_reference)


def test_every_program_is_a_registered_family_and_small():
    names = {f.name for f in all_families()}
    fams = program_families()
    assert len(fams) >= 6
    for f in fams:
        assert f in names, f"solutions/{f}.py names no family"
        src = program_source(f)
        assert len(src) <= 1500, f"{f}: program of {len(src)} chars (a small student must reproduce it)"
        compile(src, f, "exec")


def test_program_reference_is_one_exec_and_keeps_the_verifier():
    t = get_family("budget_variance").generate(3)
    p = with_program_reference(t)
    assert [c.name for c in p.reference] == ["exec"]
    assert p.reference[0].arguments["command"].startswith("python3 - <<'EOF'\n")
    assert p.verifier == t.verifier and p.files == t.files and p.instruction == t.instruction
    with pytest.raises(KeyError, match="has no program solution"):
        program_reference(t.model_copy(update={"family": "no_such_family"}))
    with pytest.raises(ValueError, match="EOF"):
        program_command("print(1)\nEOF\nprint(2)\n")


def test_programs_solve_new_seeds_in_a_sandbox(any_isolating_factory):
    seeds = [0, 1, 1000, 1001, 4242]
    res = check_programs(seeds=seeds, factory=any_isolating_factory, workers=2)
    bad = {f: {s: v for s, v in r.items() if v != 1.0} for f, r in res.items()}
    assert set(res) == set(program_families())
    assert not any(bad.values()), f"programs below 1.0: {bad}"


def test_a_program_run_on_another_family_scores_low(any_isolating_factory):
    """The scores come from the verifier, not from the teacher: the wrong program earns (almost) nothing."""
    from clawgym.agent.rollout import run_rollout

    t = get_family("budget_variance").generate(5)
    wrong = t.model_copy(update={"reference": program_reference(get_family("backup_retention").generate(0))})
    ro = run_rollout(wrong, "oracle", any_isolating_factory)
    assert ro.score is not None and ro.score < 0.5


def test_program_policy_in_the_registry_teaches_with_the_program(any_isolating_factory):
    """The built-in `program` policy (a trajectories partition like `oracle`): one exec of the family's program
    and a final answer; a family without a program gets the reference replayed."""
    import json

    from clawgym.agent.rollout import run_rollout
    from clawgym.synth.families import all_families

    t = get_family("backup_retention").generate(17)
    ro = run_rollout(t, "program", any_isolating_factory)
    calls = [c for m in ro.messages if m.get("role") == "assistant" for c in (m.get("tool_calls") or [])]
    assert ro.score == 1.0 and ro.policy == "program"
    assert [c["function"]["name"] for c in calls] == ["exec"]
    assert json.loads(calls[0]["function"]["arguments"])["command"] == program_reference(t)[0].arguments["command"]
    other = next(f for f in sorted(all_families(), key=lambda f: f.name) if f.name not in program_families())
    u = other.generate(0)
    ro2 = run_rollout(u, "program", any_isolating_factory)
    n_calls = sum(len(m.get("tool_calls") or []) for m in ro2.messages if m.get("role") == "assistant")
    assert ro2.score == 1.0 and n_calls == len(u.reference)
