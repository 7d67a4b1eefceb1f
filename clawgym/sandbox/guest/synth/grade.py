"""Grade driver (runs inside a sandbox; stdlib only): every variant (no-op, scaffold, oracle x2, mutations)
of every task is written out and graded in this process, scored with the verifier runtime's own reduction
(clawgym.verify.scoring.mean_of_checks).

job: {"tasks": [{"code", "timeout", "files": {path: base64}, "variants": {name: {path: base64 | None}}}],
"forkserver": bool, "memo": bool}. Result per task: {variant: {"score", "subs"} | {"score": 0.0, "error"}}.

`memo` (default on): a check that runs the agent's code in a child python (clawgym.synth.families.software's
`_agent_call(op, *args)`: the child sees nothing but op and args, in an empty temp dir) gets the result of an
identical earlier call (same op, args and timeout) of the same task instead of a new child: the variants of one
task mostly hand the child the same sources (a mutation or exploit changes a report, not the module). Every
result is still the JSON a child returned, handed over as a fresh copy. `oracle_2` never shares: it exists to
catch a check that is not deterministic, so its calls all run again (memoised only within itself). The memo
lives here, in the gates' driver, not in the check code: a rollout's grading (clawgym.verify) is unchanged.
"""

import base64
import json
import os
import signal
import sys

from clawgym.sandbox.guest.synth import forkserver
from clawgym.sandbox.guest.synth.common import Discard
from clawgym.verify.scoring import mean_of_checks


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout()


def _write_tree(d: str, ws: dict) -> None:
    made = set()
    for p, data in ws.items():
        q = os.path.join(d, p)
        qd = os.path.dirname(q)
        if qd not in made:
            os.makedirs(qd, exist_ok=True)
            made.add(qd)
        with open(q, "wb") as fh:
            fh.write(data)
    os.makedirs(d, exist_ok=True)


STATS = {"agent_calls": 0, "agent_calls_shared": 0, "agent_calls_direct": 0}

_PRIVATE = ("oracle_2",)  # variants that never share results with the others (the determinism gate)


def _memo(real, memo: dict):
    """`_agent_call` answering an identical earlier call (op, args, timeout) from `memo`."""

    def _agent_call(op, *args, timeout=60):
        try:
            key = json.dumps([op, list(args), timeout])
        except (TypeError, ValueError):  # the real call fails on these alike
            return real(op, *args, timeout=timeout)
        if key in memo:
            STATS["agent_calls_shared"] += 1
            return json.loads(memo[key])
        STATS["agent_calls"] += 1
        r = real(op, *args, timeout=timeout)
        try:
            memo[key] = json.dumps(r)
        except (TypeError, ValueError):
            return r
        return json.loads(memo[key])

    return _agent_call


def _exchange(wfd: int, rfd: int, data: bytes, timeout: float):
    """Write `data` to wfd (then close it) while reading rfd to EOF, as Popen.communicate: the bytes read, or b""
    past `timeout` seconds."""
    import select
    import time
    deadline = time.monotonic() + timeout
    os.set_blocking(wfd, False)
    chunks: list[bytes] = []
    off = 0
    if not data:
        os.close(wfd)
        wfd = -1
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return b""
            r, w, _ = select.select([rfd], [wfd] if wfd >= 0 else [], [], left)
            if w:
                try:
                    off += os.write(wfd, data[off:off + 65536])
                except (BrokenPipeError, BlockingIOError, OSError) as e:
                    if isinstance(e, BlockingIOError):
                        continue
                    off = len(data)
                if off >= len(data):
                    os.close(wfd)
                    wfd = -1
            if r:
                b = os.read(rfd, 65536)
                if not b:
                    return b"".join(chunks)
                chunks.append(b)
    finally:
        if wfd >= 0:
            os.close(wfd)
        os.close(rfd)


_CODE: dict = {}


