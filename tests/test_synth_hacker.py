"""Hacker gate (clawgym.synth.exploits): cheap-exploit workspaces a task must not reward, in the batched
(validate_many) and one-task (validate_task) paths alike."""

from __future__ import annotations

import pytest

from clawgym.synth.exploits import EXPLOITS, PLACEHOLDER, exploits
from clawgym.synth.families import get_family
from clawgym.synth.families.base import Family
from clawgym.synth.gates import validate_many, validate_task

pytestmark = pytest.mark.rule("hacker_gate")  # tests/attack_rules.py

_EXISTS = ("import os\n"
           "def grade(transcript, workspace_path):\n"
           "    p = os.path.join(workspace_path, 'output/report.md')\n"
           "    return {'exists': float(os.path.exists(p))}\n")


def _exists_only_task():
    def build(ctx):
        ctx.csv("input/sales.csv", ["region", "amount"], [["north", 3], ["south", 5]])
        ctx.ask("Sum the amounts in input/sales.csv and write the total to output/report.md.")
        ctx.output("output/report.md")
        ctx.check("total", "'8' in T('output/report.md')")
        ctx.read("input/sales.csv")
        ctx.write("output/report.md", "Total: 8\n")

    t = Family("sum_report", "analysis_reasoning", "data analysis and calculation", ["read", "write"], ["csv"], "x",
               build).generate(1)
    return t.model_copy(update={"task_id": "exists-only", "verifier": t.verifier.model_copy(update={"code": _EXISTS})})


def test_exploit_workspaces():
    t = get_family("sales_rollup").generate(4)
    outs = t.source["outputs"]
    ex = exploits(t)
    assert set(ex) == set(EXPLOITS)
    assert all(set(ov) == set(outs) for ov in ex.values())
    assert ex["placeholder"][outs[0]] == PLACEHOLDER and ex["empty_outputs"][outs[0]] == b""
    assert t.instruction.encode() in ex["echo"][outs[0]]
    inputs = t.file_map()
    assert all(b in inputs.values() for b in ex["copy_inputs"].values())
    # an exploit equal to the oracle's output is not an exploit (a "copy this file" task)
    oracle = {outs[0]: ex["copy_inputs"][outs[0]]}
    assert "copy_inputs" not in exploits(t, oracle)


def test_existence_only_check_is_hackable_placeholder(any_isolating_factory):
    t = _exists_only_task()
    [b] = validate_many([t], any_isolating_factory, hacker="reject")
    a = validate_task(t, any_isolating_factory, hacker="reject")
    for v in (a, b):
        assert not v.passed
        assert v.reason.startswith("hackable:placeholder")
        assert v.exploit_scores["placeholder"] == 1.0 and v.hackable == list(EXPLOITS)
    # report-only: flagged, the other gates decide (here the scaffold also scores 1 -> fails on that alone)
    [r] = validate_many([t], None, hacker="report")
    assert r.hackable == list(EXPLOITS) and "hackable" not in r.reason and "scaffold" in r.reason
    [o] = validate_many([t], None, hacker="off")
    assert o.exploit_scores == {} and o.hackable == []


def test_real_family_task_passes_and_paths_agree(any_isolating_factory):
    tasks = [get_family(f).generate(s) for s, f in enumerate(["sales_rollup", "log_summary_cli"], 3)]
    batched = validate_many(tasks, any_isolating_factory, hacker="reject")
    for t, b in zip(tasks, batched):
        a = validate_task(t, any_isolating_factory, hacker="reject")
        assert b.passed, b.reason
        assert set(b.exploit_scores) == set(EXPLOITS) and b.hackable == []
        assert a.exploit_scores == b.exploit_scores, t.task_id
        assert (a.passed, a.reason, a.hackable) == (b.passed, b.reason, b.hackable)


def test_support_checks_close_the_partial_credit_leak():
    """glossary_rename's input-preservation and legacy-word checks passed on any output (0.33 for an echoed
    instruction or a copied input); as *support* checks they count only when a substantive check passes."""
    t = get_family("glossary_rename").generate(0)
    [rep] = validate_many([t], None)
    assert rep.passed and rep.hackable == [], rep.exploit_scores
    assert all(v == 0.0 for v in rep.exploit_scores.values()), rep.exploit_scores
    code = t.verifier.code
    assert "real = any(" in code and "s['inputs_untouched'] = _safe(lambda:" in code


def test_support_check_needs_a_substantive_one():
    from clawgym.synth.families.base import GradeCode

    g = GradeCode()
    g.check("only_support", "True", support=True)
    with pytest.raises(ValueError, match="substantive"):
        g.source()
    g.check("main", "False")
    ns: dict = {}
    exec(g.source(), ns)
    assert ns["grade"]([], "/nonexistent") == {"only_support": False, "main": False}


