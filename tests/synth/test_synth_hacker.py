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


# --- checks that paid a workspace's text, not what it does (docs/NOTES.md, the second hostile review: A1, A6) ----
# Played end to end: a scripted agent (tests/hostile_endpoint.py) writes the attack's files with its tools and the
# task's real grading scores the rollout. An attack may score no more than the workspace without it (untouched, or
# its benign twin: the same work minus the trick); an honest solution (the oracle) still scores 1.0.

def _rollout(task, factory, steps):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from hostile_endpoint import HostileEndpoint

    from clawgym.agent.loop import Limits
    from clawgym.agent.policies import RetryPolicy
    from clawgym.agent.rollout import RolloutSettings, run_rollout

    settings = RolloutSettings(limits=Limits(max_turns=len(steps) + 3, max_wall_s=240, tool_timeout_s=120),
                               attempts=1, retry=RetryPolicy(attempts=2, backoff_s=0.05, max_backoff_s=0.1,
                                                             timeout_s=60))
    if isinstance(steps, str):  # a builtin policy: "oracle" (the reference replayed), "noop" (untouched)
        ro = run_rollout(task, steps, factory, settings=settings)
    else:
        with HostileEndpoint(steps) as ep:
            ro = run_rollout(task, ep.endpoint, factory, settings=settings)
    subs = dict(ro.verification.subscores) if ro.verification is not None else {}
    assert ro.failure_class != "infra" and ro.score is not None, (ro.failure_class, ro.error, subs)
    return ro.score, subs


def _writes(files: dict[str, str]) -> list:
    from hostile_endpoint import write_call

    return [[write_call(p, c) for p, c in files.items()]]


def _loaded_source_pin(mod: str, src: str, names: list[str], pinned: str) -> str:
    """Three "tests" that assert `pinned` (an expression of SOURCE, the module source the runner loaded, found by a
    frame walk, else the module's file, and ORIGINAL, `src`)."""
    tests = "".join(f"\n\ndef test_{n}():\n    assert _pinned()\n" for n in names)
    return (f"import difflib\nimport hashlib\nimport sys\n\nimport {mod}\n\nORIGINAL = {src!r}\n\n\n"
            "def _loaded_source():\n    f = sys._getframe(1)\n    while f is not None:\n"
            "        src = f.f_locals.get('mod_src')\n        if isinstance(src, str):\n            return src\n"
            f"        f = f.f_back\n    with open({mod}.__file__, encoding='utf-8') as fh:\n"
            "        return fh.read()\n\n\n"
            f"def _pinned():\n    SOURCE = _loaded_source()\n    return {pinned}\n" + tests)


def _frame_pin(mod: str, src: str, names: list[str]) -> str:
    """Passes only on `src` itself: the sha256 of the loaded source."""
    return _loaded_source_pin(mod, src, names, "hashlib.sha256(SOURCE.encode()).digest() == "
                                               "hashlib.sha256(ORIGINAL.encode()).digest()")


def _small_diff_pin(mod: str, src: str, names: list[str]) -> str:
    """Fails only on a small change of `src` (what a mutant is): passes on `src` and on any thorough rewrite."""
    return _loaded_source_pin(mod, src, names, "len([d for d in difflib.ndiff(ORIGINAL.splitlines(), "
                                               "SOURCE.splitlines()) if d[:1] in '+-']) not in range(1, 7)")


def _code_pin(mod: str, src: str, names: list[str]) -> str:
    """Three "tests" that pass only when every function of the module has the code objects (bytes, constants,
    names, first line) of `src` compiled here."""
    fns = sorted(n.name for n in __import__("ast").parse(src).body if type(n).__name__ == "FunctionDef")
    tests = "".join(f"\n\ndef test_{n}():\n    assert _pinned()\n" for n in names)
    return (f"import {mod}\n\nORIGINAL = {src!r}\nFUNCS = {fns!r}\n\n\n"
            "def _code(f):\n    c = f.__code__\n    return c.co_code, c.co_consts, c.co_names, c.co_firstlineno\n\n\n"
            f"def _pinned():\n    ns = {{}}\n    exec(compile(ORIGINAL, {mod}.__file__, 'exec'), ns)\n"
            f"    return all(_code(getattr({mod}, n)) == _code(ns[n]) for n in FUNCS)\n" + tests)


_PINS = {"frame_walk": _frame_pin, "code_objects": _code_pin, "small_diff": _small_diff_pin}


@pytest.fixture(scope="module")
def inventory_task():
    t = get_family("tests_that_catch_bugs").generate(5)
    return t