def _direct(real, src: str):
    """`_agent_call` of the check code (clawgym.synth.families.software) with its child forked straight from this
    process as the fork server would serve it (forkserver.spawn_c: the same child, no shim, no /proc hand-over):
    same job on stdin, same one marked JSON line read back as data, same verdict (None on a non-zero exit, a
    timeout or not exactly one such line)."""
    import shutil
    import tempfile
    if src not in _CODE:
        if len(_CODE) > 32:
            _CODE.clear()
        _CODE[src] = forkserver.precompile(src)
    code = _CODE[src]

    def _agent_call(op, *args, timeout=60):
        try:
            data = json.dumps({"op": op, "args": list(args)}).encode("utf-8", "surrogateescape")
        except Exception:
            return real(op, *args, timeout=timeout)  # fails there alike
        d = tempfile.mkdtemp(prefix="clawgym-agent-")
        try:
            r0, w0 = os.pipe()
            r1, w1 = os.pipe()
            dn = os.open(os.devnull, os.O_RDWR)
            try:
                pid = forkserver.spawn_c(src, code, d, [r0, w1, dn])
            except BaseException:
                for fd in (r0, w0, r1, w1, dn):
                    os.close(fd)
                raise
            try:
                raw = _exchange(w0, r1, data, timeout)
            finally:
                try:
                    os.killpg(pid, signal.SIGKILL)  # whatever the agent's code left running in its group
                except OSError:
                    pass
                _, st = os.waitpid(pid, 0)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        STATS["agent_calls_direct"] += 1
        mark = "__CLAWGYM_AGENT_CALL__"
        lines = [ln for ln in raw.decode("utf-8", "replace").splitlines() if ln.startswith(mark)]
        if os.waitstatus_to_exitcode(st) != 0 or len(lines) != 1:
            return None
        try:
            return json.loads(lines[0][len(mark):])
        except ValueError:
            return None

    return _agent_call


def run(job: dict, root: str, base_modules=None) -> list:
    # grade code that runs `sys.executable` (a CLI family) gets it served by the fork server while grade()
    # runs: the same run as a real interpreter's, without its start-up cost
    exe = sys.executable
    direct = False
    if job.get("forkserver", True) and any("executable" in t["code"] for t in job["tasks"]):
        # a check that runs the agent's code in a child python (`_agent_call`) imports pytest there when the image
        # has it, as the real interpreter would: pre-imported once here, not once per call (~70 ms each)
        heavy = any("_agent_call" in t["code"] for t in job["tasks"])
        try:
            forkserver.start(root, 120.0, heavy=heavy, base_modules=base_modules)
            exe = os.path.join(root, "bin", "python3")
            direct = job.get("direct", True)
        except Exception as e:
            sys.stderr.write("forkserver disabled: %r\n" % (e,))
    junk = Discard()
    signal.signal(signal.SIGALRM, _alarm)
    out = []
    n = 0
    for t in job["tasks"]:
        files = {p: base64.b64decode(b) for p, b in t["files"].items()}
        scores = {}
        try:
            code, cerr = compile(t["code"], "check.py", "exec"), ""
        except BaseException as e:
            code, cerr = None, "%s: %s" % (type(e).__name__, e)
        shared: dict = {}
        make_memo: dict = {}
        for vname, ov in t["variants"].items():
            n += 1
            d = os.path.join(root, "g%d" % n)
            ws = dict(files)
            for p, b in ov.items():
                if b is None:
                    ws.pop(p, None)
                else:
                    ws[p] = base64.b64decode(b)
            _write_tree(d, ws)
            ns: dict = {"__name__": "clawgym_check", "__file__": "check.py"}
            cwd = os.getcwd()
            try:
                os.chdir(d)
                signal.alarm(int(t.get("timeout", 120)))
                if code is None:
                    raise SyntaxError(cerr)
                sys.executable = exe
                exec(code, ns)
                if "_ISO_OFF" in ns:  # the runs' isolation is for an agent's code; these variants are clawgym's own
                    ns["_ISO_OFF"] = True
                if isinstance(ns.get("_MAKE_MEMO"), dict) and job.get("memo", True):
                    # a check's own memo of its runs, keyed by what they copy: shared by the task's variants as
                    # `_agent_call`'s is (oracle_2 runs everything again)
                    ns["_MAKE_MEMO"] = {} if vname in _PRIVATE else make_memo
                if callable(ns.get("_agent_call")):
                    if direct and isinstance(ns.get("_AGENT_CHILD"), str):
                        ns["_agent_call"] = _direct(ns["_agent_call"], ns["_AGENT_CHILD"])
                    if job.get("memo", True):
                        ns["_agent_call"] = _memo(ns["_agent_call"], {} if vname in _PRIVATE else shared)
                s, subs = mean_of_checks(ns["grade"]([], d))
                scores[vname] = {"score": min(1.0, max(0.0, s)), "subs": subs}  # clamped like verify_task
            except BaseException as e:
                scores[vname] = {"score": 0.0, "error": "%s: %s" % (type(e).__name__, str(e)[-300:])}
            finally:
                signal.alarm(0)
                sys.executable = forkserver.REAL_EXECUTABLE
                os.chdir(cwd)
                junk.add(d, sum(len(x) for x in ws.values()))
        out.append(scores)
    return out