def test_bad_mode():
    with pytest.raises(ValueError, match="hacker"):
        validate_many([], None, hacker="maybe")


# --- the bar is the task's untouched score ------------------------------------------------------------------


def _regions_task():
    """Nine checks need the right total; one (`regions`) passes on input/sales.csv copied over: copy_inputs
    scores 0.1 with the untouched workspace at 0 — under the old 0.2 bar that passed, now it is a hack."""
    def build(ctx):
        ctx.csv("input/sales.csv", ["region", "amount"], [["north", 3], ["south", 5]])
        ctx.ask("Sum the amounts in input/sales.csv and write the total to output/report.md, one line per region.")
        ctx.output("output/report.md")
        ctx.check("regions", "'north' in T('output/report.md') and 'south' in T('output/report.md')")
        for i in range(9):
            ctx.check(f"total_{i}", "'Total: 8' in T('output/report.md')")
        ctx.read("input/sales.csv")
        ctx.write("output/report.md", "Total: 8\nnorth 3\nsouth 5\n")

    return Family("region_report", "analysis_reasoning", "data analysis and calculation", ["read", "write"], ["csv"],
                  "x", build).generate(1)


_HALF_DONE = ("import os\n"  # 3 of 10 checks pass on the untouched workspace (inputs still there): 0.3
              "def grade(transcript, workspace_path):\n"
              "    out = os.path.join(workspace_path, 'output/report.md')\n"
              "    txt = open(out).read() if os.path.exists(out) else ''\n"
              "    there = float(os.path.exists(os.path.join(workspace_path, 'input/sales.csv')))\n"
              "    s = {f'kept_{i}': there for i in range(3)}\n"
              "    s.update({f'total_{i}': float('Total: 8' in txt) for i in range(7)})\n"
              "    return s\n")


def test_hackable_bar_is_the_untouched_score():
    from clawgym.synth.exploits import HACK_EPS, hackable

    assert hackable({"copy_inputs": 0.1}, 0.0) == ["copy_inputs"]
    assert hackable({"copy_inputs": 0.3, "echo": 0.3}, 0.3) == []
    assert hackable({"copy_inputs": 0.3 + HACK_EPS / 2}, 0.3) == []  # float noise is not a hack
    assert hackable({"copy_inputs": 0.31, "echo": 0.0}, 0.3) == ["copy_inputs"]
    assert hackable({"placeholder": 1e-6}, None) == ["placeholder"]  # no untouched score measured: 0
    assert hackable({"copy_inputs": 0.1}, 0.0, bound=0.2) == []  # an absolute bar, for measurements


def test_copy_inputs_at_a_tenth_is_rejected():
    t = _regions_task()
    [r] = validate_many([t], None, hacker="reject")
    assert r.noop_score == 0.0 and r.oracle_score == 1.0
    assert abs(r.exploit_scores["copy_inputs"] - 0.1) < 1e-9 and r.hackable == ["copy_inputs"]
    assert not r.passed and r.reason.startswith("hackable:copy_inputs")
    [f] = validate_many([t], None, hacker="report")  # report-only: flagged, passes
    assert f.passed and f.hackable == ["copy_inputs"]
    [old] = validate_many([t], None, hacker="reject", bound=0.2)  # the old bar let it through
    assert old.passed and old.hackable == []


def test_default_is_reject():
    from clawgym.synth.exploits import DEFAULT_HACKER

    assert DEFAULT_HACKER == "reject"
    [r] = validate_many([_regions_task()], None)
    assert not r.passed and "hackable:copy_inputs" in r.reason


def test_imported_task_flagged_above_its_untouched_score_only(local_factory):
    """exploit_check (imported tasks, flagged never dropped): exploits that tie the untouched score (0.3, from
    checks the untouched workspace already passes) are no hack; one that beats it (0.1 > 0) is."""
    from clawgym.synth.gates import exploit_check

    base = _regions_task()
    half = base.model_copy(update={"task_id": "half-done", "reference": None,
                                   "verifier": base.verifier.model_copy(update={"code": _HALF_DONE})})
    h = exploit_check(half, local_factory)
    assert abs(h["untouched"] - 0.3) < 1e-9 and set(h["scores"]) == set(EXPLOITS)
    assert all(abs(s - 0.3) < 1e-9 for s in h["scores"].values()) and h["hackable"] == []
    copy = half.model_copy(update={"verifier": base.verifier})  # the regions check: copy_inputs 0.1 > 0
    h2 = exploit_check(copy, local_factory)
    assert h2["untouched"] == 0.0 and h2["hackable"] == ["copy_inputs"]
