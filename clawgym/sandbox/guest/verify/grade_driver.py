"""Runs inside the sandbox as `python3 -P -c <this file>`: the verifier driver of `grade`-kind tasks.

stdin: JSON {"code", "transcript", "workspace", "nonce"}. Before any task code runs, the real stdout is
kept on a private descriptor and fd 1 is pointed at stderr, so whatever the check code (or anything it
calls) prints cannot pose as the result. The result goes to the private descriptor as one line:
MARK + nonce + JSON. Exit 3 when grade() raises. The nonce and the private descriptor live in this function's
frame only, never in `__main__`'s globals; the process is non-dumpable (the import guard), so code the check runs
in another process cannot read them from /proc.

No code of the agent's runs in this process. A module the check imports from the workspace (``sys.path.insert(0,
workspace); import calc``) is a stand-in here: each call of one of its functions runs in a child python (the agent's
module imported there, the call made, its value sent back as JSON, a builtin exception raised again here by name)
and a plain value of the module comes back as JSON data. A workspace file loaded any other way through the import
system (a file spec's loader, a cached .pyc) is refused. The child holds nothing of the grader's: no nonce, no
descriptor but its pipes, no expected value; the clean room has sealed the workspace, so it cannot change a file a
later check reads. Each call is a fresh process: module state does not carry from one call to the next.
"""

_CHILD = r'''
import builtins, importlib, json, os, sys
def _main():
    job = json.loads(sys.stdin.read())
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.path[:0] = job["path"]
    sys.pycache_prefix = os.getcwd()  # a fresh folder: a .pyc the agent left beside its source is never read
    res = None
    try:
        obj = importlib.import_module(job["module"])
        if job["op"] == "names":
            res = {"names": {k: ("call" if callable(v) else "value") for k, v in vars(obj).items()
                             if not k.startswith("__")}}
        else:
            for part in job["attr"].split("."):
                obj = getattr(obj, part)
            if job["op"] == "call":
                obj = obj(*job["args"], **job["kwargs"])
            res = {"value": json.loads(json.dumps(obj))}
    except BaseException as e:
        name = type(e).__name__
        res = {"raised": name if isinstance(getattr(builtins, name, None), type) else "RuntimeError",
               "message": str(e)[:500]}
    out.write("\n__CLAWGYM_AGENT_CALL__" + json.dumps(res) + "\n")
    out.flush()
    os._exit(0)
_main()
'''


_STAND_IN = "clawgym-agent-module"  # a stand-in's spec origin: what marks its submodules as stand-ins too


