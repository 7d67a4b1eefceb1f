"""Fork server (runs inside a sandbox; stdlib only): `python3 ...` started by a reference's exec (replay
driver) or by grade code through `sys.executable` (grade driver) is served by fork()ing this pre-imported
process instead of starting a new interpreter.

A `python3` shim first on PATH hands its pid to the server over a FIFO; the server reads the shim's argv,
environment, cwd and stdin/stdout/stderr from /proc/<pid>, forks a child that becomes that python3 run, and
answers the exit status. Anything it cannot reproduce exactly (other interpreter options, stdout/stderr
redirected to a regular file, a changed PYTHON*/locale environment, a workspace module named like a
pre-imported one, no /proc) is answered "F" and the shim execs the real interpreter.
"""

import os
import signal
import stat
import sys
import threading

_SHADOW: frozenset[str] = frozenset()  # top-level module names a program's own files would have shadowed


def _preimport(heavy, base_modules):
    global _SHADOW
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
        inspect.getmodule(_preimport.__code__)
        inspect._filesbymodname.pop("__main__", None)  # the driver's own entry: a child's __main__ is another
        for k in [k for k, v in inspect.modulesbyfile.items() if v == "__main__"]:
            del inspect.modulesbyfile[k]
    except Exception:
        pass
    # top-level names a program's own files would have shadowed in a real interpreter
    _SHADOW = frozenset(m.split(".")[0] for m in list(sys.modules) if m not in base_modules)
    try:
        import gc
        gc.collect()
        gc.freeze()  # children do not touch (copy) the pre-imported objects' pages on their first collection
    except Exception:
        pass


_MODEXT = (".py", ".pyc", ".pyw", ".so", ".pth")


def _shadowed(dirs, limit=2000):
    """True when a file or directory under `dirs` is named like a pre-imported module (or the tree is too big to
    tell): a real interpreter could import the program's own module there, so such a run is not served."""
    n = 0
    for top in dirs:
        for _dp, dns, fns in os.walk(top):
            dns[:] = [d for d in dns if d != "__pycache__"]
            n += len(dns) + len(fns)
            if n > limit:
                return True
            for d in dns:
                if d in _SHADOW:
                    return True
            for f in fns:
                stem, dot, ext = f.partition(".")
                if dot and stem in _SHADOW and ("." + ext.rsplit(".", 1)[-1]) in _MODEXT:
                    return True
    return False


_ENV_KEYS = ("PYTHON", "LC_", "LANG")

_KEEP = [sys.stdin, sys.stdout, sys.stderr]  # replaced in a child: must not be finalized (closing fds 0-2)

_STDIO = (getattr(sys.stdout, "encoding", None) or "utf-8", getattr(sys.stdout, "errors", None) or "strict")


def _envdiff(env):
    return any(k.startswith(_ENV_KEYS) and env.get(k) != os.environ.get(k) for k in set(env) | set(os.environ))


def _open_fds(pid, which=(0, 1, 2)):
    fds = []
    try:
        for n in which:
            path = "/proc/%d/fd/%d" % (pid, n)
            target = os.readlink(path)
            if target.startswith(("socket:", "anon_inode:")):
                raise OSError("unsupported fd " + target)
            info = dict(l.split(":", 1) for l in open("/proc/%d/fdinfo/%d" % (pid, n)).read().splitlines() if ":" in l)
            flags = int(info["flags"].strip(), 8)
            pos = int(info["pos"].strip())
            st = os.stat(path)
            if n > 0 and stat.S_ISREG(st.st_mode):
                raise OSError("output to a regular file")  # its shared offset cannot be reproduced
            fd = os.open(path, (flags & 3) | (flags & os.O_APPEND) | os.O_CLOEXEC)
            fds.append(fd)
            if stat.S_ISREG(st.st_mode):
                os.lseek(fd, pos, 0)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def _parse(args):
    """(mode, what, rest, safe_path) of a python3 command line; mode None where it is not served. `-P` (safe_path:
    nothing prepended to sys.path) is the one option served: the grader runs the agent's code as `python3 -P -c`."""
    safe = False
    while args and args[0] == "-P":
        safe, args = True, args[1:]
    if not args or args[0] == "-":
        return "stdin", None, args[1:], safe
    if args[0] == "-c" and len(args) >= 2:
        return "c", args[1], args[2:], safe
    if args[0] == "-m" and len(args) >= 2:
        return "m", args[1], args[2:], safe
    if args[0].startswith("-"):
        return None, None, None, safe
    return "script", args[0], args[1:], safe