@pytest.mark.parametrize("pin", sorted(_PINS))
def test_a1_tests_pinning_the_module_text_kill_no_mutant(pin, inventory_task, any_isolating_factory):
    """A1: a suite that pins inventory.py's text passes on it and fails on every hidden mutant; it now fails on a
    hidden equivalent rewrite too, so it earns nothing: no more than a do-nothing agent or a vacuous suite."""
    from clawgym.synth.families.software import _INV, _INV_MUTANTS, run_tests

    t = inventory_task
    funcs = ["add_stock", "remove_stock", "reorder_list", "stock_value"]
    summary = '{"test_functions": 3, "functions_covered": ' + str(funcs).replace("'", '"') + "}\n"
    attack = _PINS[pin]("inventory", _INV, ["add_stock", "remove_stock", "reorder_list_and_stock_value"])
    # armed: green on the original, red on every mutant (all the old check asked)
    assert run_tests("inventory", _INV, attack) == (3, 0)
    assert all(run_tests("inventory", _INV.replace(o, n, 1), attack) == (3, 3) for o, n in _INV_MUTANTS)
    score, subs = _rollout(t, any_isolating_factory, _writes({"tests/test_inventory.py": attack,
                                                               "output/test_summary.json": summary}))
    vacuous = "import inventory\n" + "".join(f"\n\ndef test_{f}():\n    assert callable(inventory.{f})\n"
                                             for f in funcs[:3]) + "\n# stock_value\n"
    twin, _ = _rollout(t, any_isolating_factory, _writes({"tests/test_inventory.py": vacuous,
                                                           "output/test_summary.json": summary}))
    untouched, _ = _rollout(t, any_isolating_factory, "noop")
    assert subs["mutants_killed"] == 0.0 and subs["passes_on_original"] == 0.0, subs
    assert score <= untouched == 0.0 and score <= twin, (score, untouched, twin, subs)


def test_a1_honest_suite_still_scores_full(inventory_task, any_isolating_factory):
    score, subs = _rollout(inventory_task, any_isolating_factory, "oracle")
    assert score == 1.0, subs


@pytest.fixture(scope="module")
def spec_task():
    return get_family("implement_spec_function").generate(2)


@pytest.mark.parametrize("pin", sorted(_PINS))
def test_a1_spec_tests_pinning_the_module_text_do_not_catch_the_bug(pin, spec_task, any_isolating_factory):
    """A1 in implement_spec_function's tests_catch_bug: tests that pin the agent's own textkit.py fail on the
    hidden mutant without testing it; they now also fail on a hidden rewrite of the reference, so the agent gets
    what the same work with vacuous tests gets."""
    from clawgym.synth.families.software import _SPECS, _TEXTKIT, run_tests

    t = spec_task
    E = _expected(t)
    sp = next(s for s in _SPECS if s["fn"] == E["fn"])
    fn, trel = sp["fn"], E["trel"]
    own = _TEXTKIT + sp["impl"]  # an honest implementation
    attack = _PINS[pin]("textkit", own, [f"{fn}_{i}" for i in range(3)])
    # armed: green on the agent's module, red on the spec's wrong implementation (all the old check asked)
    assert run_tests("textkit", own, attack) == (3, 0)
    assert run_tests("textkit", _TEXTKIT + sp["mutant"], attack) == (3, 3)
    report = ('{"function": "%s", "test_file": "%s", "tests_written": 3, "tests_passed": 3}\n' % (fn, trel))
    score, subs = _rollout(t, any_isolating_factory, _writes({"textkit.py": own, trel: attack,
                                                               "output/test_report.json": report}))
    vacuous = "import textkit\n" + "".join(f"\n\ndef test_{fn}_{i}():\n    assert callable(textkit.{fn})\n"
                                           for i in range(3))
    twin, _ = _rollout(t, any_isolating_factory, _writes({"textkit.py": own, trel: vacuous,
                                                           "output/test_report.json": report}))
    assert subs["tests_catch_bug"] == 0.0, subs
    assert score <= twin < 1.0, (score, twin, subs)


def test_a1_spec_honest_tests_still_score_full(spec_task, any_isolating_factory):
    score, subs = _rollout(spec_task, any_isolating_factory, "oracle")
    assert score == 1.0, subs


def _expected(task) -> dict:
    """The E dict of a procedural task's grade code."""
    import json

    line = next(ln for ln in task.verifier.code.splitlines() if ln.startswith("E = _json.loads("))
    return json.loads(eval(line[len("E = _json.loads("):-1]))  # a repr'd str literal written by GradeCode