def _agent_process(job, timeout):
    """Run one job in a fresh child python (_CHILD), in a fresh empty folder -> (its stdout, its exit status). What
    the agent's code left running in the child's process group is killed, and the folder removed, before it returns."""
    # subprocess, signal, tempfile and shutil are imported by the first stand-in call, not at the driver's start: most
    # checks import no workspace module, and these imports (with importlib.abc, which a duck-typed loader does not
    # need) were a third of every grade's CPU. Importing them late is as safe as early: a top-level name of the
    # interpreter's own directories comes from there whatever sys.path holds by then (the import guard,
    # sitecustomize.py), and no code of the agent's runs in this process to have changed anything else.
    import json
    import os
    import signal
    import subprocess
    import sys
    import tempfile

    d = tempfile.mkdtemp(prefix="clawgym-agent-")
    try:
        p = subprocess.Popen([sys.executable, "-P", "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, cwd=d, close_fds=True, start_new_session=True)
        try:
            raw, _ = p.communicate(json.dumps(job).encode("utf-8", "surrogateescape"), timeout=timeout)
        except subprocess.TimeoutExpired:
            raw = b""
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # what the agent's code left running in its group
            except OSError:
                pass
            p.wait()
    finally:
        import shutil

        shutil.rmtree(d, ignore_errors=True)
    return raw, p.returncode


def _agent_result(raw, returncode):
    """A child's output -> the result dict on its one marked line. A builtin exception the child reported is raised
    again here by name (any other as RuntimeError); a child that exited badly or wrote no single well-formed result
    line gave no result, which is a RuntimeError."""
    import builtins
    import json

    mark = "__CLAWGYM_AGENT_CALL__"
    lines = [ln for ln in raw.decode("utf-8", "replace").splitlines() if ln.startswith(mark)]
    res = None
    if returncode == 0 and len(lines) == 1:
        try:
            res = json.loads(lines[0][len(mark):])
        except ValueError:
            res = None
    if not isinstance(res, dict):
        raise RuntimeError("the agent's code gave no result")
    if "raised" in res:
        exc = getattr(builtins, str(res["raised"]), None)
        if not (isinstance(exc, type) and issubclass(exc, Exception)):
            exc = RuntimeError
        raise exc(str(res.get("message", ""))[:500])
    return res


def _agent_call(job, timeout=60):
    """One job of a stand-in (its module's names, a call, a value) done by a fresh child python -> its result."""
    return _agent_result(*_agent_process(job, timeout))


def _stand_in(name, search):
    """The stand-in of workspace module `name` (found on `search`): a child lists the module's names; each callable
    becomes a function whose every call runs in a child, and any other name is read from a child as JSON data."""
    import types

    path = [p for p in search if isinstance(p, str)]
    names = _agent_call({"op": "names", "module": name, "path": path}).get("names")
    if not isinstance(names, dict):
        raise ImportError(f"workspace module {name!r}: no names")
    mod = types.ModuleType(name, f"the workspace module {name!r} (its code runs in a child process)")
    mod.__path__ = []  # submodules are stand-ins too (_AgentModules)

    def function(attr):
        def call(*args, **kwargs):
            job = {"op": "call", "module": name, "path": path, "attr": attr, "args": list(args),
                   "kwargs": kwargs}
            return _agent_call(job)["value"]
        call.__name__ = attr
        return call

    for k, kind in names.items():
        if not isinstance(k, str) or kind not in ("call", "value"):
            continue
        if kind == "call":
            setattr(mod, k, function(k))

    def getattr_(attr):
        if names.get(attr) != "value":
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        return _agent_call({"op": "value", "module": name, "path": path, "attr": attr})["value"]

    mod.__getattr__ = getattr_
    return mod


class _Loader:  # the loader protocol (create_module / exec_module); importlib.abc's base adds nothing
    def __init__(self, search):
        self.search = search

    def create_module(self, spec):
        return _stand_in(spec.name, self.search)

    def exec_module(self, module):
        return None


def _stand_in_spec(name, where, package):
    import importlib.machinery as machinery

    spec = machinery.ModuleSpec(name, _Loader(where), origin=_STAND_IN, is_package=package)
    return spec


def _guard_file_loaders(inside):
    """The file loaders refuse a file for which `inside` holds: a workspace file loaded here any way but as a
    stand-in (a file spec's loader, a cached .pyc) would run the agent's code in the grader's process."""
    import importlib.machinery as machinery

    for cls in (machinery.SourceFileLoader, machinery.SourcelessFileLoader, machinery.ExtensionFileLoader):
        orig = cls.exec_module

        def guarded(self, module, _orig=orig):
            if inside(getattr(self, "path", "")):
                raise ImportError(f"{self.path}: the agent's code does not run in the grader's process")
            return _orig(self, module)

        cls.exec_module = guarded


def _agent_modules(workspace):
    """A meta-path finder that answers imports of workspace modules with stand-ins (see the module docstring), and
    a guard on the file loaders against any other way of loading a workspace file here."""
    import importlib.machinery as machinery
    import os
    import sys

    root = os.path.realpath(workspace)

    def inside(path):
        try:
            p = os.path.realpath(path)
        except (TypeError, ValueError, OSError):
            return False
        return p == root or p.startswith(root + os.sep)

    class _AgentModules:
        """After the import guard (a name of the trusted library directories never reaches it), before the path
        finder: a module found in the workspace, or a submodule of a stand-in, is a stand-in."""

        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if "." in name:
                parent = sys.modules.get(name.rpartition(".")[0])
                ps = getattr(parent, "__spec__", None)
                if ps is None or ps.origin != _STAND_IN:
                    return None
                return _stand_in_spec(name, ps.loader.search, True)
            if path is not None:
                return None
            spec = machinery.PathFinder.find_spec(name, sys.path)
            if spec is None:
                return None
            locs = list(spec.submodule_search_locations or [])
            file = spec.origin if spec.origin and spec.has_location else None
            anchor = file or (locs[0] if locs else "")
            if not anchor or not inside(anchor):
                return None
            # the folder that holds the module (or its package) goes on the child's sys.path
            return _stand_in_spec(name, [os.path.dirname(locs[0] if locs else file)], bool(locs))

        @classmethod
        def invalidate_caches(cls):
            pass

    at = next((i for i, f in enumerate(sys.meta_path) if f is machinery.PathFinder), len(sys.meta_path))
    sys.meta_path.insert(at, _AgentModules)
    _guard_file_loaders(inside)


def _main():
    import json
    import os
    import sys

    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.set_inheritable(out.fileno(), False)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    p = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    nonce = p.pop("nonce", "")
    _agent_modules(p["workspace"])
    ns = {"__name__": "clawgym_check", "__file__": "check.py"}
    try:
        exec(compile(p.pop("code"), "check.py", "exec"), ns)
        g = ns.get("grade")
        if not callable(g):
            raise NameError("check code defines no grade(transcript, workspace_path)")
        r = g(p["transcript"], p["workspace"])
        line = json.dumps(r, default=repr)
    except BaseException:
        import traceback  # only when grade() failed: its import is a tenth of a grade's CPU

        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        os._exit(3)
    out.write("\n__CLAWGYM_GRADE_RESULT__" + nonce + line + "\n")
    out.flush()
    sys.stderr.flush()
    os._exit(0)


_main()