def _close_inherited():
    """Close every descriptor above 2 the fork inherited from the serving process. A real python3 started by the
    shim holds none of them, and one of them can be the write end of the very pipe this run reads its stdin from
    (a caller's `Popen(stdin=PIPE)` still open in the serving process at fork time): its read would never end."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        names = [str(fd) for fd in range(3, 1024)]
    for name in names:
        fd = int(name)
        if fd > 2:
            try:
                os.close(fd)
            except OSError:
                pass


def _path0(entry, safe_path):
    """sys.path[0] is the slot a real interpreter fills with the script's directory, the cwd or '' (the server's
    own holds the driver's directory); under -P that slot is not there at all."""
    if safe_path:
        del sys.path[0]
    else:
        sys.path[0] = entry


def _child(mode, what, rest, env, cwd, fds, timeout, shimdir, safe_path=False, code=None):
    import atexit
    import builtins
    import runpy
    import traceback
    import types
    rc = 0
    try:
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        _close_inherited()
        os.chdir(cwd)
        sys.executable = REAL_EXECUTABLE  # the grade driver points sys.executable at the shim while grade() runs
        env = dict(env)
        env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if p != shimdir)
        os.environ.clear()
        os.environ.update(env)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(max(1, int(timeout)))
        enc = _STDIO
        # the child's own streams, the __std*__ originals included (typeshed calls those Final: not so here)
        sys.stdin = sys.__stdin__ = open(0, encoding=enc[0], errors=enc[1], closefd=False)  # type: ignore[misc]
        sys.stdout = sys.__stdout__ = open(1, "w", encoding=enc[0], errors=enc[1], closefd=False)  # type: ignore[misc]
        sys.stderr = sys.__stderr__ = open(  # type: ignore[misc]
            2, "w", encoding=enc[0], errors="backslashreplace", closefd=False, buffering=1)
        try:
            if mode == "m":
                sys.argv = ["-m"] + rest
                _path0(cwd, safe_path)
                try:
                    runpy._get_module_details(what)
                except ImportError as e:  # as the interpreter reports it
                    print("%s: %s" % (sys.executable, e), file=sys.stderr)
                    raise SystemExit(1) from None
                runpy.run_module(what, run_name="__main__", alter_sys=True)
            elif mode == "script":
                sys.argv = [what] + rest
                _path0(os.path.dirname(os.path.realpath(what)), safe_path)
                runpy.run_path(what, run_name="__main__")
            else:
                if mode == "stdin":
                    src, name, sys.argv = sys.stdin.read(), "<stdin>", ["-"] + rest
                else:
                    src, name, sys.argv = what, "<string>", ["-c"] + rest
                _path0("", safe_path)
                main = types.ModuleType("__main__")
                main.__dict__["__builtins__"] = builtins
                sys.modules["__main__"] = main
                exec(code if code is not None and mode == "c" else compile(src, name, "exec"), main.__dict__)
        except SystemExit as e:
            c = e.code
            if c is None:
                rc = 0
            elif isinstance(c, int):
                rc = c & 0xFF
            else:
                print(c, file=sys.stderr)
                rc = 1
        except BaseException as e:
            traceback.print_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None)
            rc = 1
        try:
            atexit._run_exitfuncs()
        except BaseException:
            pass
        for f in (sys.stdout, sys.stderr):
            try:
                if not f.closed:
                    f.flush()
            except BaseException:
                if rc == 0:
                    rc = 120
    except BaseException:
        rc = 1
    os._exit(rc)