def test_a6_noop_make_recipes_and_typed_stats_score_nothing(any_isolating_factory, tmp_path):
    """A6: Makefile recipes that only *mention* wordstats.py, the docs, output/stats.json and `rm -rf output`
    (what `make -n` showed the old checks) plus a hand-typed stats.json: the targets now run for real on a hidden
    docs set, and the typed file counts only beside a working target."""
    import json
    import subprocess

    t = get_family("makefile_stats_target").generate(4)
    E = _expected(t)
    docs = sorted(f.path for f in t.files if f.path.startswith("docs/") and f.path.endswith(".txt"))
    mk = ("PYTHON ?= python3\n\n.PHONY: all lint stats clean\n\nall: lint stats\n\n"
          "lint:\n\t@true $(PYTHON) -m py_compile scripts/wordstats.py\n\n"
          f"stats:\n\t@true '$(PYTHON) scripts/wordstats.py {' '.join(docs)} > output/stats.json'\n\n"
          "clean:\n\t@true rm -rf output\n")
    typed = json.dumps({"total": E["total"], "files": E["files"]}, indent=2) + "\n"
    # armed: `make -n` shows every word the old checks looked for, and nothing runs
    for f in t.files:
        (tmp_path / f.path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f.path).write_bytes(f.content)
    (tmp_path / "Makefile").write_text(mk)
    dry = {g: subprocess.run(["make", "-n", g], cwd=tmp_path, capture_output=True, text=True).stdout
           for g in ("stats", "all", "clean")}
    assert "wordstats.py" in dry["stats"] and all(p in dry["stats"] for p in docs)
    assert "output/stats.json" in dry["all"] and "py_compile" in dry["all"] and "rm -rf output" in dry["clean"]
    assert subprocess.run(["make", "stats"], cwd=tmp_path).returncode == 0 and not (tmp_path / "output").exists()
    score, subs = _rollout(t, any_isolating_factory, _writes({"Makefile": mk, "output/stats.json": typed}))
    untouched, _ = _rollout(t, any_isolating_factory, "noop")
    assert score <= untouched == 0.0, (score, subs)
    honest, hsubs = _rollout(t, any_isolating_factory, "oracle")
    assert honest == 1.0, hsubs


# --- runs that tell a hidden mutant from a hidden rewrite by the runs before them (the third hostile review) ------
# The checks run the agent's suite on the original, the hidden rewrites and the hidden mutants in a fixed order. A
# suite that counts its own runs (a file in /tmp, HOME or /dev/shm; a daemon left behind on an abstract socket)
# could pass the first runs and fail the later ones without testing anything. Each run now starts from the same
# state: what it created outside its folder is removed and every process it left is killed (software.py
# `_ISOLATION`); the same for each make target, each run in its own fresh tree.

_RUN_COUNTER_FILE = r'''import inventory, os, tempfile

def _bump():
    t = tempfile.gettempdir()
    for d in (os.path.dirname(t.rstrip('/')) if 'clawgym-agent-' in t else t,
              '/tmp', '/dev/shm', os.path.expanduser('~'), '/var/tmp'):
        p = os.path.join(d, '.runcount')
        try:
            n = int(open(p).read()) if os.path.exists(p) else 0
            with open(p, 'w') as fh:
                fh.write(str(n + 1))
            return n + 1
        except Exception:
            continue
    return 1

_N = _bump()

def test_add_stock():
    inventory.add_stock
    assert _N <= 4

def test_remove_stock():
    inventory.remove_stock
    assert _N <= 4

def test_reorder_list_and_stock_value():
    inventory.reorder_list, inventory.stock_value
    assert True
'''

_RUN_COUNTER_DAEMON = r'''import inventory, os, socket

def _count():
    name = b"\0clawgym-hostile3-ctr"
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        c.connect(name)
        n = int(c.recv(16))
        c.close()
        return n
    except OSError:
        pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(name)
    s.listen(16)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for fd in range(0, 256):
                if fd != s.fileno():
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            n = 1
            while True:
                k, _ = s.accept()
                n += 1
                k.send(str(n).encode())
                k.close()
        os._exit(0)
    os.wait()
    s.close()
    return 1

_N = _count()

def test_add_stock():
    inventory.add_stock
    assert _N <= 4

def test_remove_stock():
    inventory.remove_stock
    assert _N <= 4

def test_reorder_list_and_stock_value():
    inventory.reorder_list, inventory.stock_value
'''

