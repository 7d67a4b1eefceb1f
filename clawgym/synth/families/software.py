"""Software Development families: fix a bug, add a function with tests, migrate a config, extend a Makefile,
write a CLI, pin dependencies, write tests that kill mutants.

The agent's code a check runs (its module, its tests, its scripts) runs in a child python per use (`PYRUN`'s
`_agent_call`: the module loaded from its source, test functions called directly, a tiny pytest shim when pytest is
absent), never in the grader's process: the child returns one JSON value of a fixed shape, and the values the check
compares it with stay with the grader.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import sys
from typing import Any, TypedDict, cast

from clawgym.synth import pyast
from clawgym.synth.families.base import Ctx, family, json_text, people

CAT = "software_development"

# ----------------------------------------------------------------------------------------------
# running the agent's code for a check: in a child python, never in the grader's process
# ----------------------------------------------------------------------------------------------

# What runs the agent's code: loads a module from its source, calls functions, runs test functions. The host's own
# generation-time self checks run it in-process (trusted code); a check runs it as the body of a child process.
_SHIM = r"""
def _shim_pytest():
    import sys as _s, types as _t
    try:
        import pytest  # noqa: F401
        return
    except Exception:
        pass
    m = _t.ModuleType("pytest")
    class _Raises:
        def __init__(self, exc, match=None):
            self.exc = exc
        def __enter__(self):
            return self
        def __exit__(self, et, ev, tb):
            if et is None:
                raise AssertionError("DID NOT RAISE")
            return issubclass(et, self.exc)
    def approx(v, rel=1e-6, **kw):
        tol_abs = kw.get("abs", 1e-12)
        class _A:
            def __eq__(s, o):
                try:
                    return o == v or builtins_abs(o - v) <= max(rel * builtins_abs(v), tol_abs)
                except Exception:
                    return False
        return _A()
    m.raises = _Raises
    m.approx = approx
    _s.modules["pytest"] = m

def builtins_abs(x):
    return x if x >= 0 else -x
"""

AGENT_CORE = _SHIM + r"""
def _load_module(name, src):
    import sys as _s, types as _t
    for k in [k for k in _s.modules if k == name or k.startswith(name + ".")]:
        del _s.modules[k]
    m = _t.ModuleType(name)
    m.__file__ = name + ".py"
    exec(compile(src, name + ".py", "exec"), m.__dict__)
    _s.modules[name] = m
    return m

def _test_results(mod_name, mod_src, test_src):
    # [[name, passed], ...] for every test_* function of test_src run against mod_src
    import inspect as _i, tempfile as _tf, pathlib as _pl
    _shim_pytest()
    _load_module(mod_name, mod_src)
    ns = {"__name__": "test_module"}
    exec(compile(test_src, "test_module.py", "exec"), ns)
    out = []
    for k, fn in [(k, v) for k, v in ns.items() if k.startswith("test") and callable(v)]:
        try:
            params = list(_i.signature(fn).parameters)
            kw = {p: _pl.Path(_tf.mkdtemp()) for p in params if p in ("tmp_path", "tmpdir")}
            if len(kw) != len(params):
                raise TypeError("unsupported fixture")
            fn(**kw)
            out.append([k, True])
        except BaseException:
            out.append([k, False])
    return out

def _call_all(name, src, fn, arg_lists):
    # [[returned, value], ...]: fn(*args) for each args of the module loaded from src (value as JSON data)
    import json as _j
    m = _load_module(name, src)
    out = []
    for args in arg_lists:
        try:
            out.append([True, _j.loads(_j.dumps(getattr(m, fn)(*args)))])
        except BaseException:
            out.append([False, None])
    return out

def _call_warned(name, src, fn, args):
    # [returned, value, warned]: one call, and whether it emitted a DeprecationWarning
    import json as _j, warnings as _w
    m = _load_module(name, src)
    with _w.catch_warnings(record=True) as rec:
        _w.simplefilter("always")
        got = _j.loads(_j.dumps(getattr(m, fn)(*args)))
    return [True, got, any(issubclass(x.category, DeprecationWarning) for x in rec)]

def _call_one(name, src, fn, args_repr, kwargs_repr):
    # {"value": repr(fn(*args, **kwargs))} or {"raised": exception name, "message": ...}
    import ast as _a
    m = _load_module(name, src)
    try:
        return {"value": repr(getattr(m, fn)(*_a.literal_eval(args_repr), **_a.literal_eval(kwargs_repr)))}
    except BaseException as e:
        return {"raised": type(e).__name__, "message": str(e)[:300]}

def _run_script_fn(name, src, script_name, script_src, fn):
    # the value of fn() of a script that imports the module loaded from src (as JSON data)
    import json as _j
    _load_module(name, src)
    ns = {"__name__": script_name}
    exec(compile(script_src, script_name + ".py", "exec"), ns)
    return _j.loads(_j.dumps(ns[fn]()))
"""

# The child's main: a job on stdin, one marked JSON line on stdout. What the agent's code prints goes to stderr;
# nothing of the grader (its nonce, its result descriptor, the expected values) is in this process.
_AGENT_MAIN = r"""
def _agent_main():
    import json as _j, os as _o, sys as _s
    job = _j.loads(_s.stdin.read())
    out = _o.fdopen(_o.dup(1), "w", encoding="utf-8")
    _o.dup2(2, 1)
    _s.stdout = _s.stderr
    ops = {"tests": _test_results, "calls": _call_all, "warned": _call_warned, "script": _run_script_fn,
           "call": _call_one}
    try:
        res = ops[job["op"]](*job["args"])
    except BaseException:
        res = None
    out.write("\n__CLAWGYM_AGENT_CALL__" + _j.dumps(res) + "\n")
    out.flush()
    _o._exit(0)

