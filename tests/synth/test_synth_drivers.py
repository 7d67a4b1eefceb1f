"""The gates' in-sandbox programs (clawgym.sandbox.guest.synth): real modules that travel as files, stdlib only, and
apply references / reduce scores with the very code the agent tools and the verifier runtime use."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clawgym.sandbox.guest.synth import bundle
from clawgym.synth.gates import _b64, _run_driver, _Stats, validate_many, validate_task
from clawgym.tasks.model import File, Task, ToolCall

PATCH = """*** Begin Patch
*** Update File: src/app.py
@@
-x = 1
+x = 2
*** Add File: docs/new.md
+# New
*** Delete File: old.txt
*** End Patch"""

CALLS = [
    {"name": "edit", "arguments": {"path": "notes.txt", "edits": [{"oldText": "alpha", "newText": "ALPHA"},
                                                                   {"oldText": "gamma", "newText": "GAMMA"}]}},
    {"name": "edit", "arguments": {"path": "dup.txt", "oldText": "a", "newText": "b"}},  # not unique: error
    {"name": "apply_patch", "arguments": {"input": PATCH}},
    {"name": "write", "arguments": {"path": "output/data.json", "content": {"k": [1, 2]}}},  # dict content
    {"name": "write", "arguments": {"path": "../escape.txt", "content": "x"}},  # refused
    {"name": "exec", "arguments": {"command": "cat notes.txt > output/copy.txt; exit 3"}},
    {"name": "read", "arguments": {"path": "missing.txt"}},
    {"name": "ls", "arguments": {"path": "src"}},
]
FILES = {"notes.txt": b"alpha\nbeta\ngamma\n", "dup.txt": b"a a\n", "old.txt": b"bye\n",
         "src/app.py": b"def greet():\n    print('Hi')\n\nx = 1\n"}


def test_bundle_is_a_stdlib_only_package_tree(tmp_path):
    files = bundle()
    assert {"launch.py", "clawgym/__init__.py", "clawgym/agent/toolcore.py", "clawgym/verify/scoring.py",
            "clawgym/sandbox/guest/synth/replay.py", "clawgym/sandbox/guest/synth/grade.py",
            "clawgym/sandbox/guest/synth/forkserver.py"} <= set(files)
    assert all(files[p] == b"" for p in files if p.endswith("__init__.py"))  # stubs, not the host's packages
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    # an isolated interpreter (-I -S: no site-packages, no cwd on the path) imports every driver from the bundle alone
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import clawgym.sandbox.guest.synth.replay, "
            "clawgym.sandbox.guest.synth.grade, launch; "
            "extra = {m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names) "
            "- {'clawgym', 'launch', '__main__'}; "
            "print(sorted(extra)); print(clawgym.__file__)")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    extra, origin = r.stdout.splitlines()
    assert extra == "[]" and origin.startswith(str(tmp_path))


def test_replay_driver_applies_references_like_the_agent_tools(tmp_path):
    """In-process on the host: the replay driver's result equals apply_reference on a sandbox, error lines
    included (OpenClaw's edits[] form, apply_patch, dict content, refused paths, failing exec)."""
    from clawgym.agent.toolcore import replay_errors
    from clawgym.agent.tools import apply_reference
    from clawgym.sandbox import get_factory
    from clawgym.sandbox.guest.synth.replay import replay_task

    r = replay_task(str(tmp_path / "w"), _b64(FILES), CALLS)
    got = {p: (base64.b64decode(b) if b is not None else None) for p, b in r["overlay"].items()}
    assert got == {"notes.txt": b"ALPHA\nbeta\nGAMMA\n", "src/app.py": b"def greet():\n    print('Hi')\n\nx = 2\n",
                   "docs/new.md": b"# New\n", "old.txt": None,
                   "output/data.json": b'{\n  "k": [\n    1,\n    2\n  ]\n}',
                   "output/copy.txt": b"ALPHA\nbeta\nGAMMA\n"}
    assert len(r["errors"]) == 4 and all(e.startswith("reference: ") for e in r["errors"])
    assert "2 occurrences" in r["errors"][0] and "escapes the workspace" in r["errors"][1]
    assert "exited with code 3" in r["errors"][2] and "missing.txt" in r["errors"][3]
    fac = get_factory("local")
    try:
        with fac.open([File(path=p, content=b) for p, b in FILES.items()]) as sb:
            errors = replay_errors(apply_reference(sb, CALLS))
            after = sb.snapshot()
    finally:
        fac.close()
    want = {p: b for p, b in after.items() if FILES.get(p) != b}
    want.update({p: None for p in FILES if p not in after})
    assert got == want
    # same failures; the messages may name the sandbox's own paths
    assert [e.split(":")[0:2] for e in errors] == [e.split(":")[0:2] for e in r["errors"]]


def test_grade_driver_reduces_with_mean_of_checks():
    """The grade driver's score is clawgym.verify.runtime.mean_of_checks' (bools 1/0, a bare number, non-finite
    or empty results are errors scored 0)."""
    from clawgym.verify.runtime import mean_of_checks

    results = {"dict": "{'a': True, 'b': 0.5}", "number": "0.25", "nan": "{'a': float('nan')}", "empty": "{}"}
    jobs = [{"code": f"def grade(transcript, workspace_path):\n    return {expr}\n", "timeout": 30, "files": {},
             "variants": {"v": {}}} for expr in results.values()]
    out = _run_driver(None, "grade", {"tasks": jobs, "forkserver": False}, 60)
    got = dict(zip(results, (o["v"] for o in out)))
    assert got["dict"] == {"score": 0.75, "subs": {"a": 1.0, "b": 0.5}}
    assert (got["dict"]["score"], got["dict"]["subs"]) == mean_of_checks({"a": True, "b": 0.5})
    assert got["number"] == {"score": 0.25, "subs": {"value": 0.25}}
    assert got["nan"]["score"] == 0.0 and "non-numeric value nan" in got["nan"]["error"]
    assert got["empty"]["score"] == 0.0 and "empty dict" in got["empty"]["error"]


def test_unknown_driver_is_refused():
    with pytest.raises(ValueError, match="unknown driver"):
        _run_driver(None, "nope", {}, 10)


def test_batched_gates_agree_with_validate_task_on_every_tool_form(any_isolating_factory):
    """A reference using edits[], apply_patch and exec: the batch path (replay driver in the sandbox) and the
    official path (apply_reference + verify_task) give the same scores and the same reference errors."""
    code = ("import os\n"
            "def grade(transcript, workspace_path):\n"
            "    r = lambda p: open(os.path.join(workspace_path, p)).read() "
            "if os.path.exists(os.path.join(workspace_path, p)) else ''\n"
            "    return {'notes': r('notes.txt') == 'ALPHA\\nbeta\\nGAMMA\\n', 'patched': 'x = 2' in r('src/app.py'),\n"
            "            'copy': r('output/copy.txt') == r('notes.txt') != ''}\n")
    t = Task(task_id="tool-forms", route="persona", category="analysis_reasoning", instruction="x",
             files=[{"path": p, "content": b} for p, b in FILES.items()], verifier={"kind": "grade", "code": code},
             reference=[ToolCall(**c) for c in CALLS], source={"outputs": ["output/copy.txt"]})
    [fast] = validate_many([t], any_isolating_factory)
    slow = validate_task(t, any_isolating_factory)
    assert fast.oracle_score == slow.oracle_score == 1.0 and fast.noop_score == slow.noop_score == 0.0
    assert (fast.mutation_scores, fast.oracle_checks, fast.passed, fast.reason) == \
        (slow.mutation_scores, slow.oracle_checks, slow.passed, slow.reason)
    ref = lambda v: [e.split(":")[0:2] for e in v.errors if e.startswith("reference: ")]  # noqa: E731
    assert ref(fast) == ref(slow) and len(ref(fast)) == 4
    assert json.dumps(fast.to_dict(), default=str)  # serialisable as before


def test_fork_server_serves_the_graders_safe_path_child_with_a_piped_stdin(tmp_path):
    """The grader runs the agent's code as `python3 -P -c ...` with its stdin a pipe (`_agent_call`). The fork
    server serves that run: -P leaves no script/cwd slot on sys.path, the run reads its stdin to the end (the
    serving process's own write end of that pipe is not inherited), and no descriptor of the serving process
    reaches it."""
    script = tmp_path / "serve.py"
    script.write_text(
        "import json, os, subprocess, sys, tempfile\n"
        f"sys.path.append({str(Path(__file__).resolve().parents[2])!r})  # sys.path[0] stays the script slot\n"
        "from clawgym.sandbox.guest.synth import forkserver\n"
        "root = tempfile.mkdtemp()\n"
        "os.environ['PATH'] = os.path.dirname(sys.executable) + ':' + os.environ.get('PATH', '')\n"
        "forkserver.start(root, 30.0, heavy=False, base_modules=set(sys.modules))\n"
        "leak = os.dup2(os.open(os.devnull, os.O_RDONLY), 77)  # a descriptor of the serving process (a fixed\n"
        "# number: the lowest free one could be the very one the child's own listdir gets)\n"
        "child = ('import json, os, sys; data = sys.stdin.read(); '\n"
        "         'print(json.dumps({\"served\": \"clawgym.sandbox.guest.synth.forkserver\" in sys.modules, '\n"
        "         '\"path0\": sys.path[0], \"data\": data, '\n"
        "         '\"fds\": sorted(int(f) for f in os.listdir(\"/proc/self/fd\"))}))')\n"
        "out = {}\n"
        "for flags in ([], ['-P']):\n"
        "    cwd = tempfile.mkdtemp()\n"
        "    p = subprocess.Popen([os.path.join(root, 'bin', 'python3'), *flags, '-c', child], stdin=subprocess.PIPE,\n"
        "                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True, cwd=cwd)\n"
        "    raw, _ = p.communicate(b'x' * 100000, timeout=20)\n"
        "    out[' '.join(flags) or 'plain'] = dict(json.loads(raw), rc=p.returncode, cwd=cwd, leak=leak)\n"
        "print(json.dumps(out))\n")
    exe_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{exe_dir}:{os.environ.get('PATH', '')}"}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    for flags, got in out.items():
        assert got["rc"] == 0 and got["served"], (flags, got)  # served by a fork, not a new interpreter
        assert got["data"] == "x" * 100000  # the whole stdin, then EOF: no inherited write end keeps it open
        assert set(got["fds"]) - {0, 1, 2} <= {max(got["fds"])} and got["leak"] not in got["fds"][3:], got
    assert out["plain"]["path0"] == ""  # `python3 -c`: '' first, as a real interpreter
    assert out["-P"]["path0"] not in ("", out["-P"]["cwd"]) and not out["-P"]["path0"].startswith(str(tmp_path))


def test_grade_driver_shares_identical_agent_calls_but_never_with_oracle_2(tmp_path):
    """An `_agent_call` (the child python running the agent's code) with the same op and args as an earlier one of
    the same task is answered from the memo (a fresh copy each time), except in oracle_2: the determinism gate
    grades everything again. Without the memo every call runs."""
    log = tmp_path / "calls.log"
    code = ("def _agent_call(op, *args, timeout=60):\n"
            f"    open({str(log)!r}, 'a').write(op + '\\n')\n"
            "    return [op, list(args)]\n"
            "def grade(transcript, ws):\n"
            "    a = _agent_call('tests', 'm', 'src')\n"
            "    a.append('mutated by the check')\n"
            "    b = _agent_call('tests', 'm', 'src')\n"
            "    c = _agent_call('tests', 'm', open('f.txt').read())\n"
            "    return {'same': float(b == ['tests', ['m', 'src']]), 'c': float(c[1][1] == 'v1')}\n")
    variants = {"noop": {}, "oracle": {}, "oracle_2": {}, "mut:x": {"f.txt": b"v2"}, "hack:y": {}}
    job = {"code": code, "timeout": 30, "files": _b64({"f.txt": b"v1"}), "variants": {k: _b64(v) for k, v in
                                                                                       variants.items()}}
    for memo, runs in ((True, 5), (False, 15)):
        log.write_text("")
        stats: dict = {}
        [out] = _run_driver(None, "grade", {"tasks": [job], "forkserver": False, "memo": memo}, 60,
                            _Stats(stats))
        assert {k: r["score"] for k, r in out.items()} == {"noop": 1.0, "oracle": 1.0, "oracle_2": 1.0,
                                                           "mut:x": 0.5, "hack:y": 1.0}, out
        # memo: 'src' once for all and once in oracle_2; f.txt's v1 once and once in oracle_2, v2 once (mut:x)
        assert len(log.read_text().split()) == runs, memo
        if memo:
            assert (stats["agent_calls"], stats["agent_calls_shared"]) == (5, 10)


def test_grade_driver_forks_the_agent_call_child_directly_with_the_same_verdicts(any_isolating_factory):
    """In the sandbox, with the fork server up, the grade driver forks `_agent_call`'s child straight from itself
    (forkserver.spawn_c, no shim): a result, a crash, a timeout, a big job on stdin and the agent's own prints
    (never taken for the result) come out exactly as through the shim (direct off) and a real interpreter (no fork
    server)."""
    from clawgym.synth.families.software import PYRUN

    cases = {
        "value": (("m", "def f(x):\n    return x * 2\n", "f", "[21]", "{}"), {}, {"value": "42"}),
        "crash": (("m", "import os\ndef f():\n    os._exit(3)\n", "f", "[]", "{}"), {}, None),
        "timeout": (("m", "import time\ndef f():\n    time.sleep(30)\n", "f", "[]", "{}"), {"timeout": 1}, None),
        "big_stdin": (("m", "X = '" + "a" * 300000 + "'\ndef f():\n    return len(X)\n", "f", "[]", "{}"), {},
                      {"value": "300000"}),
        "prints": (("m", "def f():\n    print('__CLAWGYM_AGENT_CALL__1')\n    return 1\n", "f", "[]", "{}"), {},
                   {"value": "1"}),
        "raises": (("m", "def f():\n    raise KeyError('k')\n", "f", "[]", "{}"), {},
                   {"raised": "KeyError", "message": "'k'"}),
    }
    code = PYRUN + "\nCASES = " + repr(cases) + (
        "\ndef grade(transcript, ws):\n"
        "    return {k: float(_agent_call('call', *a, **kw) == want) for k, (a, kw, want) in CASES.items()}\n")
    job = {"code": code, "timeout": 60, "files": {}, "variants": {"noop": {}, "oracle": {}}}
    for forkserver, direct in ((True, True), (True, False), (False, True)):
        stats: dict = {}
        [out] = _run_driver(any_isolating_factory, "grade", {"tasks": [job], "forkserver": forkserver, "memo": False,
                                                             "direct": direct}, 120, _Stats(stats))
        for v in ("noop", "oracle"):
            assert out[v]["score"] == 1.0 and set(out[v]["subs"].values()) == {1.0}, (forkserver, direct, out)
        assert stats.get("agent_calls_direct", 0) == (12 if forkserver and direct else 0), (forkserver, direct)
