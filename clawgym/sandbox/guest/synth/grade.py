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


STATS = {"agent_calls": 0, "agent_calls_shared": 0}

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


def run(job: dict, root: str, base_modules=None) -> list:
    # grade code that runs `sys.executable` (a CLI family) gets it served by the fork server while grade()
    # runs: the same run as a real interpreter's, without its start-up cost
    exe = sys.executable
    if job.get("forkserver", True) and any("executable" in t["code"] for t in job["tasks"]):
        # a check that runs the agent's code in a child python (`_agent_call`) imports pytest there when the image
        # has it, as the real interpreter would: pre-imported once here, not once per call (~70 ms each)
        heavy = any("_agent_call" in t["code"] for t in job["tasks"])
        try:
            forkserver.start(root, 120.0, heavy=heavy, base_modules=base_modules)
            exe = os.path.join(root, "bin", "python3")
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
            ns = {"__name__": "clawgym_check", "__file__": "check.py"}
            cwd = os.getcwd()
            try:
                os.chdir(d)
                signal.alarm(int(t.get("timeout", 120)))
                if code is None:
                    raise SyntaxError(cerr)
                sys.executable = exe
                exec(code, ns)
                if job.get("memo", True) and callable(ns.get("_agent_call")):
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