_agent_main()
"""

# The grader's side (embedded in grade() code): each use of the agent's code is a child python whose only output
# is its exit and one JSON line, read as data with a fixed shape; what the check compares it with never leaves
# this process. The clean room seals the workspace before grade() runs, so the child cannot change what a later
# check reads either.
_ISOLATION = r'''
# Each run of the agent's code that a check starts begins from the same state and leaves nothing behind: this
# process is a child subreaper, so a process the run left (setsid, double fork) comes back here and is killed with
# every other descendant once the run is over; and whatever the run created in the places a process of its uid can
# write outside its own folder (/tmp, /var/tmp, /dev/shm, HOME) is removed. Without this a run could count the
# runs before it (a file, a daemon on an abstract socket) and tell, by the order the checks run in, a hidden
# mutant from a hidden rewrite of the module. A run that changed a file which was there before it counts as
# failed: that file cannot be given back.
_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
# Set by the synthesis gates' driver (clawgym.sandbox.guest.synth.grade), which grades only clawgym's own variants
# of a task (the reference, its mutations, the hacker gate's exploits), never an agent's workspace.
_ISO_OFF = False

def _iso_state(own=None, limit=20000):
    # {path: what lstat says} under the scratch places, the run's own folder `own` left out
    import os as _o
    seen = {}
    skip = {own, _o.getcwd()}  # the run's own folder; the graded workspace (sealed: nothing writes there)
    for top in _SCRATCH + ((_o.environ.get("HOME") or "/nonexistent"),):
        for dp, dns, fns in _o.walk(top):
            dns[:] = [n for n in dns if _o.path.join(dp, n) not in skip]
            for n in dns + fns:
                q = _o.path.join(dp, n)
                try:
                    st = _o.lstat(q)
                except OSError:
                    continue
                seen[q] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)
                if len(seen) > limit:
                    return seen
    return seen

def _iso_begin(own=None):
    if _ISO_OFF:
        return None
    import ctypes as _c
    try:
        _c.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass
    return _iso_state(own)

def _iso_kill():
    """Kill every descendant of this process (orphans come back to a subreaper), until none is left."""
    import os as _o, signal as _sg, time as _t
    me = _o.getpid()
    for _ in range(200):
        kids = {}
        for e in _o.listdir("/proc"):
            if e.isdigit():
                try:
                    with open("/proc/%s/stat" % e) as fh:
                        rest = fh.read().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                if rest[0] != "Z":
                    kids.setdefault(int(rest[1]), []).append(int(e))
        out, stack = [], [me]
        while stack:
            for c in kids.get(stack.pop(), []):
                out.append(c)
                stack.append(c)
        while True:  # reap what came back here (no other child of this process is running now)
            try:
                pid, _st = _o.waitpid(-1, _o.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if not out:
            return
        for pid in out:
            for sig in (_sg.SIGSTOP, _sg.SIGKILL):
                try:
                    _o.kill(pid, sig)
                except OSError:
                    pass
        _t.sleep(0.002)

def _iso_end(before, own=None):
    """After a run: its leftover processes killed and what it created removed; False when it changed or removed
    something that was there before it (the run's result is then not taken)."""
    import os as _o, shutil as _sh
    if before is None:
        return True
    _iso_kill()
    after = _iso_state(own)
    clean = True
    for q, st in sorted(after.items(), key=lambda kv: -len(kv[0])):
        if q not in before:
            try:
                if _o.path.isdir(q) and not _o.path.islink(q):
                    _sh.rmtree(q, ignore_errors=True)
                else:
                    _o.unlink(q)
            except OSError:
                clean = False
        elif before[q] != st and not _o.path.isdir(q):
            clean = False
    for q in before:
        if q not in after:
            clean = False
    return clean
'''

_GRADER_SIDE = r'''
def _agent_call(op, *args, timeout=60):
    """The JSON value a child python returns for op(*args), or None (crashed, timed out, no or bad result)."""
    import json as _j, os as _o, shutil as _sh, signal as _sg, subprocess as _sp, sys as _s, tempfile as _tf
    before = _iso_begin()
    d = _tf.mkdtemp(prefix="clawgym-agent-")
    try:
        p = _sp.Popen([_s.executable, "-P", "-c", _AGENT_CHILD], stdin=_sp.PIPE, stdout=_sp.PIPE,
                      stderr=_sp.DEVNULL, cwd=d, close_fds=True, start_new_session=True)
        try:
            raw, _ = p.communicate(_j.dumps({"op": op, "args": list(args)}).encode("utf-8", "surrogateescape"),
                                   timeout=timeout)
        except _sp.TimeoutExpired:
            raw = b""
        finally:
            try:
                _o.killpg(p.pid, _sg.SIGKILL)  # whatever the agent's code left running in its group
            except OSError:
                pass
            p.wait()
    finally:
        _sh.rmtree(d, ignore_errors=True)
        clean = _iso_end(before)
    mark = "__CLAWGYM_AGENT_CALL__"
    lines = [ln for ln in raw.decode("utf-8", "replace").splitlines() if ln.startswith(mark)]
    if not clean or p.returncode != 0 or len(lines) != 1:
        return None
    try:
        return _j.loads(lines[0][len(mark):])
    except ValueError:
        return None

def _test_names(test_src):
    import ast as _ast
    try:
        tree = _ast.parse(test_src)
    except SyntaxError:
        return None
    return [n.name for n in tree.body if isinstance(n, (_ast.FunctionDef, _ast.AsyncFunctionDef))
            and n.name.startswith("test")]

def _run_tests(mod_name, mod_src, test_src):
    """(n_tests, n_failed) running every test_* function of test_src against mod_src in a child python. Every test
    function the source defines at top level must be reported, each once; otherwise all count as failed."""
    res = _agent_call("tests", mod_name, mod_src, test_src)
    names = _test_names(test_src) or []
    ok = (isinstance(res, list) and all(isinstance(r, list) and len(r) == 2 and isinstance(r[0], str)
                                        and isinstance(r[1], bool) for r in res))
    if ok:
        seen = [r[0] for r in res]
        ok = len(set(seen)) == len(seen) and set(names) <= set(seen)
    if not ok:
        n = max(len(names), 1)
        return n, n
    return len(res), sum(1 for r in res if not r[1])

def _stand_in(name, src):
    """A module for the grader's own test code: each function of the agent's module `src` it calls runs in a child
    python, and only values cross (Python literals: repr there, ast.literal_eval here; a builtin exception raised
    again by name)."""
    import ast as _a, builtins as _b, types as _t
    m = _t.ModuleType(name)

    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def call(*args, **kwargs):
            r = _agent_call("call", name, src, attr, repr(list(args)), repr(dict(kwargs)))
            if not isinstance(r, dict):
                raise RuntimeError("the agent's code gave no result")
            if "raised" in r:
                exc = getattr(_b, str(r["raised"]), None)
                if not (isinstance(exc, type) and issubclass(exc, Exception)):
                    exc = RuntimeError
                raise exc(str(r.get("message", ""))[:300])
            v = r.get("value")
            if not isinstance(v, str) or len(v) > 1 << 20:
                raise TypeError("the agent's code returned no value")
            try:
                return _a.literal_eval(v)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                raise TypeError("the agent's code returned a value that is not a Python literal") from None
        call.__name__ = attr
        return call

    m.__getattr__ = __getattr__
    return m

def _run_task_tests(mod_name, mod_src, test_src):
    """(n_tests, n_failed) of the task's own tests (trusted: test_src from the check, never the workspace), run in
    the grader against a stand-in of the agent's module: the verdicts are the grader's, only values cross."""
    import inspect as _i, pathlib as _pl, sys as _s, tempfile as _tf
    _shim_pytest()
    saved = _s.modules.get(mod_name)
    _s.modules[mod_name] = _stand_in(mod_name, mod_src)
    try:
        ns = {"__name__": "test_module"}
        exec(compile(test_src, "test_module.py", "exec"), ns)
        tests = [(k, v) for k, v in ns.items() if k.startswith("test") and callable(v)]
        failed = 0
        for _, fn in tests:
            try:
                params = list(_i.signature(fn).parameters)
                kw = {p: _pl.Path(_tf.mkdtemp()) for p in params if p in ("tmp_path", "tmpdir")}
                if len(kw) != len(params):
                    raise TypeError("unsupported fixture")
                fn(**kw)
            except Exception:
                failed += 1
        return len(tests), failed
    finally:
        if saved is None:
            _s.modules.pop(mod_name, None)
        else:
            _s.modules[mod_name] = saved

def _calls(name, src, fn, arg_lists):
    """[[returned, value], ...] of fn(*args) per args, run in a child python; None when it gave no such list."""
    res = _agent_call("calls", name, src, fn, arg_lists)
    if not (isinstance(res, list) and len(res) == len(arg_lists) and all(
            isinstance(r, list) and len(r) == 2 and isinstance(r[0], bool) for r in res)):
        return None
    return res
'''

PYRUN = "_AGENT_CHILD = " + repr(AGENT_CORE + _AGENT_MAIN) + "\n" + _SHIM + _ISOLATION + _GRADER_SIDE

_rt: dict = {}
exec(compile(AGENT_CORE, "agent_core", "exec"), _rt)


def run_tests(mod_name: str, mod_src: str, test_src: str) -> tuple[int, int]:
    """(n_tests, n_failed) running test_src's test_* functions against mod_src in this process (trusted code: the
    generation-time self check); sys.modules is restored afterwards."""
    saved = {k: v for k, v in sys.modules.items() if k == mod_name or k == "pytest"}
    try:
        res = _rt["_test_results"](mod_name, mod_src, test_src)
        return len(res), sum(1 for _, ok in res if not ok)
    finally:
        sys.modules.pop(mod_name, None)
        sys.modules.update(saved)


def _call_cases(mod_name: str, mod_src: str, fn: str, cases: list) -> list[bool]:
    """Generation-time self check: which cases `fn` passes."""
    saved = {k: v for k, v in sys.modules.items() if k == mod_name}
    try:
        m = _rt["_load_module"](mod_name, mod_src)
        out = []
        for args, want in cases:
            try:
                out.append(getattr(m, fn)(*args) == want)
            except Exception:
                out.append(False)
        return out
    finally:
        sys.modules.pop(mod_name, None)
        sys.modules.update(saved)


_CASES_HELPER = """
def _cases_ok(ws, rel, name, fn, cases):
    src = read_text(ws, rel)
    if not src:
        return []
    got = _calls(name, src, fn, [args for args, _ in cases])
    if got is None:
        return [False] * len(cases)
    return [bool(r[0]) and r[1] == want for r, (_, want) in zip(got, cases)]
"""


def _add_runtime(ctx: Ctx) -> None:
    ctx.grade.helper(PYRUN)
    ctx.grade.helper(_CASES_HELPER)


def _jsonable(cases):
    return json.loads(json.dumps(cases))


# ----------------------------------------------------------------------------------------------
# hidden behaviour-preserving rewrites of a module: the control of a "your tests catch our mutants" check
# ----------------------------------------------------------------------------------------------
# A test that pins the module's *text* (its bytes, a frame walk to the source the runner loaded, inspect, its
# functions' code objects or line numbers) passes on the original and fails on every mutant without testing
# anything. Such a test also fails on an equivalent rewrite, which an honest test passes: the kill credit counts
# only for tests that pass on the original and on every hidden rewrite. A whole rewrite replaces each top-level
# definition by a hand-written alternative (another expression of the same behaviour, other local names, other
# docstrings/comments), puts the definitions in another order with other blank lines, and starts every definition
# on another line than the original (a pin of bytes, code objects or line numbers fails on it). A one-site edit
# changes one place a mutant changes, to something right, keeping everything else (a test that fails on any small
# change of the text, as a mutant is, fails on it). Each is checked when generated: the reference tests pass, the
# same outcome as the original on probe calls, other code objects, none of the texts the mutants change.

_LOCAL = re.compile(r"@(\w+)@")


def _fill_locals(text: str, pools: dict[str, list[str]], rng) -> str:
    """`text` with each @key@ replaced by a name from pools[key] (distinct names within the text)."""
    names: dict[str, str] = {}
    for key in dict.fromkeys(_LOCAL.findall(text)):
        names[key] = rng.choice([n for n in pools[key] if n not in names.values()])
    return _LOCAL.sub(lambda m: names[m.group(1)], text)


def _first_lines(src: str) -> dict[str, int]:
    return {n.name: n.lineno for n in pyast.parse(src).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def _rewrite(orig: str, headers: list[str], alts: dict[str, list[str]], pick: dict[str, int],
             pools: dict[str, list[str]], rng) -> str:
    """A rewrite of `orig`: a header from `headers`, then each definition's alternative alts[name][pick[name]]
    (locals from `pools`) in a shuffled order (never the original one), one to three blank lines apart; every
    definition starts on another line than in `orig`."""
    names = list(alts)
    defs = {n: _fill_locals(alts[n][pick[n]].strip("\n"), pools, rng) for n in names}
    order = names[:]
    while order == names:
        rng.shuffle(order)
    gaps = {n: rng.choice(["\n\n\n", "\n\n\n", "\n\n\n\n", "\n\n"]) for n in order}
    head = rng.choice(headers).strip("\n")
    orig_lines = _first_lines(orig)
    for _ in range(20):
        src = head + "".join(gaps[n] + defs[n] for n in order) + "\n"
        same = [n for n, ln in _first_lines(src).items() if orig_lines.get(n) == ln]
        if not same:
            return src
        gaps[same[0]] += "\n"
    raise AssertionError("no line layout found")  # pragma: no cover


def _outcomes(mod_name: str, src: str, probes: list) -> list:
    """Generation-time check (trusted code): what each probe call fn(*args) of the module does -- its value (type
    and repr) or its exception (type; and args when the module raised it itself) -- and the args afterwards."""
    import copy

    saved = {k: v for k, v in sys.modules.items() if k == mod_name}
    try:
        m = _rt["_load_module"](mod_name, src)
        out = []
        for fn, args in probes:
            a = copy.deepcopy(args)
            try:
                r = getattr(m, fn)(*a)
                out.append(("value", type(r).__name__, repr(r), repr(a)))
            except Exception as e:  # messages of builtin TypeErrors name the operand order: the type only
                own = type(e).__name__ in ("ValueError", "OutOfStock")
                out.append(("raised", type(e).__name__, repr(e.args) if own else "", repr(a)))
        return out
    finally:
        sys.modules.pop(mod_name, None)
        sys.modules.update(saved)


def _code_objects(src: str) -> dict[str, tuple]:
    ns: dict = {}
    exec(compile(src, "m.py", "exec"), ns)
    return {k: (v.__code__.co_code, v.__code__.co_consts, v.__code__.co_firstlineno) for k, v in ns.items()
            if callable(v) and hasattr(v, "__code__")}


_ORIG_FACTS: dict[tuple[str, str, str], tuple[list, dict]] = {}


def _orig_facts(mod_name: str, orig: str, probes: list) -> tuple[list, dict]:
    """The original's probe outcomes and code objects (once per original and probes)."""
    key = (mod_name, orig, repr(probes))
    if key not in _ORIG_FACTS:
        _ORIG_FACTS[key] = _outcomes(mod_name, orig, probes), _code_objects(orig)
    return _ORIG_FACTS[key]


def _check_equivalent(mod_name: str, orig: str, equiv: str, tests: str, n_tests: int, probes: list,
                      changed: list[str], whole: bool = True) -> None:
    """An equivalent is checked before it is used: the reference tests pass on it, every probe has the original's
    outcome, no text a mutant changes (`changed`) is left, and -- a whole rewrite -- every function's code (bytes)
    and first line differ, or -- a one-site edit -- the edited function's code (bytes or constants) differs."""
    assert equiv != orig and run_tests(mod_name, equiv, tests) == (n_tests, 0)
    assert _outcomes(mod_name, equiv, probes) == _orig_facts(mod_name, orig, probes)[0]
    a, b = _orig_facts(mod_name, orig, probes)[1], _code_objects(equiv)
    assert set(a) == set(b), sorted(a)
    if whole:
        assert all(a[k][0] != b[k][0] and a[k][2] != b[k][2] for k in a), sorted(a)
    else:
        assert any(a[k][:2] != b[k][:2] for k in a)
    assert not any(c in equiv for c in changed)


_RUNS_HELPER = '''
_RUNS = {}

def _runs(ws, mod_name, mod_src, test_src):
    """_run_tests, once per (workspace, module, tests) while grading: several checks read the same runs. No
    test file: nothing runs, all failed."""
    if not isinstance(test_src, str):
        return 1, 1
    key = (ws, mod_name, mod_src, test_src)
    if key not in _RUNS:
        if len(_RUNS) > 16:
            _RUNS.clear()
        _RUNS[key] = _run_tests(mod_name, mod_src, test_src)
    return _RUNS[key]
'''


# ----------------------------------------------------------------------------------------------
# 1. fix a bug that a failing test exposes
# ----------------------------------------------------------------------------------------------


class _Bug(TypedDict):
    """A one-line bug: `src` with {BUG} replaced by `bug` (buggy) or `fix` (fixed); `cases` are [args, want]."""

    module: str
    fn: str
    src: str
    bug: str
    fix: str
    tests: str
    cases: list[Any]


_BUGS: list[_Bug] = [
    {
        "module": "pager", "fn": "paginate",
        "src": '''"""Pagination helpers for the listing API."""


def paginate(items, page, per_page=10):
    """Return the items of 1-based `page` (an empty list past the end)."""
    if page < 1 or per_page < 1:
        raise ValueError("page and per_page must be >= 1")
    start = {BUG}
    return items[start:start + per_page]


def page_count(n_items, per_page=10):
    return (n_items + per_page - 1) // per_page
''',
        "bug": "page * per_page", "fix": "(page - 1) * per_page",
        "tests": '''from pager import paginate, page_count


def test_first_page():
    assert paginate(list(range(25)), 1, 10) == list(range(10))


def test_last_page():
    assert paginate(list(range(25)), 3, 10) == [20, 21, 22, 23, 24]


def test_page_count():
    assert page_count(25, 10) == 3


def test_past_end():
    assert paginate([1, 2, 3], 5, 2) == []
''',
        "cases": [[[[1, 2, 3, 4, 5], 2, 2], [3, 4]], [[[1, 2, 3, 4, 5], 1, 3], [1, 2, 3]],
                  [[list(range(7)), 3, 3], [6]], [[["a", "b"], 1, 5], ["a", "b"]]],
    },
    {
        "module": "durations", "fn": "parse_duration",
        "src": '''"""Parse human durations like '1h30m', '45m', '2h' into minutes."""
import re

_PART = re.compile(r"(\\d+)\\s*([hm])")


def parse_duration(text):
    total = 0
    for num, unit in _PART.findall(text.lower()):
        total += int(num) * ({BUG} if unit == "h" else 1)
    return total


def format_minutes(m):
    return f"{m // 60}h{m % 60:02d}m"
''',
        "bug": "100", "fix": "60",
        "tests": '''from durations import parse_duration, format_minutes


def test_minutes_only():
    assert parse_duration("45m") == 45


def test_hours_and_minutes():
    assert parse_duration("1h30m") == 90


def test_hours():
    assert parse_duration("2h") == 120


def test_format():
    assert format_minutes(95) == "1h35m"
''',
        "cases": [[["3h"], 180], [["1h 5m"], 65], [["10m"], 10], [["2H15M"], 135]],
    },
    {
        "module": "smoothing", "fn": "moving_average",
        "src": '''"""Simple smoothing for sensor series."""


def moving_average(xs, k):
    """Means of every window of k consecutive values (len(xs) - k + 1 windows)."""
    if k < 1:
        raise ValueError("k must be >= 1")
    return [sum(xs[i:i + k]) / k for i in range({BUG})]


def clip(xs, lo, hi):
    return [min(hi, max(lo, x)) for x in xs]
''',
        "bug": "len(xs) - k", "fix": "len(xs) - k + 1",
        "tests": '''from smoothing import moving_average, clip


def test_window_two():
    assert moving_average([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]


def test_window_one():
    assert moving_average([5, 7], 1) == [5.0, 7.0]


def test_clip():
    assert clip([-5, 3, 12], 0, 10) == [0, 3, 10]
''',
        "cases": [[[[2, 4, 6], 3], [4.0]], [[[1, 1, 1, 1], 2], [1.0, 1.0, 1.0]], [[[3], 1], [3.0]],
                  [[[1, 2], 3], []]],
    },
    {
        "module": "calendar_utils", "fn": "is_leap",
        "src": '''"""Calendar helpers."""


def is_leap(year):
    return year % 4 == 0 and ({BUG})


def days_in_year(year):
    return 366 if is_leap(year) else 365
''',
        "bug": "year % 100 != 0", "fix": "year % 100 != 0 or year % 400 == 0",
        "tests": '''from calendar_utils import is_leap, days_in_year


def test_common_year():
    assert not is_leap(2023)


def test_leap_year():
    assert is_leap(2024)


def test_century():
    assert not is_leap(1900)


def test_four_hundred():
    assert is_leap(2000)
    assert days_in_year(2000) == 366
''',
        "cases": [[[1600], True], [[2100], False], [[2400], True], [[1996], True], [[2001], False]],
    },
    {
        "module": "pricing", "fn": "apply_discount",
        "src": '''"""Cart pricing."""


def apply_discount(total, percent):
    """Total after a percentage discount, rounded to cents; percent is clamped to 0..100."""
    percent = max(0, min(100, percent))
    return round(total * (1 - {BUG}), 2)


def add_tax(total, rate):
    return round(total * (1 + rate), 2)
''',
        "bug": "percent / 10", "fix": "percent / 100",
        "tests": '''from pricing import apply_discount, add_tax


def test_ten_percent():
    assert apply_discount(200.0, 10) == 180.0


def test_zero():
    assert apply_discount(99.99, 0) == 99.99


def test_tax():
    assert add_tax(100.0, 0.2) == 120.0
''',
        "cases": [[[50.0, 50], 25.0], [[80.0, 25], 60.0], [[10.0, 150], 0.0], [[19.99, 5], 18.99]],
    },
]


@functools.cache
def _bug_facts(k: int) -> tuple[int, int, tuple[str, ...], int, str, str]:
    """Self-check of bug k (runs its tests against the buggy and fixed code) and the facts the task needs."""
    b = _BUGS[k]
    mod, fn = b["module"], b["fn"]
    buggy = b["src"].replace("{BUG}", b["bug"])
    fixed = b["src"].replace("{BUG}", b["fix"])
    ntests, fails_before = run_tests(mod, buggy, b["tests"])
    n2, fails_after = run_tests(mod, fixed, b["tests"])
    assert fails_before > 0 and fails_after == 0, (mod, fails_before, fails_after)
    assert all(_call_cases(mod, fixed, fn, b["cases"])) and not all(_call_cases(mod, buggy, fn, b["cases"]))
    failing = []
    tree = pyast.parse(b["tests"])
    # nodes of the tree parsed from b["tests"] (positions set): get_source_segment gives their text, never None
    imports = [cast(str, ast.get_source_segment(b["tests"], n)) for n in tree.body
               if isinstance(n, (ast.Import, ast.ImportFrom))]
    for node in tree.body:
        if (isinstance(node, ast.FunctionDef) and node.name.startswith("test")
                and run_tests(mod, buggy, "\n".join(imports + [cast(str, ast.get_source_segment(b["tests"], node))]) + "\n")[1]):
            failing.append(node.name)
    line = next(i for i, l in enumerate(b["src"].splitlines(), 1) if "{BUG}" in l)
    bug_line = b["src"].splitlines()[line - 1]
    old_text, new_text = bug_line.replace("{BUG}", b["bug"]), bug_line.replace("{BUG}", b["fix"])
    assert buggy.count(old_text) == 1
    return ntests, fails_before, tuple(sorted(failing)), line, old_text, new_text


@family("fix_failing_test", CAT, "debugging and issue fixing", ["read", "run tests", "analyze output", "modify code",
        "write"], ["py", "json", "md"], "A small module has a one-line bug exposed by its test suite: find it, fix it "
        "without touching the tests, report what failed.", difficulty=3)
def fix_failing_test(ctx: Ctx) -> None:
    rng = ctx.rng
    b = rng.choice(_BUGS)
    mod, fn = b["module"], b["fn"]
    buggy = b["src"].replace("{BUG}", b["bug"])
    ntests, fails_before, failing, line, old_text, new_text = _bug_facts(_BUGS.index(b))
    ctx.file(f"{mod}.py", buggy)
    ctx.file(f"tests/test_{mod}.py", b["tests"])
    ctx.file("setup.cfg", "[tool:pytest]\ntestpaths = tests\n")
    ctx.file("README.md", f"# {mod}\n\nRun the tests with `python3 -m pytest -q`.\n")
    ctx.file("ISSUE.md", f"## Bug report from {people(rng, 1)[0]}\n\nCI is red since the last refactor of "
                         f"`{fn}` in {mod}.py. Nobody touched the tests.\n")
    ctx.distractors(1)
    rep = "output/fix_report.json"
    ctx.output(rep)
    ctx.ask(
        f"CI is failing for {mod}.py (see ISSUE.md). Please find and fix the bug in {mod}.py — do not change the tests "
        f"in tests/test_{mod}.py. Then write {rep} with: function (the function you fixed), failing_tests (names of the "
        "test functions that failed before your fix, sorted), tests_total (number of test functions in the suite), "
        "tests_failing_before and tests_failing_after (counts), and line (the 1-based line number of the fixed line).")
    ctx.expect("fn", fn)
    ctx.expect("cases", _jsonable(b["cases"]))
    ctx.expect("failing", list(failing))
    ctx.expect("ntests", ntests)
    ctx.expect("nfail", fails_before)
    ctx.expect("line", line)
    ctx.expect("tests_digest", __import__("hashlib").sha256(b["tests"].encode()).hexdigest())
    ctx.expect("tests_src", b["tests"])
    _add_runtime(ctx)
    trel = f"tests/test_{mod}.py"
    ctx.check("bug_fixed", f"all(_cases_ok(ws, {mod + '.py'!r}, {mod!r}, E['fn'], E['cases']) or [False])")
    # the task's own tests (digest-checked in the workspace) run in the grader: the agent's module cannot claim them
    ctx.check("suite_passes", f"_run_task_tests({mod!r}, T({mod + '.py'!r}), E['tests_src']) == (E['ntests'], 0) and "
                              f"unchanged(ws, {trel!r}, E['tests_digest'])")
    ctx.check("report_function", f"J({rep!r})['function'] == E['fn'] and to_num(J({rep!r})['line']) == E['line']")
    ctx.check("report_failing", f"list_equal(J({rep!r})['failing_tests'], E['failing'])")
    ctx.check("report_counts", f"to_num(J({rep!r})['tests_total']) == E['ntests'] and "
                               f"to_num(J({rep!r})['tests_failing_before']) == E['nfail'] and "
                               f"to_num(J({rep!r})['tests_failing_after']) == 0")
    ctx.read("ISSUE.md")
    ctx.read(f"{mod}.py")
    ctx.read(trel)
    ctx.exec("PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -15")
    ctx.edit(f"{mod}.py", old_text, new_text)
    ctx.exec("PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -3")
    ctx.write(rep, json_text({"function": fn, "tests_total": ntests, "tests_failing_before": fails_before,
                              "tests_failing_after": 0, "line": line, "failing_tests": list(failing)}))


# ----------------------------------------------------------------------------------------------
# 2. add a function from a spec, with tests
# ----------------------------------------------------------------------------------------------


class _Spec(TypedDict):
    """A function to add to textkit: its reference `impl`, a wrong `mutant`, tests and [args, want] `cases`."""

    fn: str
    sig: str
    doc: str
    impl: str
    mutant: str
    tests: str
    cases: list[Any]


_SPECS: list[_Spec] = [
    {"fn": "slugify", "sig": "slugify(text)",
     "doc": "Lower-case the text, replace every run of characters that are not a-z or 0-9 with a single '-', and "
            "strip leading/trailing '-'.",
     "impl": '''

def slugify(text):
    import re
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
''',
     "mutant": '''

def slugify(text):
    return text.lower().replace(" ", "-")
''',
     "cases": [[["Hello, World!"], "hello-world"], [["  Many   spaces "], "many-spaces"], [["Already-ok"], "already-ok"],
               [["C++ & Rust 2026"], "c-rust-2026"], [["---"], ""]],
     "tests": '''

def test_slugify_basic():
    assert textkit.slugify("Hello, World!") == "hello-world"


def test_slugify_runs():
    assert textkit.slugify("a  --  b") == "a-b"


def test_slugify_edges():
    assert textkit.slugify("  Trim me!  ") == "trim-me"
'''},
    {"fn": "chunk", "sig": "chunk(items, size)",
     "doc": "Split a list into consecutive lists of length `size` (the last may be shorter). Raise ValueError when "
            "size < 1.",
     "impl": '''

def chunk(items, size):
    if size < 1:
        raise ValueError("size must be >= 1")
    return [items[i:i + size] for i in range(0, len(items), size)]
''',
     "mutant": '''

def chunk(items, size):
    return [items[i:i + size] for i in range(0, len(items) - size + 1, size)]
''',
     "cases": [[[[1, 2, 3, 4, 5], 2], [[1, 2], [3, 4], [5]]], [[[], 3], []], [[[1, 2, 3], 3], [[1, 2, 3]]],
               [[["a", "b", "c"], 5], [["a", "b", "c"]]]],
     "tests": '''

def test_chunk_even():
    assert textkit.chunk([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]


def test_chunk_remainder():
    assert textkit.chunk([1, 2, 3], 2) == [[1, 2], [3]]


def test_chunk_bad_size():
    try:
        textkit.chunk([1], 0)
    except ValueError:
        return
    raise AssertionError("expected ValueError")
'''},
    {"fn": "initials", "sig": "initials(full_name)",
     "doc": "Upper-case first letters of each whitespace-separated part of the name, joined with '.', with a "
            "trailing '.'; hyphenated parts count as separate parts. Empty input gives ''.",
     "impl": '''

def initials(full_name):
    parts = [p for p in full_name.replace("-", " ").split() if p]
    return "".join(p[0].upper() + "." for p in parts)
''',
     "mutant": '''

def initials(full_name):
    parts = full_name.split()
    return "".join(p[0].upper() + "." for p in parts)
''',
     "cases": [[["ada lovelace"], "A.L."], [["Jean-Luc Picard"], "J.L.P."], [[""], ""], [["  grace   hopper "], "G.H."]],
     "tests": '''

def test_initials_two():
    assert textkit.initials("ada lovelace") == "A.L."


def test_initials_hyphen():
    assert textkit.initials("Jean-Luc Picard") == "J.L.P."


def test_initials_empty():
    assert textkit.initials("") == ""
'''},
    {"fn": "word_freq", "sig": "word_freq(text, n)",
     "doc": "The n most common lower-cased words (runs of letters a-z) as [word, count] pairs, most common first, "
            "ties broken alphabetically.",
     "impl": '''

def word_freq(text, n):
    import re
    counts = {}
    for w in re.findall(r"[a-z]+", text.lower()):
        counts[w] = counts.get(w, 0) + 1
    return [[w, c] for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]
''',
     "mutant": '''

def word_freq(text, n):
    counts = {}
    for w in text.lower().split():
        counts[w] = counts.get(w, 0) + 1
    return [[w, c] for w, c in sorted(counts.items(), key=lambda kv: -kv[1])[:n]]
''',
     "cases": [[["b a b, c a b!", 2], [["b", 3], ["a", 2]]], [["z y x", 2], [["x", 1], ["y", 1]]], [["", 3], []],
               [["Dog dog DOG cat", 1], [["dog", 3]]]],
     "tests": '''

def test_word_freq_counts():
    assert textkit.word_freq("a b a", 1) == [["a", 2]]


def test_word_freq_ties():
    assert textkit.word_freq("pear apple", 2) == [["apple", 1], ["pear", 1]]


def test_word_freq_punctuation():
    assert textkit.word_freq("Hi! hi, HI.", 1) == [["hi", 3]]
'''},
]

_TEXTKIT = '''"""Small text utilities shared by our scripts."""


def truncate(text, width=20, suffix="..."):
    """Shorten text to at most `width` characters, ending with `suffix` when cut."""
    if len(text) <= width:
        return text
    return text[:max(0, width - len(suffix))] + suffix


def title_case(text):
    return " ".join(w[:1].upper() + w[1:].lower() for w in text.split())
'''


# the hidden sources of tests_catch_bug (see "hidden behaviour-preserving rewrites" above): the mutant and an
# equivalent of the reference textkit.py, both whole rewrites; the agent's tests must pass on the equivalent for
# their kill of the mutant to count
_TEXTKIT_HEADERS = ['"""Small text utilities used by our scripts."""',
                    '"""Text helpers shared by the scripts (truncation, casing, and friends)."""',
                    '# shared text helpers\n"""Small text utilities."""']

_TEXTKIT_ALTS = {
    "truncate": ['''
def truncate(text, width=20, suffix="..."):
    """Cut text down to `width` characters, the last of them `suffix`, when it is longer."""
    if width >= len(text):
        return text
    @keep@ = width - len(suffix)
    return text[:@keep@ if @keep@ > 0 else 0] + suffix
''', '''
def truncate(text, width=20, suffix="..."):
    # texts that fit are returned as they are
    if not len(text) <= width:
        return text[:max(0, width - len(suffix))] + suffix
    return text
'''],
    "title_case": ['''
def title_case(text):
    @words@ = [@w@[:1].upper() + @w@[1:].lower() for @w@ in text.split()]
    return " ".join(@words@)
''', '''
def title_case(text):
    """Capitalise each whitespace-separated word (the rest lower-cased), single spaces between."""
    return " ".join(map(lambda @w@: @w@[:1].upper() + @w@[1:].lower(), text.split()))
'''],
}

_SPEC_ALTS = {
    "slugify": ['''
def slugify(text):
    import re
    return "-".join(@p@ for @p@ in re.split(r"[^a-z0-9]+", text.lower()) if @p@)
''', '''
def slugify(text):
    """Lower-case slug: runs of anything but a-z and 0-9 become one '-', none at the ends."""
    import re as _re
    @low@ = text.lower()
    return _re.sub("[^0-9a-z]+", "-", @low@).strip("-")
'''],
    "chunk": ['''
def chunk(items, size):
    if 1 > size:
        raise ValueError("size must be >= 1")
    @out@ = []
    for @i@ in range(0, len(items), size):
        @out@.append(items[@i@:@i@ + size])
    return @out@
''', '''
def chunk(items, size):
    """Consecutive slices of `size` items (the last may be shorter)."""
    if size < 1:
        raise ValueError("size must be >= 1")
    @starts@ = range(0, len(items), size)
    return [items[@i@:size + @i@] for @i@ in @starts@]
'''],
    "initials": ['''
def initials(full_name):
    @words@ = full_name.replace("-", " ").split()
    return "".join(f"{@w@[0].upper()}." for @w@ in @words@)
''', '''
def initials(full_name):
    # hyphenated parts count as parts of their own
    @out@ = ""
    for @w@ in full_name.replace("-", " ").split():
        @out@ += @w@[0].upper() + "."
    return @out@
'''],
    "word_freq": ['''
def word_freq(text, n):
    import re
    @tally@ = {}
    for @w@ in re.findall("[a-z]+", text.lower()):
        @tally@[@w@] = @tally@.get(@w@, 0) + 1
    @ranked@ = sorted(@tally@.items(), key=lambda @kv@: (-@kv@[1], @kv@[0]))
    return [[@w@, @c@] for @w@, @c@ in @ranked@[:n]]
''', '''
def word_freq(text, n):
    """[word, count] pairs of the n most common words, ties alphabetical."""
    import re
    @tally@ = {}
    for @w@ in re.findall(r"[a-z]+", text.lower()):
        @tally@[@w@] = 1 + @tally@.get(@w@, 0)
    return [list(@kv@) for @kv@ in sorted(@tally@.items(), key=lambda @kv@: (-@kv@[1], @kv@[0]))[:n]]
'''],
}

_SPEC_POOLS = {"keep": ["keep", "room", "cut_at"], "words": ["words", "parts", "pieces"], "w": ["w", "word", "part"],
               "p": ["p", "piece", "bit"], "low": ["low", "lowered", "lower_text"], "out": ["out", "result", "acc"],
               "i": ["i", "start", "pos"], "starts": ["starts", "offsets", "steps"],
               "tally": ["tally", "counts", "seen"], "ranked": ["ranked", "ordered", "top"], "kv": ["kv", "pair", "item"],
               "c": ["c", "count", "times"]}

_TEXTKIT_PROBES = [
    ("truncate", ("abcdefghij", 6)), ("truncate", ("short",)), ("truncate", ("abcdefghij", 3)),
    ("truncate", ("abcdefghij", 2)), ("truncate", ("abc", 3)), ("truncate", ("abcdef", 5, "")),
    ("truncate", ("abcdef", 4, "\u2026")), ("truncate", ("abcdef", 0)), ("truncate", ("abcdef", -3)),
    ("truncate", ("abcdefgh", 3.0)), ("truncate", ("abcdefgh", 5.0)), ("truncate", (None, 3)),
    ("title_case", ("hello WORLD",)), ("title_case", ("  many   spaces ",)), ("title_case", ("",)),
    ("title_case", ("\u00c9COLE \u00e9lan",)), ("title_case", ("x-y z",)), ("title_case", (None,)),
]
_SPEC_PROBES: dict[str, list[tuple[Any, ...]]] = {
    "slugify": [("",), ("--a--",), ("\u00c0B c",), ("a_b",), ("\u0130x",), ("x\ty\nz",), ("UPPER lower 123",), (None,)],
    "chunk": [([1, 2, 3, 4, 5], 2), ([], 3), ([1], 0), ([1], -1), ("abcde", 2), ((1, 2, 3), 2), ([1, 2], True),
              ([1, 2], 1.5), ([1, 2], None), ([1, 2], 0.5)],
    "initials": [("a-b-c",), ("  ",), ("x",), ("\u00e9lan vital",), ("--",), (None,)],
    "word_freq": [("a a b", 0), ("a a b", -1), ("a a b", None), ("\u00dcn\u00efcode x", 5), ("", 0), ("b a b a c", 2)],
}


def _spec_probes(sp: _Spec) -> list:
    fn = sp["fn"]
    return _TEXTKIT_PROBES + [(fn, tuple(a)) for a, _ in sp["cases"]] + [(fn, a) for a in _SPEC_PROBES[fn]]


def _spec_sources(k: int, seed: int) -> tuple[str, str]:
    """(mutant, equivalent) for the task of `seed` (their own rng: the workspace does not change): the hidden
    mutant -- the spec's wrong implementation -- and a rewrite of the reference (_TEXTKIT + the spec's impl), both
    whole rewrites (another header, order, layout; truncate and title_case by alternatives; the function by an
    alternative in the equivalent), so no measure of how far the text is from the agent's own tells them apart.
    Both checked: the reference tests fail on the mutant and pass on the equivalent, which behaves as the
    reference on every probe."""
    import random

    sp = _SPECS[k]
    fn, tests = sp["fn"], "import textkit\n" + sp["tests"]
    rng = random.Random(f"implement_spec_function:hidden:{seed}")
    alts = {**_TEXTKIT_ALTS, fn: [sp["mutant"]]}
    mutant = _rewrite(_TEXTKIT + sp["mutant"], _TEXTKIT_HEADERS, alts,
                      {n: rng.randrange(len(a)) for n, a in alts.items()}, _SPEC_POOLS, rng)
    assert run_tests("textkit", mutant, tests)[1] > 0 and not all(_call_cases("textkit", mutant, fn, sp["cases"]))
    alts = {**_TEXTKIT_ALTS, fn: _SPEC_ALTS[fn]}
    equiv = _rewrite(_TEXTKIT + sp["impl"], _TEXTKIT_HEADERS, alts, {n: rng.randrange(len(a)) for n, a in alts.items()},
                     _SPEC_POOLS, rng)
    _check_equivalent("textkit", _TEXTKIT + sp["impl"], equiv, tests, 3, _spec_probes(sp), [])
    return mutant, equiv


@functools.cache
def _spec_selfcheck(k: int) -> bool:
    sp = _SPECS[k]
    full = _TEXTKIT + sp["impl"]
    assert all(_call_cases("textkit", full, sp["fn"], sp["cases"]))
    assert not all(_call_cases("textkit", _TEXTKIT + sp["mutant"], sp["fn"], sp["cases"]))
    test_src = "import textkit\n" + sp["tests"]
    n, f = run_tests("textkit", full, test_src)
    assert f == 0 and n == 3 and run_tests("textkit", _TEXTKIT + sp["mutant"], test_src)[1] > 0
    return True


@family("implement_spec_function", CAT, "code generation and implementation", ["read", "modify code", "write",
        "run tests"], ["py", "md", "json"], "Add a function to a module from a written spec, write tests for it, and "
        "report the test run.", difficulty=3)
def implement_spec_function(ctx: Ctx) -> None:
    rng = ctx.rng
    sp = rng.choice(_SPECS)
    fn = sp["fn"]
    _spec_selfcheck(_SPECS.index(sp))
    test_src = "import textkit\n" + sp["tests"]
    ctx.file("textkit.py", _TEXTKIT)
    ctx.file("tests/test_truncate.py", "import textkit\n\n\ndef test_truncate_short():\n    assert "
                                       "textkit.truncate('abc', 5) == 'abc'\n")
    ctx.file("docs/SPEC.md", f"# textkit additions\n\n## `{sp['sig']}`\n\n{sp['doc']}\n\nExamples:\n\n" +
             "".join(f"- `{fn}({', '.join(json.dumps(a) for a in args)})` -> `{json.dumps(want)}`\n"
                     for args, want in sp["cases"][:2]) + "\n## Later\n\n- `dedent_all(text)` (not yet, skip)\n")
    ctx.distractors(1)
    trel, rep = f"tests/test_{fn}.py", "output/test_report.json"
    ctx.output(rep)
    ctx.ask(
        f"Please add `{sp['sig']}` to textkit.py exactly as described in docs/SPEC.md (keep the existing functions as "
        f"they are), and write at least 3 test functions for it in {trel} (plain asserts, `import textkit`). Run the "
        f"tests, then write {rep} with function, test_file, tests_written (number of test functions in your file) and "
        "tests_passed.")
    ctx.expect("fn", fn)
    ctx.expect("cases", _jsonable(sp["cases"]))
    mutant_src, equiv_src = _spec_sources(_SPECS.index(sp), ctx.seed)
    ctx.expect("mutant_src", mutant_src)
    ctx.expect("equiv_src", equiv_src)
    ctx.expect("trel", trel)
    ctx.expect("old_cases", [[["abcdefghij", 6], "abc..."], [["short"], "short"]])
    _add_runtime(ctx)
    ctx.grade.helper(_RUNS_HELPER)
    ctx.grade.helper(
        "def _ntests(src):\n"
        "    import ast as _ast\n"
        "    return sum(1 for n in _ast.parse(src).body if isinstance(n, _ast.FunctionDef) and n.name.startswith('test'))\n")
    ctx.check("function_cases", "frac(sum(_cases_ok(ws, 'textkit.py', 'textkit', E['fn'], E['cases'])), len(E['cases']))")
    ctx.check("existing_kept", "E['fn'] in T('textkit.py') and all(_cases_ok(ws, 'textkit.py', 'textkit', 'truncate', "
                               "E['old_cases']) or [False])")
    # Writing tests, their passing and the report are credited beside real work only (the function, or tests
    # that catch the bug): three `assert True` tests and a report on an unimplemented function earn nothing.
    ctx.check("tests_written", f"_ntests(T({trel!r})) >= 3 and E['fn'] in T({trel!r})", support=True)
    ctx.check("tests_pass", f"_runs(ws, 'textkit', T('textkit.py'), T({trel!r}))[1] == 0 and "
                            f"_runs(ws, 'textkit', T('textkit.py'), T({trel!r}))[0] >= 3", support=True)
    # the kill counts only for tests that also pass on a hidden rewrite of the reference module (tests pinning
    # the module's text, not its behaviour, fail on it); the mutant is a rewrite too (_spec_sources)
    ctx.check("tests_catch_bug", f"_runs(ws, 'textkit', E['mutant_src'], T({trel!r}))[1] > 0 and "
                                 f"_runs(ws, 'textkit', E['equiv_src'], T({trel!r}))[1] == 0")
    ctx.check("report", f"J({rep!r})['function'] == E['fn'] and J({rep!r})['test_file'] == E['trel'] and "
                        f"to_num(J({rep!r})['tests_written']) == _ntests(T({trel!r})) == "
                        f"to_num(J({rep!r})['tests_passed'])", support=True)
    ctx.read("docs/SPEC.md")
    ctx.read("textkit.py")
    ctx.read("tests/test_truncate.py")
    last = _TEXTKIT.rstrip("\n").splitlines()[-1]
    ctx.edit("textkit.py", last + "\n", last + "\n" + sp["impl"])
    ctx.write(trel, test_src)
    ctx.exec("PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -3")
    ctx.write(rep, json_text({"function": fn, "test_file": trel, "tests_written": 3, "tests_passed": 3}))


# ----------------------------------------------------------------------------------------------
# 3. rename a function across a small code base, keeping a deprecated alias
# ----------------------------------------------------------------------------------------------


class _Rename(TypedDict):
    """A function `old` of `module` renamed to `new`; `calls` are (arg, arg) source texts, `cases` [args, want]."""

    module: str
    old: str
    new: str
    body: str
    params: str
    args: str
    calls: list[tuple[str, str]]
    cases: list[Any]


_RENAMES: list[_Rename] = [
    {"module": "money", "old": "fmt", "new": "format_money",
     "body": '    return f"{currency} {amount:,.2f}"\n', "params": "amount, currency=\"USD\"", "args": "amount, currency",
     "calls": [("1234.5", "\"EUR\""), ("99", "\"USD\""), ("0.5", "\"GBP\""), ("1000000", "\"JPY\"")],
     "cases": [[[12.0, "USD"], "USD 12.00"], [[1234567.891, "EUR"], "EUR 1,234,567.89"]]},
    {"module": "geo", "old": "dist", "new": "distance",
     "body": "    return round(((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5, 3)\n", "params": "a, b", "args": "a, b",
     "calls": [("(0, 0)", "(3, 4)"), ("(1, 1)", "(4, 5)"), ("(2, 0)", "(2, 7)"), ("(0, 0)", "(1, 1)")],
     "cases": [[[[0, 0], [6, 8]], 10.0], [[[1, 2], [1, 2]], 0.0]]},
    {"module": "textstats", "old": "wc", "new": "word_count",
     "body": "    return len(text.split()) if sep is None else len([w for w in text.split(sep) if w])\n",
     "params": "text, sep=None", "args": "text, sep",
     "calls": [("\"a b c\"", "None"), ("\"x,y,,z\"", "\",\""), ("\"one\"", "None"), ("\"  lots   of  space \"", "None")],
     "cases": [[["hello big world", None], 3], [["a;b;;c", ";"], 3]]},
]


@family("rename_with_alias", CAT, "code review and refactoring", ["read", "search", "modify code", "run tests",
        "write"], ["py", "json"], "Rename a function across several files, keep a deprecated alias that warns, and "
        "report the call sites changed.", difficulty=4)
def rename_with_alias(ctx: Ctx) -> None:
    rng = ctx.rng
    r = rng.choice(_RENAMES)
    mod, old, new = r["module"], r["old"], r["new"]
    lib = (f'"""{mod}: shared helpers."""\n\n\ndef {old}({r["params"]}):\n    """Do not call directly from new code."""\n'
           + r["body"] + "\n\nVERSION = \"1.4.0\"\n")
    callers: dict[str, list[tuple[str, str]]] = {}
    sites = {}
    for f in ("report.py", "cli.py", f"tests/test_{mod}.py"):
        k = rng.randint(1, 3)
        sites[f] = k
        callers[f] = [rng.choice(r["calls"]) for _ in range(k)]
    ns: dict = {}
    exec(compile(lib, mod, "exec"), ns)
    expected_report = [ns[old](*[eval(a) for a in c]) for c in callers["report.py"]]
    rep_src = (f"import {mod}\n\n# {old} is used below; {old}_cache is unrelated\n{old}_cache = {{}}\n\n\ndef summary():\n"
               "    out = []\n" + "".join(f"    out.append({mod}.{old}({a}, {b}))\n" for a, b in callers["report.py"]) +
               "    return out\n")
    cli_src = (f"import sys\n\nimport {mod}\n\n\ndef main(argv):\n" +
               "".join(f"    print({mod}.{old}({a}, {b}))\n" for a, b in callers["cli.py"]) +
               "    return 0\n\n\nif __name__ == '__main__':\n    sys.exit(main(sys.argv[1:]))\n")
    test_src = (f"import {mod}\n\n\n" + "".join(
        f"def test_call_{i}():\n    assert {mod}.{old}({a}, {b}) == {ns[old](eval(a), eval(b))!r}\n\n\n"
        for i, (a, b) in enumerate(callers[f"tests/test_{mod}.py"])).rstrip("\n") + "\n")
    ctx.file(f"{mod}.py", lib)
    ctx.file("report.py", rep_src)
    ctx.file("cli.py", cli_src)
    ctx.file(f"tests/test_{mod}.py", test_src)
    ctx.file("CHANGELOG.md", "# Changelog\n\n## Unreleased\n\n- (nothing yet)\n")
    ctx.distractors(1)
    rep = "output/rename_report.json"
    ctx.output(rep)
    total = sum(sites.values())
    changed = sorted(["cli.py", "report.py", f"tests/test_{mod}.py", f"{mod}.py"])
    ctx.ask(
        f"We're renaming `{mod}.{old}` to `{mod}.{new}`. Please rename the function in {mod}.py, update every call "
        f"site in the code base (report.py, cli.py, tests/) to the new name, and keep `{old}` in {mod}.py as a "
        f"deprecated alias that emits a DeprecationWarning (warnings.warn) and returns the same result. Don't touch "
        f"unrelated names that merely start with `{old}`. Run the tests, then write {rep} with old_name, new_name, "
        "files_changed (sorted paths) and call_sites_updated (number of call sites you rewrote, not counting the "
        "definition).")
    ctx.expect("new", new)
    ctx.expect("old", old)
    ctx.expect("cases", _jsonable(r["cases"]))
    ctx.expect("report_out", _jsonable(expected_report))
    ctx.expect("files", changed)
    ctx.expect("sites", total)
    _add_runtime(ctx)
    ctx.grade.helper(
        "def _alias_warns(ws, mod, old, case):\n"
        "    r = _agent_call('warned', mod, read_text(ws, mod + '.py') or '', old, case[0])\n"
        "    return isinstance(r, list) and len(r) == 3 and r[0] is True and r[1] == case[1] and r[2] is True\n"
        "def _report_runs(ws, mod):\n"
        "    return _agent_call('script', mod, read_text(ws, mod + '.py') or '', 'report',\n"
        "                       read_text(ws, 'report.py') or '', 'summary')\n"
        "def _old_calls(ws, mod, old, files):\n"
        "    return sum(len(_re.findall(r'\\b' + mod + r'\\.' + old + r'\\(', read_text(ws, f) or '')) for f in files)\n")
    mp = mod + ".py"
    ctx.check("new_name_works", f"all(_cases_ok(ws, {mp!r}, {mod!r}, E['new'], E['cases']) or [False])")
    ctx.check("alias_deprecated", f"_alias_warns(ws, {mod!r}, E['old'], E['cases'][0])")
    ctx.check("call_sites_renamed", f"_old_calls(ws, {mod!r}, E['old'], ['report.py', 'cli.py', 'tests/test_{mod}.py']) == 0"
                                    f" and _old_calls(ws, {mod!r}, E['new'], ['report.py', 'cli.py', "
                                    f"'tests/test_{mod}.py']) == E['sites'] and {old + '_cache = {}'!r} in T('report.py')")
    ctx.check("behaviour_kept", f"_report_runs(ws, {mod!r}) == E['report_out'] and "
                                f"_run_tests({mod!r}, T({mp!r}), T('tests/test_{mod}.py'))[1] == 0 and "
                                f"_old_calls(ws, {mod!r}, E['new'], ['report.py']) > 0")
    ctx.check("report", f"J({rep!r})['old_name'] == E['old'] and J({rep!r})['new_name'] == E['new'] and "
                        f"list_equal(J({rep!r})['files_changed'], E['files']) and "
                        f"to_num(J({rep!r})['call_sites_updated']) == E['sites']")
    ctx.read(mp)
    ctx.exec(f"grep -rn '{mod}\\.{old}(' --include=*.py .")
    ctx.write(mp, lib.replace(f"def {old}(", f"def {new}(").replace('    """Do not call directly from new code."""\n', "")
              + f"\n\ndef {old}({r['params']}):\n    \"\"\"Deprecated alias of {new}.\"\"\"\n    import warnings\n\n"
              f"    warnings.warn(\"{old}() is deprecated; use {new}()\", DeprecationWarning, stacklevel=2)\n"
              f"    return {new}({r['args']})\n")
    for f, src in (("report.py", rep_src), ("cli.py", cli_src), (f"tests/test_{mod}.py", test_src)):
        ctx.write(f, src.replace(f"{mod}.{old}(", f"{mod}.{new}("))
    ctx.exec("PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -3")
    ctx.write(rep, json_text({"old_name": old, "new_name": new, "files_changed": changed, "call_sites_updated": total}))


# ----------------------------------------------------------------------------------------------
# 4. extend a Makefile
# ----------------------------------------------------------------------------------------------

_WC_SCRIPT = '''"""Word statistics for text files: prints a JSON object."""
import json
import sys


def main(paths):
    files = {}
    for p in sorted(paths):
        with open(p, encoding="utf-8") as fh:
            text = fh.read()
        files[p] = {"lines": len(text.splitlines()), "words": len(text.split())}
    total = {"files": len(files), "lines": sum(f["lines"] for f in files.values()),
             "words": sum(f["words"] for f in files.values())}
    print(json.dumps({"total": total, "files": files}, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
'''


_HIDDEN_DOC_NAMES = ["intro", "preface", "appendix", "glossary", "epilogue", "outline", "part_one", "part_two",
                     "errata", "credits"]


def _hidden_docs(seed: int, words: list[str]) -> tuple[dict[str, str], dict]:
    """The hidden docs set the grader runs the agent's targets on ({path: text}: two to five docs/*.txt of other
    names and contents than the workspace's, blank lines included, and a docs/*.md that is not a .txt) and the
    stats scripts/wordstats.py prints for it; from the task's own rng for it, so the workspace does not change."""
    import random

    rng = random.Random(f"makefile_stats_target:hidden:{seed}")
    docs = {}
    for name in rng.sample(_HIDDEN_DOC_NAMES, rng.randint(2, 5)):
        lines = [" ".join(rng.choice(words + ["sun", "moss", "flint"]) for _ in range(rng.randint(0, 8)))
                 for _ in range(rng.randint(1, 6))]
        docs[f"docs/{name}.txt"] = "\n".join(lines) + "\n"
    files = {p: {"lines": len(t.splitlines()), "words": len(t.split())} for p, t in sorted(docs.items())}
    stats = {"total": {"files": len(files), "lines": sum(f["lines"] for f in files.values()),
                       "words": sum(f["words"] for f in files.values())}, "files": files}
    docs["docs/README.md"] = "# drafts\n\nnot part of the book: " + " ".join(rng.sample(words, 4)) + "\n"
    return docs, stats


# The grader's side: the agent's Makefile and scripts (every regular file of the workspace outside docs/ and
# output/, or only the Makefile and scripts/ when that is over the caps) copied into a temp dir with the hidden docs
# set; `make stats`, `make all` and `make clean` (output/ there first) run once each, each in a fresh copy, as child
# processes in their own session, never in this process; what a target left (processes, files outside its copy) is
# gone before the next (`_ISOLATION`).
_MAKE_TRIAL = r"""
_MAKE_MEMO = {}

def _make_files(ws, max_files=400, max_bytes=8 << 20):
    import os as _o, stat as _st
    def take(root, skip_top):
        got, size = {}, 0
        for d, dirs, names in _o.walk(root):
            if skip_top and d == root:
                dirs[:] = [x for x in dirs if x not in ('docs', 'output', '.git')]
            for n in names:
                p = _o.path.join(d, n)
                try:
                    st = _o.lstat(p)
                except OSError:
                    continue
                if not _st.S_ISREG(st.st_mode):
                    continue
                size += st.st_size
                if len(got) >= max_files or size > max_bytes:
                    return None
                try:
                    with open(p, 'rb') as fh:
                        got[_o.path.relpath(p, ws)] = fh.read(max_bytes + 1)
                except OSError:
                    continue
        return got
    files = take(ws, True)
    if files is None:
        files = take(_o.path.join(ws, 'scripts'), False) or {}
        for n in ('Makefile', 'makefile', 'GNUmakefile'):
            if exists(ws, n):
                with open(_o.path.join(ws, n), 'rb') as fh:
                    files[n] = fh.read(max_bytes + 1)
    return files

def _make_run(d, target, timeout=20):
    import os as _o, signal as _sg, subprocess as _sp
    env = {k: v for k, v in _o.environ.items() if k not in ('MAKEFLAGS', 'MFLAGS', 'GNUMAKEFLAGS', 'MAKELEVEL',
                                                             'MAKEFILES', 'PYTHONPYCACHEPREFIX')}
    before = _iso_begin(d)
    try:
        p = _sp.Popen(['make', target], cwd=d, stdin=_sp.DEVNULL, stdout=_sp.DEVNULL, stderr=_sp.DEVNULL, env=env,
                      close_fds=True, start_new_session=True)
    except OSError:
        return None
    try:
        rc = p.wait(timeout=timeout)
    except _sp.TimeoutExpired:
        rc = None
    finally:
        try:
            _o.killpg(p.pid, _sg.SIGKILL)  # whatever the recipes left running in their group
        except OSError:
            pass
        p.wait()
        if not _iso_end(before, d):  # every process the recipes left is gone, and what they made outside d
            rc = None
    return rc

def _made_json(path):
    import os as _o, stat as _st
    try:
        fd = _o.open(path, _o.O_RDONLY | _o.O_NOFOLLOW | _o.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not _st.S_ISREG(_o.fstat(fd).st_mode):
            return None
        with _o.fdopen(fd, 'rb') as fh:
            fd = None
            raw = fh.read((1 << 20) + 1)
        return _json.loads(raw.decode('utf-8')) if len(raw) <= 1 << 20 else None
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        if fd is not None:
            _o.close(fd)

def _make_tree(files):
    # a fresh copy of the agent's Makefile and scripts with the hidden docs set: each target runs in its own, so
    # nothing one target left in the tree reaches the next
    import os as _o, tempfile as _tf
    d = _tf.mkdtemp(prefix='clawgym-make-')
    for rel, b in list(files.items()) + [(p, t.encode()) for p, t in E['hidden_docs'].items()]:
        p = _o.path.join(d, rel)
        _o.makedirs(_o.path.dirname(p), exist_ok=True)
        with open(p, 'wb') as fh:
            fh.write(b)
    return d

def _make_trial(ws):
    # {'stats': ..., 'all': ..., 'clean': ...}: what the agent's targets do on the hidden docs set, each target in
    # a fresh tree, its leftover processes killed and what it made outside the tree removed before the next
    import hashlib as _h, os as _o, shutil as _sh
    files = _make_files(ws)
    if not any(n in files for n in ('Makefile', 'makefile', 'GNUmakefile')):
        return {}
    # the trial depends on the files it copies alone (the hidden docs are the task's): keyed by their content, so
    # the three checks, and the synthesis gates' variants of one task sharing a Makefile, run it once
    key = _h.sha256(repr(sorted(files.items())).encode()).hexdigest()
    if key in _MAKE_MEMO:
        return dict(_MAKE_MEMO[key])
    res = {'stats': False, 'all': False, 'clean': False}
    dirs = []
    try:
        d = _make_tree(files)
        dirs.append(d)
        out = _o.path.join(d, 'output', 'stats.json')
        res['stats'] = _make_run(d, 'stats') == 0 and _made_json(out) == E['hidden']
        if res['stats']:  # `all` builds stats (from nothing) and still lints (py_compile writes the .pyc)
            d = _make_tree(files)
            dirs.append(d)
            out = _o.path.join(d, 'output', 'stats.json')
            res['all'] = _make_run(d, 'all') == 0 and _made_json(out) == E['hidden']
            cache = _o.path.join(d, 'scripts', '__pycache__')
            res['all'] = res['all'] and _o.path.isdir(cache) and any(
                n.startswith('wordstats.') and n.endswith('.pyc') for n in _o.listdir(cache))
        d = _make_tree(files)
        dirs.append(d)
        _o.makedirs(_o.path.join(d, 'output'))
        with open(_o.path.join(d, 'output', 'stats.json'), 'w') as fh:
            fh.write('{}')
        res['clean'] = (_make_run(d, 'clean') == 0 and not _o.path.lexists(_o.path.join(d, 'output'))
                        and all(_o.path.isfile(_o.path.join(d, p)) for p in E['hidden_docs']))
    except OSError:
        pass
    finally:
        for d in dirs:
            _sh.rmtree(d, ignore_errors=True)
    if len(_MAKE_MEMO) > 16:
        _MAKE_MEMO.clear()
    _MAKE_MEMO[key] = dict(res)
    return res
"""


@family("makefile_stats_target", CAT, "DevOps and continuous delivery", ["read", "modify code", "run scripts",
        "verify"], ["Makefile", "py", "txt", "json"], "Add build targets to an existing Makefile (a stats target with "
        "a file output, wiring into all, a clean rule) and run it.", difficulty=3)
def makefile_stats_target(ctx: Ctx) -> None:
    rng = ctx.rng
    words = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "ember", "north", "quiet"]
    docs = {}
    for i in range(rng.randint(3, 5)):
        lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) for _ in range(rng.randint(2, 7))]
        docs[f"docs/chapter{i + 1}.txt"] = "\n".join(lines) + "\n"
    for p, t in docs.items():
        ctx.file(p, t)
    ctx.file("docs/notes.md", "# not part of the book\n\nignore me\n")
    ctx.file("scripts/wordstats.py", _WC_SCRIPT)
    mk = ("PYTHON ?= python3\n\n.PHONY: all lint\n\nall: lint\n\nlint:\n\t$(PYTHON) -m py_compile scripts/wordstats.py\n")
    ctx.file("Makefile", mk)
    ctx.distractors(1)
    files = {p: {"lines": len(t.splitlines()), "words": len(t.split())} for p, t in sorted(docs.items())}
    total = {"files": len(files), "lines": sum(f["lines"] for f in files.values()),
             "words": sum(f["words"] for f in files.values())}
    out = "output/stats.json"
    ctx.ask(
        "Please extend the Makefile: add a `stats` target that runs scripts/wordstats.py on every docs/*.txt file "
        f"and writes its output to {out} (create output/ if needed); make `all` also build stats; add a `clean` "
        "target that removes the output/ directory (mark stats and clean as phony). Then run `make stats` so the "
        "file exists.")
    ctx.expect("total", total)
    ctx.expect("files", files)
    hidden_docs, hidden = _hidden_docs(ctx.seed, words)
    ctx.expect("hidden_docs", hidden_docs)
    ctx.expect("hidden", hidden)
    ctx.output(out)
    ctx.grade.helper(_ISOLATION)
    ctx.grade.helper(_MAKE_TRIAL)
    # The targets are run for real, on a copy of the agent's Makefile and scripts with a hidden docs set (a recipe
    # that only names the script, the docs or `rm` does nothing there); the workspace's own stats.json counts only
    # beside a target that works (support checks).
    ctx.check("stats_totals", f"J({out!r})['total'] == E['total']", support=True)
    ctx.check("stats_per_file", f"J({out!r})['files'] == E['files']", support=True)
    ctx.check("stats_target", "_make_trial(ws).get('stats') is True")
    ctx.check("all_builds_stats", "_make_trial(ws).get('all') is True")
    ctx.check("clean_target", "_make_trial(ws).get('clean') is True and "
                              "'clean' in ''.join(l for l in T('Makefile').splitlines() if l.startswith('.PHONY'))")
    ctx.read("Makefile")
    ctx.read("scripts/wordstats.py")
    ctx.exec("ls docs/")
    new_mk = ("PYTHON ?= python3\n\n.PHONY: all lint stats clean\n\nall: lint stats\n\nlint:\n\t$(PYTHON) -m "
              f"py_compile scripts/wordstats.py\n\nstats:\n\tmkdir -p output\n\t$(PYTHON) scripts/wordstats.py "
              f"$(wildcard docs/*.txt) > {out}\n\nclean:\n\trm -rf output\n")
    ctx.write("Makefile", new_mk)
    ctx.exec("make stats && cat " + out)
    # the oracle's stats.json is produced by `make stats`; also pin the exact bytes (host/sandbox python agree)
    ctx.write(out, json.dumps({"total": total, "files": files}, indent=2) + "\n")


# ----------------------------------------------------------------------------------------------
# 5. write a log-summary CLI and run it
# ----------------------------------------------------------------------------------------------

_LOG_SCRIPT = '''"""Summarise an application log: python3 scripts/log_summary.py LOGFILE > summary.json"""
import json
import re
import sys
from collections import Counter

LINE = re.compile(r"^(\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2})\\s+(DEBUG|INFO|WARN|ERROR)\\s+\\[([\\w.-]+)\\]\\s+(.*)$")


def summarise(lines):
    levels, errors, comps = Counter(), Counter(), Counter()
    first = last = None
    bad = 0
    for line in lines:
        m = LINE.match(line.rstrip("\\n"))
        if not m:
            if line.strip():
                bad += 1
            continue
        ts, lvl, comp, msg = m.groups()
        first = first or ts
        last = ts
        levels[lvl] += 1
        if lvl == "ERROR":
            errors[msg] += 1
            comps[comp] += 1
    top = sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"levels": {k: levels.get(k, 0) for k in ("DEBUG", "INFO", "WARN", "ERROR")},
            "top_error": top[0][0] if top else None,
            "errors_by_component": dict(sorted(comps.items())),
            "first_ts": first, "last_ts": last, "malformed_lines": bad}


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as fh:
        print(json.dumps(summarise(fh), indent=2))
'''

_LOG_MSGS = {"INFO": ["request served", "cache warmed", "job scheduled", "user login"],
             "DEBUG": ["pool size 8", "retrying fetch", "config loaded"],
             "WARN": ["slow query", "disk 85% full", "deprecated endpoint used"],
             "ERROR": ["db timeout", "upstream 502", "payment declined", "queue full"]}


def _fake_log(rng, n: int) -> str:
    import datetime as dt

    t = dt.datetime(2026, rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 20), 0, 0)
    comps = ["api", "worker", "db.pool", "billing"]
    out = []
    for _ in range(n):
        t += dt.timedelta(seconds=rng.randint(1, 300))
        lvl = rng.choices(["INFO", "DEBUG", "WARN", "ERROR"], [5, 2, 2, 2])[0]
        out.append(f"{t.isoformat()} {lvl} [{rng.choice(comps)}] {rng.choice(_LOG_MSGS[lvl])}")
        if rng.random() < 0.06:
            out.append("    at com.example.Handler.run(Handler.java:42)")
    return "\n".join(out) + "\n"


@family("log_summary_cli", CAT, "code generation and implementation", ["read", "write", "run scripts", "analyze output"],
        ["py", "log", "json"], "Write a reusable log-summary CLI (levels, top error, per-component errors, time span, "
        "malformed lines) and run it on the service log.", difficulty=4)
def log_summary_cli(ctx: Ctx) -> None:
    rng = ctx.rng
    log = _fake_log(rng, rng.randint(25, 45))
    hidden = _fake_log(rng, rng.randint(15, 25))
    ns: dict = {}
    exec(compile(_LOG_SCRIPT, "log_summary", "exec"), ns)
    exp = ns["summarise"](log.splitlines(True))
    exp_hidden = ns["summarise"](hidden.splitlines(True))
    ctx.file("logs/app.log", log)
    ctx.file("logs/app.log.1.gz.txt", "(rotated archive placeholder; not part of this task)\n")
    ctx.file("docs/log_format.md", "Each line: `<ISO timestamp> <LEVEL> [<component>] <message>`; LEVEL is one of "
                                   "DEBUG, INFO, WARN, ERROR. Other non-empty lines (stack traces) are malformed.\n")
    ctx.distractors(1)
    out, scr = "output/log_summary.json", "scripts/log_summary.py"
    ctx.ask(
        f"Please write a small CLI, {scr}, that takes a log file path (format in docs/log_format.md) and prints a JSON "
        "summary to stdout with: levels (counts for DEBUG, INFO, WARN, ERROR — all four keys), top_error (most frequent "
        "ERROR message; ties alphabetical; null if none), errors_by_component (component -> number of ERROR lines), "
        "first_ts and last_ts (first/last valid timestamp as written), malformed_lines (non-empty lines that don't "
        f"match). Then run it on logs/app.log and save the output as {out}. Stdlib only — I'll reuse it on other logs.")
    ctx.expect("exp", exp)
    ctx.expect("hidden_log", hidden)
    ctx.expect("hidden", exp_hidden)
    ctx.output(out)
    ctx.grade.helper(
        "def _cli(ws, log_text):\n"
        "    import subprocess as _sp, sys as _sys, tempfile as _tf\n"
        "    if not exists(ws, 'scripts/log_summary.py'):\n"
        "        return None\n"
        "    with _tf.NamedTemporaryFile('w', suffix='.log', delete=False) as fh:\n"
        "        fh.write(log_text)\n"
        "    r = _sp.run([_sys.executable, _os.path.join(ws, 'scripts/log_summary.py'), fh.name], capture_output=True,\n"
        "                text=True, timeout=20, cwd=ws)\n"
        "    _os.unlink(fh.name)\n"
        "    return _json.loads(r.stdout) if r.returncode == 0 else None\n")
    ctx.check("levels", f"J({out!r})['levels'] == E['exp']['levels']")
    ctx.check("top_error_and_components", f"J({out!r})['top_error'] == E['exp']['top_error'] and "
                                          f"J({out!r})['errors_by_component'] == E['exp']['errors_by_component']")
    ctx.check("time_span_malformed", f"J({out!r})['first_ts'] == E['exp']['first_ts'] and J({out!r})['last_ts'] == "
                                     f"E['exp']['last_ts'] and J({out!r})['malformed_lines'] == E['exp']['malformed_lines']")
    ctx.check("cli_on_hidden_log", "_cli(ws, E['hidden_log']) == E['hidden']")
    ctx.check("cli_matches_output", f"_cli(ws, T('logs/app.log')) == J({out!r}) == E['exp']")
    ctx.read("docs/log_format.md")
    ctx.read("logs/app.log")
    ctx.write(scr, _LOG_SCRIPT)
    ctx.exec(f"mkdir -p output && python3 {scr} logs/app.log > {out}")
    ctx.exec(f"python3 -m json.tool {out} | head -20")


# ----------------------------------------------------------------------------------------------
# 6. pin dependencies to a lock file
# ----------------------------------------------------------------------------------------------

_PKGS = ["requests", "PyYAML", "numpy", "pandas", "click", "rich", "httpx", "pydantic", "Jinja2", "attrs",
         "python-dateutil", "tqdm", "SQLAlchemy", "boto3"]


@family("dependency_pinning", CAT, "environment configuration and deployment", ["read", "compare", "modify code",
        "write"], ["txt", "json"], "Compare requirements.txt with a lock file: report unpinned, mismatched and unlocked "
        "packages, then pin requirements to the locked versions.", difficulty=3)
def dependency_pinning(ctx: Ctx) -> None:
    rng = ctx.rng
    pk = rng.sample(_PKGS, rng.randint(6, 9))
    lock = {p: f"{rng.randint(0, 5)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}" for p in pk}
    missing = rng.sample(pk, 1)
    req_lines, unpinned, mismatched = ["# runtime dependencies", ""], [], []
    for p in pk:
        style = rng.choice(["bare", "pin", "pin", "range", "wrong"])
        if p == next(q for q in pk if q not in missing):
            style = "wrong"
        if p in missing:
            style = "range"
        name = p.lower() if rng.random() < 0.3 else p
        if style == "bare":
            req_lines.append(name)
            unpinned.append(p.lower())
        elif style == "pin":
            req_lines.append(f"{name}=={lock[p]}")
        elif style == "range":
            req_lines.append(f"{name}>={lock[p].split('.')[0]}.0")
            unpinned.append(p.lower())
        else:
            maj, mi, pa = lock[p].split(".")
            wrong = f"{maj}.{int(mi) + 1}.{pa}"
            req_lines.append(f"{name}=={wrong}  # bumped by hand")
            mismatched.append({"name": p.lower(), "required": wrong, "locked": lock[p]})
    req_lines.append("")
    lock_lines = [f"{p.lower()}=={v}" for p, v in sorted(lock.items(), key=lambda kv: kv[0].lower()) if p not in missing]
    lock_lines.insert(1, f"certifi==2026.{rng.randint(1, 9)}.1")  # transitive pins
    lock_lines.insert(3, f"idna=={rng.randint(2, 3)}.{rng.randint(0, 9)}")
    ctx.file("requirements.txt", "\n".join(req_lines) + "\n")
    ctx.file("requirements.lock", "# generated by pip-compile; do not edit\n" + "\n".join(lock_lines) + "\n")
    ctx.file("setup.py", "from setuptools import setup\nsetup(name='app', version='0.1')\n")
    ctx.distractors(1)
    miss = [p.lower() for p in missing]
    unpinned_l = sorted(u for u in unpinned if u not in miss)
    report = {"total_packages": len(pk), "unpinned": unpinned_l, "mismatched": sorted(mismatched, key=lambda m: m["name"]),
              "missing_from_lock": sorted(miss)}
    rep = "output/deps_report.json"
    ctx.ask(
        "Please audit requirements.txt against requirements.lock (package names are case-insensitive; compare in lower "
        f"case). Write {rep} with total_packages (packages in requirements.txt), unpinned (packages without an exact "
        "== pin that ARE in the lock), mismatched (list of {name, required, locked} where the == pin differs from the "
        "lock), and missing_from_lock (packages not in the lock) — all sorted by name. Then rewrite requirements.txt so "
        "every package in the lock is pinned as name==locked_version (lower-case name); leave packages missing from "
        "the lock as they are and keep the comment line.")
    ctx.expect("report", report)
    ctx.expect("pins", {p.lower(): lock[p] for p in pk if p not in missing})
    ctx.expect("to_fix", sorted(unpinned_l + [m["name"] for m in mismatched]))
    ctx.expect("keep", [l for l in req_lines if l and any(l.lower().startswith(m) for m in miss)])
    ctx.grade.helper(
        "def _pins(text):\n"
        "    out = {}\n"
        "    for l in (text or '').splitlines():\n"
        "        l = l.split('#')[0].strip()\n"
        "        m = _re.match(r'^([A-Za-z0-9_.-]+)\\s*==\\s*([\\w.]+)$', l)\n"
        "        if m:\n"
        "            out[m.group(1).lower()] = m.group(2)\n"
        "    return out\n")
    ctx.check("report_total_unpinned", f"to_num(J({rep!r})['total_packages']) == E['report']['total_packages'] and "
                                       f"list_equal(J({rep!r})['unpinned'], E['report']['unpinned'])")
    ctx.check("report_mismatched", f"[(norm(m['name']), str(m['required']), str(m['locked'])) for m in J({rep!r})"
                                   "['mismatched']] == [(m['name'], m['required'], m['locked']) for m in "
                                   "E['report']['mismatched']]")
    ctx.check("report_missing", f"list_equal(J({rep!r})['missing_from_lock'], E['report']['missing_from_lock'])")
    ctx.check("requirements_pinned", "frac(sum(1 for k in E['to_fix'] if _pins(T('requirements.txt')).get(k) == "
                                     "E['pins'][k]), len(E['to_fix'])) * float(all(_pins(T('requirements.txt')).get(k) "
                                     "== v for k, v in E['pins'].items()) or 0.5) * float(all(l in T('requirements.txt') "
                                     "for l in E['keep']) and '# runtime dependencies' in T('requirements.txt'))")
    ctx.read("requirements.txt")
    ctx.read("requirements.lock")
    ctx.write(rep, json_text(report))
    new_req = ["# runtime dependencies", ""]
    for line in req_lines[2:-1]:
        nm = re.split(r"[=<>!~ ]", line, maxsplit=1)[0]
        key = next(p for p in pk if p.lower() == nm.lower())
        new_req.append(line if key in missing else f"{key.lower()}=={lock[key]}")
    ctx.write("requirements.txt", "\n".join(new_req) + "\n")
    ctx.exec("diff <(grep -v '^#' requirements.txt | sort) <(grep -v '^#' requirements.lock | sort) || true")


# ----------------------------------------------------------------------------------------------
# 7. write tests that catch mutants
# ----------------------------------------------------------------------------------------------

_INV = '''"""Inventory bookkeeping."""


class OutOfStock(Exception):
    pass


def add_stock(stock, sku, qty):
    """Return a new dict with qty added to sku (qty must be positive)."""
    if qty <= 0:
        raise ValueError("qty must be positive")
    new = dict(stock)
    new[sku] = new.get(sku, 0) + qty
    return new


def remove_stock(stock, sku, qty):
    """Return a new dict with qty removed; raise OutOfStock when there is not enough."""
    have = stock.get(sku, 0)
    if qty > have:
        raise OutOfStock(sku)
    new = dict(stock)
    new[sku] = have - qty
    if new[sku] == 0:
        del new[sku]
    return new


def reorder_list(stock, thresholds, default=5):
    """SKUs whose quantity is at or below their threshold (default when not listed), sorted."""
    skus = set(stock) | set(thresholds)
    return sorted(s for s in skus if stock.get(s, 0) <= thresholds.get(s, default))


def stock_value(stock, prices):
    """Total value, rounded to cents; unknown prices count as 0."""
    return round(sum(q * prices.get(s, 0.0) for s, q in stock.items()), 2)
'''

_INV_MUTANTS = [
    ("    if qty <= 0:\n        raise ValueError", "    if qty < 0:\n        raise ValueError"),
    ("    if qty > have:", "    if qty >= have:"),
    ("    if new[sku] == 0:\n        del new[sku]\n", ""),
    ("stock.get(s, 0) <= thresholds", "stock.get(s, 0) < thresholds"),
    ("thresholds.get(s, default)", "thresholds.get(s, 0)"),
    ("    return round(sum(q * prices.get(s, 0.0) for s, q in stock.items()), 2)",
     "    return round(sum(q * prices[s] for s, q in stock.items() if s in prices), 1)"),
    ("    new = dict(stock)\n    new[sku] = new.get(sku, 0) + qty", "    new = stock\n    new[sku] = new.get(sku, 0) + qty"),
]

_INV_TESTS = '''import inventory
from inventory import OutOfStock


def test_add_new_and_existing():
    s = inventory.add_stock({}, "A", 2)
    assert s == {"A": 2}
    assert inventory.add_stock(s, "A", 3) == {"A": 5}


def test_add_does_not_mutate():
    s = {"A": 1}
    inventory.add_stock(s, "A", 1)
    assert s == {"A": 1}


def test_add_rejects_non_positive():
    for bad in (0, -1):
        try:
            inventory.add_stock({}, "A", bad)
        except ValueError:
            continue
        raise AssertionError("expected ValueError")


def test_remove_exact_and_partial():
    assert inventory.remove_stock({"A": 3}, "A", 1) == {"A": 2}
    assert inventory.remove_stock({"A": 3}, "A", 3) == {}


def test_remove_too_much():
    try:
        inventory.remove_stock({"A": 1}, "A", 2)
    except OutOfStock:
        return
    raise AssertionError("expected OutOfStock")


def test_reorder_list():
    assert inventory.reorder_list({"A": 5, "B": 6, "C": 1}, {"C": 1}) == ["A", "C"]
    assert inventory.reorder_list({"A": 2}, {"A": 1, "D": 0}) == ["D"]


def test_stock_value():
    assert inventory.stock_value({"A": 3, "B": 1}, {"A": 0.35, "B": 2.0}) == 3.05
    assert inventory.stock_value({"Z": 4}, {}) == 0
'''


# hidden equivalents of inventory.py (see "hidden behaviour-preserving rewrites" above)
_INV_HEADERS = ['"""Inventory bookkeeping helpers: stock levels, reorders, valuation."""',
                '"""Stock bookkeeping.\n\nStock levels are plain dicts, sku -> quantity.\n"""',
                '# inventory helpers\n"""Inventory bookkeeping (stock is a dict of sku -> quantity)."""',
                '"""Inventory."""\n\n# Nothing here changes the caller\'s dicts.']

_INV_ALTS = {
    "OutOfStock": ['''
class OutOfStock(Exception):
    """Raised when a removal asks for more than is on hand."""
''', '''
class OutOfStock(Exception):
    """Not enough stock."""

    pass
''', '''
class OutOfStock(Exception):
    # raised by remove_stock
    ...
'''],
    "add_stock": ['''
def add_stock(stock, sku, qty):
    """Return a copy of stock with qty more units of sku; qty has to be positive."""
    if 0 >= qty:
        raise ValueError("qty must be positive")
    @new@ = dict(stock)
    @cur@ = @new@.get(sku, 0)
    @new@[sku] = @cur@ + qty
    return @new@
''', '''
def add_stock(stock, sku, qty):
    # qty must be strictly positive; the caller's dict is left alone
    @bad@ = qty <= 0
    if @bad@:
        raise ValueError("qty must be positive")
    @new@ = dict(stock)
    @new@[sku] = qty + @new@.get(sku, 0)
    return @new@
''', '''
def add_stock(stock, sku, qty):
    """Add qty (> 0) units of sku to a copy of stock and return the copy."""
    if 0 >= qty:
        raise ValueError("qty must be positive")
    @new@ = dict(stock)
    @new@[sku] = (@new@[sku] if sku in @new@ else 0) + qty
    return @new@
'''],
    "remove_stock": ['''
def remove_stock(stock, sku, qty):
    """Return a copy of stock with qty fewer units of sku; OutOfStock when that is more than there is."""
    @have@ = stock.get(sku, 0)
    if @have@ < qty:
        raise OutOfStock(sku)
    @new@ = dict(stock)
    @left@ = @have@ - qty
    @new@[sku] = @left@
    if @left@ == 0:
        del @new@[sku]
    return @new@
''', '''
def remove_stock(stock, sku, qty):
    @have@ = stock[sku] if sku in stock else 0
    if qty > @have@:
        raise OutOfStock(sku)
    @new@ = dict(stock)
    if @have@ - qty == 0:
        @new@.pop(sku, None)
    else:
        @new@[sku] = @have@ - qty
    return @new@
''', '''
def remove_stock(stock, sku, qty):
    # never below zero: a sku that reaches zero is dropped
    @have@ = stock.get(sku, 0)
    if @have@ < qty:
        raise OutOfStock(sku)
    @new@ = dict(stock)
    @new@[sku] = @have@ - qty
    if not @new@[sku]:
        @new@.pop(sku)
    return @new@
'''],
    "reorder_list": ['''
def reorder_list(stock, thresholds, default=5):
    """Sorted SKUs at or below their reorder threshold (`default` for SKUs without one)."""
    @out@ = []
    for @s@ in set(stock).union(thresholds):
        if thresholds.get(@s@, default) >= stock.get(@s@, 0):
            @out@.append(@s@)
    @out@.sort()
    return @out@
''', '''
def reorder_list(stock, thresholds, default=5):
    @keys@ = {*stock, *thresholds}
    return sorted(filter(lambda @s@: stock.get(@s@, 0) <= thresholds.get(@s@, default), @keys@))
''', '''
def reorder_list(stock, thresholds, default=5):
    # a SKU without its own threshold uses `default`
    @lim@ = {@s@: thresholds.get(@s@, default) for @s@ in set(stock) | set(thresholds)}
    return sorted(@s@ for @s@, @t@ in @lim@.items() if @t@ >= stock.get(@s@, 0))
'''],
    "stock_value": ['''
def stock_value(stock, prices):
    """Total value of the stock at the given prices (unknown prices count as 0), rounded to cents."""
    @tot@ = sum([@q@ * prices.get(@s@, 0.0) for @s@, @q@ in stock.items()])
    return round(@tot@, 2)
''', '''
def stock_value(stock, prices):
    return round(sum(map(lambda @kv@: @kv@[1] * prices.get(@kv@[0], 0.0), stock.items())), ndigits=2)
''', '''
def stock_value(stock, prices):
    # prices missing from the list are worth nothing
    @vals@ = (@q@ * prices.get(@s@, 0.0) for @s@, @q@ in stock.items())
    return round(sum(@vals@, 0), 2)
'''],
}

_INV_POOLS = {"new": ["updated", "result", "fresh", "copied", "after_add"],
              "cur": ["current", "before", "prev", "existing"],
              "bad": ["invalid", "not_positive", "too_small"],
              "have": ["on_hand", "available", "level", "held"],
              "left": ["remaining", "rest", "balance"],
              "out": ["due", "low", "picked", "needs"],
              "s": ["code", "item", "key", "k"],
              "t": ["limit", "bar", "cap", "floor"],
              "lim": ["limits", "bars", "per_sku"],
              "keys": ["every", "all_skus", "known", "names"],
              "tot": ["total", "acc", "value", "amount"],
              "q": ["n", "count", "units", "amt"],
              "kv": ["pair", "entry", "row", "kv"],
              "vals": ["parts", "terms", "values", "each"]}

_NAN = float("nan")
_INV_PROBES = [
    ("add_stock", ({}, "A", 2)), ("add_stock", ({"A": 1, "B": 2}, "A", 3)), ("add_stock", ({"A": 1}, "C", 1.5)),
    ("add_stock", ({}, "A", 0)), ("add_stock", ({}, "A", -1)), ("add_stock", ({"A": 1}, "A", _NAN)),
    ("add_stock", ({"B": 1}, "A", True)), ("add_stock", (None, "A", 0)), ("add_stock", (None, "A", 1)),
    ("add_stock", ({"A": 1}, "A", None)), ("add_stock", ({"A": 1}, ["x"], 1)), ("add_stock", ({"A": 1.0}, "A", -0.0)),
    ("remove_stock", ({"A": 3}, "A", 1)), ("remove_stock", ({"A": 3, "B": 1}, "A", 3)),
    ("remove_stock", ({"A": 1}, "A", 2)), ("remove_stock", ({}, "A", 0)), ("remove_stock", ({}, "A", -2)),
    ("remove_stock", ({"A": 1.5, "B": 2}, "A", 0.5)), ("remove_stock", ({"A": 1}, "A", _NAN)),
    ("remove_stock", ({"A": _NAN}, "A", 1)), ("remove_stock", ({"A": 2}, "B", 1)), ("remove_stock", ({"A": 2}, "A", None)),
    ("reorder_list", ({"A": 5, "B": 6, "C": 1}, {"C": 1})), ("reorder_list", ({"A": 2}, {"A": 1, "D": 0})),
    ("reorder_list", ({}, {})), ("reorder_list", ({"A": 1}, {}, 0)), ("reorder_list", ({"A": _NAN}, {})),
    ("reorder_list", ({"A": 1}, {"A": _NAN})), ("reorder_list", ({"b": 1, "a": 1, "c": 9}, {}, 3)),
    ("reorder_list", ({"A": 5}, {}, 5.0)), ("reorder_list", ({"A": None}, {})),
    ("stock_value", ({"A": 3, "B": 1}, {"A": 0.35, "B": 2.0})), ("stock_value", ({"Z": 4}, {})),
    ("stock_value", ({}, {})), ("stock_value", ({"A": 1, "B": 1, "C": 1}, {"A": 0.1, "B": 0.2, "C": 0.3})),
    ("stock_value", ({"A": 7}, {"A": 1.005})), ("stock_value", ({"A": 2, "B": 3}, {"A": 1, "B": 2})),
    ("stock_value", ({"A": "x"}, {"A": 1.0})),
]
# one-site equivalent edits, one per mutant (by its index in _INV_MUTANTS): the same place, the same size, the same
# line layout as the mutant, only right; a test that fails on any small change of the text fails on these too
_INV_SITE_EDITS = [
    ("    if qty <= 0:\n", "    if 0 >= qty:\n"),
    ("    if qty > have:", "    if have < qty:"),
    ("    if new[sku] == 0:", "    if not new[sku]:"),
    ("stock.get(s, 0) <= thresholds.get(s, default)", "thresholds.get(s, default) >= stock.get(s, 0)"),
    ("thresholds.get(s, default)", "(thresholds[s] if s in thresholds else default)"),
    ("for s, q in stock.items()), 2)", "for s, q in stock.items()), ndigits=2)"),
    ("    new = dict(stock)\n    new[sku] = new.get(sku, 0) + qty", "    new = dict(stock, **{})\n    new[sku] = new.get(sku, 0) + qty"),
]


def _inv_equivalents(seed: int, mutants: list[int]) -> list[str]:
    """The hidden equivalents of inventory.py for the task of `seed` (its own rng: the workspace and the rest of the
    task do not change) whose mutants are _INV_MUTANTS[i] for i in `mutants`: one whole rewrite (every definition
    replaced by an alternative, reordered, relaid) and the one-site edits of two of those mutants' places; each is
    checked."""
    import random

    rng = random.Random(f"tests_that_catch_bugs:equivalents:{seed}")
    whole = _rewrite(_INV, _INV_HEADERS, _INV_ALTS, {n: rng.randrange(len(a)) for n, a in _INV_ALTS.items()},
                     _INV_POOLS, rng)
    _check_equivalent("inventory", _INV, whole, _INV_TESTS, 7, _INV_PROBES, [old for old, _ in _INV_MUTANTS])
    out = [whole]
    for i in sorted(rng.sample(mutants, 2)):
        find, repl = _INV_SITE_EDITS[i]
        assert _INV.count(find) == 1
        src = _INV.replace(find, repl)
        _check_equivalent("inventory", _INV, src, _INV_TESTS, 7, _INV_PROBES, [_INV_MUTANTS[i][0]], whole=False)
        out.append(src)
    return out


@functools.cache
def _inventory_selfcheck() -> bool:
    assert run_tests("inventory", _INV, _INV_TESTS) == (7, 0)
    for old, new in _INV_MUTANTS:
        assert old in _INV and run_tests("inventory", _INV.replace(old, new, 1), _INV_TESTS)[1] > 0, old
    return True


@family("tests_that_catch_bugs", CAT, "test writing and validation", ["read", "write", "run tests", "verify"],
        ["py", "json"], "Write a unit-test suite for an untested module; graded by running it against hidden mutants "
        "of the module.", difficulty=4)
def tests_that_catch_bugs(ctx: Ctx) -> None:
    rng = ctx.rng
    muts = rng.sample(_INV_MUTANTS, 4)
    mut_ids = [_INV_MUTANTS.index(m) for m in muts]
    srcs = []
    for old, new in muts:
        assert old in _INV
        srcs.append(_INV.replace(old, new, 1))
    _inventory_selfcheck()
    funcs = ["add_stock", "remove_stock", "reorder_list", "stock_value"]
    ctx.file("inventory.py", _INV)
    ctx.file("app.py", "import inventory\n\nif __name__ == '__main__':\n    print(inventory.stock_value({'A': 2}, "
                       "{'A': 1.5}))\n")
    ctx.file("CONTRIBUTING.md", "Tests live in tests/, use plain asserts, run with `python3 -m pytest -q`.\n")
    ctx.distractors(1)
    trel, rep = "tests/test_inventory.py", "output/test_summary.json"
    ctx.output(rep)
    ctx.ask(
        f"inventory.py has no tests. Please write {trel} (plain asserts, `import inventory`) that pins down the "
        "documented behaviour of every public function, including edge cases and error cases, so that a "
        "regression in any of them makes a test fail. All tests must pass on the current code. Then write "
        f"{rep} with test_functions (how many test functions the file has) and functions_covered (the public "
        "function names your tests call, sorted).")
    ctx.expect("mutants", srcs)
    ctx.expect("orig", _INV)
    ctx.expect("equivs", _inv_equivalents(ctx.seed, mut_ids))
    ctx.expect("funcs", funcs)
    _add_runtime(ctx)
    ctx.grade.helper(_RUNS_HELPER)
    ctx.grade.helper(
        "def _ntests(src):\n"
        "    import ast as _ast\n"
        "    return sum(1 for n in _ast.parse(src).body if isinstance(n, _ast.FunctionDef) and n.name.startswith('test'))\n"
        "def _green(ws, test_src):\n"
        "    # the suite passes on the original and on every hidden rewrite of it (a suite pinning the module's\n"
        "    # text instead of its behaviour fails on a rewrite); the rewrites run only when the original passes\n"
        "    return all(_runs(ws, 'inventory', m, test_src)[1] == 0 for m in [E['orig']] + E['equivs'])\n")
    # The kill credit is the substantive check: a suite that kills no mutant earns nothing for passing or for its
    # summary (support checks), and mutants count only for a suite that passes on the original and its rewrites.
    ctx.check("passes_on_original", f"_green(ws, T({trel!r})) and _ntests(T({trel!r})) >= 3", support=True)
    ctx.check("mutants_killed", f"frac(sum(1 for m in E['mutants'] if _runs(ws, 'inventory', m, T({trel!r}))[1] > 0), "
                                f"len(E['mutants'])) if _green(ws, T({trel!r})) else 0.0")
    ctx.check("summary_count", f"to_num(J({rep!r})['test_functions']) == _ntests(T({trel!r}))", support=True)
    ctx.check("summary_covered", f"list_equal(J({rep!r})['functions_covered'], E['funcs']) and "
                                 f"all(f in T({trel!r}) for f in E['funcs'])", support=True)
    ctx.read("CONTRIBUTING.md")
    ctx.read("inventory.py")
    ctx.write(trel, _INV_TESTS)
    ctx.exec("PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -3")
    ctx.write(rep, json_text({"test_functions": 7, "functions_covered": funcs}))


__all__ = ["CAT", "PYRUN", "run_tests"]