SLOTS = 64


def _connect(path):
    """Open the shim's answer FIFO for writing. It succeeds once the shim waits on it, i.e. after its own fds
    0-2 are back from the temporary redirection of `echo ... >> req`."""
    import time
    for _ in range(20000):
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            time.sleep(0.0005)
    return None


def _answer(wfd, ans):
    try:
        os.write(wfd, (ans + "\n").encode())
    except OSError:
        pass
    os.close(wfd)


def _pidfd(pid):
    """A pidfd for pid (readable once it has exited); None when it is gone already, -1 without pidfd support."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except (OSError, AttributeError):
        return -1


def _gone(pid):
    try:
        return open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def _release(srv, pid, slot):
    """Free answer slot `slot` once its shim `pid` is gone: only then can no reader of the old request be left on
    the slot's FIFO (and this request will never open it again)."""
    import select
    import time
    pfd = _pidfd(pid)
    if pfd is not None and pfd >= 0:
        try:
            p = select.poll()
            p.register(pfd, select.POLLIN)
            p.poll()
        finally:
            os.close(pfd)
    elif pfd == -1:
        while not _gone(pid):
            time.sleep(0.002)
    try:
        os.unlink("%s/l.%d" % (srv, slot))
    except OSError:
        pass


def _wait(pid, wfd, srv, spid, slot):
    # The served child stands in for the shim's process: if the shim dies first (killed: `timeout`, a caller's
    # kill), the child is killed too, as the real python3 in its place would have been.
    import select
    sfd, cfd = _pidfd(spid), _pidfd(pid)
    try:
        if sfd is None:
            os.kill(pid, signal.SIGKILL)
        elif sfd >= 0 and cfd is not None and cfd >= 0:
            p = select.poll()
            p.register(sfd, select.POLLIN)
            p.register(cfd, select.POLLIN)
            if cfd not in {fd for fd, _ in p.poll()}:
                os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    finally:
        for fd in (sfd, cfd):
            if fd is not None and fd >= 0:
                os.close(fd)
    try:
        _, st = os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(st)
        rc = 128 - rc if rc < 0 else rc
    except OSError:
        rc = 1
    _answer(wfd, str(rc))
    _release(srv, spid, slot)


def _handle(line, srv, shimdir, timeout):
    pid, slot = (int(x) for x in line.split())
    if not 0 <= slot < SLOTS:
        return
    # The shim has sent its request and now blocks opening its answer FIFO, fds 0 and 2 untouched: read them
    # now. Its fd 1 was redirected for that `echo` and is read once connected; by then the shim's `read <&8`
    # may have redirected fd 0 (POSIX sh has no `read -u`).
    fds = []
    try:
        raw = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")[:-1]
        args = [os.fsdecode(a) for a in raw[2:]]  # sh <shim> args...
        env = dict(kv.split("=", 1)
                   for kv in (os.fsdecode(x) for x in open("/proc/%d/environ" % pid, "rb").read().split(b"\0"))
                   if "=" in kv)
        cwd = os.readlink("/proc/%d/cwd" % pid)
        mode, what, rest, safe_path = _parse(args)
        if mode is None or _envdiff(env):
            raise ValueError("not served")
        top = [cwd] if mode != "script" else [cwd, os.path.dirname(os.path.realpath(os.path.join(cwd, what)))]
        if _shadowed(top):
            raise ValueError("a workspace module shadows a pre-imported one")
        fds = _open_fds(pid, (0, 2))
    except Exception:
        fds = None
    wfd = _connect("%s/a.%d" % (srv, slot))
    try:
        if wfd is not None and fds is not None:
            fds[1:1] = _open_fds(pid, (1,))
    except Exception:
        for fd in fds:
            os.close(fd)
        fds = None
    if wfd is None or fds is None:
        if wfd is not None:
            _answer(wfd, "F")
        for fd in fds or ():
            os.close(fd)
        return threading.Thread(target=_release, args=(srv, pid, slot), daemon=True).start()
    child = os.fork()
    if child == 0:
        os.close(wfd)
        _child(mode, what, rest, env, cwd, fds, timeout, shimdir, safe_path)
    for fd in fds:
        os.close(fd)
    threading.Thread(target=_wait, args=(child, wfd, srv, pid, slot), daemon=True).start()