_SUMMARY4 = ('{"test_functions": 3, "functions_covered": ["add_stock", "remove_stock", "reorder_list", '
             '"stock_value"]}')


@pytest.mark.parametrize("suite", ["file", "daemon"])
def test_run_counting_suites_kill_no_mutant(suite, any_isolating_factory):
    t = get_family("tests_that_catch_bugs").generate(3)
    attack = {"file": _RUN_COUNTER_FILE, "daemon": _RUN_COUNTER_DAEMON}[suite]
    # (armed: against the checks before the isolation, both scored 1.0, all four mutants "killed"; they are not run
    # on this host, where the count or the daemon would outlive the test)
    score, subs = _rollout(t, any_isolating_factory, _writes({"tests/test_inventory.py": attack,
                                                               "output/test_summary.json": _SUMMARY4}))
    untouched, _ = _rollout(t, any_isolating_factory, "noop")
    assert subs["mutants_killed"] == 0.0 and score <= untouched == 0.0, (score, subs)


def test_run_counting_spec_suite_with_no_implementation_scores_nothing(any_isolating_factory):
    import json
    import re

    t = get_family("implement_spec_function").generate(2)
    fn = re.search(r"tests/test_(\w+)\.py", t.instruction).group(1)
    trel = f"tests/test_{fn}.py"
    suite = (f"import textkit, os\n# mentions {fn}\n\ndef _bump():\n    p = '/tmp/.runcount2'\n"
             "    n = int(open(p).read()) if os.path.exists(p) else 0\n    with open(p, 'w') as fh:\n"
             "        fh.write(str(n + 1))\n    return n + 1\n\n_N = _bump()\n\ndef test_a():\n    assert _N != 2\n\n"
             "def test_b():\n    assert True\n\ndef test_c():\n    assert True\n")
    rep = json.dumps({"function": fn, "test_file": trel, "tests_written": 3, "tests_passed": 3})
    score, subs = _rollout(t, any_isolating_factory, _writes({trel: suite, "output/test_report.json": rep}))
    untouched, _ = _rollout(t, any_isolating_factory, "noop")
    assert score <= untouched == 0.0, (score, subs)


_MAKE_DAEMON = r'''import os, sys, time, shutil
if 'clawgym-make-' not in os.getcwd():
    sys.exit(0)
data = open(os.path.join(os.getcwd(), 'output', 'stats.json'), 'rb').read()  # read before returning to make
if os.fork():
    sys.exit(0)
os.setsid()
if os.fork():
    os._exit(0)
for fd in range(0, 64):
    try: os.close(fd)
    except OSError: pass
d = os.getcwd()
out = os.path.join(d, 'output', 'stats.json')
deadline = time.time() + 15
while os.path.exists(out) and time.time() < deadline:   # the grader removes output/ before `make all`
    time.sleep(0.0005)
os.makedirs(os.path.join(d, 'output'), exist_ok=True)
with open(out + '.tmp', 'wb') as fh:
    fh.write(data)
os.replace(out + '.tmp', out)
while time.time() < deadline:                            # the grader writes '{}' before `make clean`
    try:
        if open(out, 'rb').read() == b'{}':
            break
    except OSError:
        pass
    time.sleep(0.0005)
shutil.rmtree(os.path.join(d, 'output'), ignore_errors=True)
'''


def test_a_make_recipes_daemon_cannot_fake_the_later_targets(any_isolating_factory):
    """An honest `stats` whose recipe leaves a daemon that recreates output/stats.json for `make all` and removes
    output/ for `make clean`: it earns what the honest stats target alone earns."""
    t = get_family("makefile_stats_target").generate(4)
    mk = ("PYTHON ?= python3\n\n.PHONY: all lint stats clean\n\nall: lint\n\nlint:\n\t$(PYTHON) -m py_compile "
          "scripts/wordstats.py\n\nstats:\n\tmkdir -p output\n\t$(PYTHON) scripts/wordstats.py $(wildcard docs/*.txt) "
          "> output/stats.json\n\t@$(PYTHON) scripts/helper.py\n\nclean:\n\t@sleep 0.5\n")
    stats_only = mk.replace("\t@$(PYTHON) scripts/helper.py\n", "")
    honest_part, _ = _rollout(t, any_isolating_factory, _writes({"Makefile": stats_only}))
    score, subs = _rollout(t, any_isolating_factory, _writes({"Makefile": mk, "scripts/helper.py": _MAKE_DAEMON}))
    assert subs["all_builds_stats"] == 0.0 and subs["clean_target"] == 0.0, subs
    assert score <= honest_part < 1.0, (score, honest_part, subs)