def _serve(srv, shimdir, timeout):
    f = open(os.open(srv + "/req", os.O_RDWR))
    for line in f:
        try:
            _handle(line.strip(), srv, shimdir, timeout)
        except Exception:
            pass


REAL_EXECUTABLE = sys.executable
SERVING: dict = {}  # once started: {"shimdir", "timeout"}


def precompile(src):
    """`src` compiled as a served `python3 -c src` run would compile it, or None where that compile would say more
    than the code (a warning, an error): such a run compiles it itself. Call it from the thread that grades (the
    warnings filters are process-wide)."""
    import warnings
    try:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            code = compile(src, "<string>", "exec")
    except BaseException:
        return None
    return None if rec else code


def spawn_c(src, code, cwd, fds, safe_path=True):
    """Fork a child that is the served run `python3 [-P] -c src` in its own session with stdin/stdout/stderr `fds`
    (closed here), exactly as a request through the shim would be served, without the shim: for a caller in this
    process that would otherwise start that run through the shim (the grade driver's `_agent_call`). The pid."""
    env = dict(os.environ)
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
        except OSError:
            pass
        _child("c", src, [], env, cwd, fds, SERVING["timeout"], SERVING["shimdir"], safe_path, code)
        os._exit(1)
    for fd in fds:
        os.close(fd)
    return pid


def start(root, timeout, heavy=True, base_modules=None):
    """Start serving; returns the environment whose PATH puts the `python3` shim first (the shim is at
    <root>/bin/python3). heavy: also pre-import pytest (for references that run it). base_modules: what a bare
    interpreter holds in sys.modules (taken first thing by the program, see clawgym.sandbox.guest.synth.launch);
    everything imported beyond it counts as pre-imported, i.e. shadowable by a program's own files."""
    import shutil
    real = shutil.which("python3")
    if not real or os.path.realpath(real) != os.path.realpath(sys.executable):
        raise RuntimeError("python3 on PATH is not this interpreter")
    if not os.access("/bin/sh", os.X_OK):
        raise RuntimeError("no /bin/sh")
    srv, shimdir = os.path.join(root, "fs"), os.path.join(root, "bin")
    os.makedirs(srv)
    os.makedirs(shimdir)
    os.mkfifo(srv + "/req")
    for i in range(SLOTS):  # answer FIFOs; a shim claims slot i by creating l.i (O_EXCL: `set -C`)
        os.mkfifo("%s/a.%d" % (srv, i))
    shim = os.path.join(shimdir, "python3")
    # POSIX sh, builtins only (no mkfifo process): claim a free slot, send "pid slot", wait for the exit status.
    # (`true`, not `:`: a failed redirection of a special builtin would end the shell.)
    # No free slot, or the answer F: exec the real interpreter.
    with open(shim, "w") as fh:
        fh.write('#!/bin/sh\nS=%s\nset -C\nfor i in %s; do\n'
                 '  if true 2>/dev/null >"$S/l.$i"; then\n'
                 '    echo "$$ $i" >> "$S/req"\n    exec 8<"$S/a.$i"\n    read -r rc <&8\n    exec 8<&-\n'
                 '    case "$rc" in F|"") ;; *) exit "$rc";; esac\n    break\n  fi\ndone\nexec %s "$@"\n'
                 % (srv, " ".join(str(i) for i in range(SLOTS)), real))
    os.chmod(shim, 0o755)
    _preimport(heavy, frozenset(sys.modules) if base_modules is None else base_modules)
    threading.Thread(target=_serve, args=(srv, shimdir, timeout), daemon=True).start()
    SERVING.update(shimdir=shimdir, timeout=timeout)
    env = dict(os.environ)
    env["PATH"] = shimdir + ":" + env.get("PATH", "")
    return env
