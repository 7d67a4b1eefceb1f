"""Runs inside the sandbox as `python3 -P -c <this file>`: the verifier driver of `grade`-kind tasks.

stdin: JSON {"code", "transcript", "workspace", "nonce"}. Before any task code runs, the real stdout is
kept on a private descriptor and fd 1 is pointed at stderr, so whatever the check code (or anything it
calls) prints cannot pose as the result. The result goes to the private descriptor as one line:
MARK + nonce + JSON. Exit 3 when grade() raises. The nonce and the private descriptor live in this function's
frame only, never in `__main__`'s globals; the process is non-dumpable (the import guard), so agent code the
check runs in another process cannot read them from /proc. Agent code the check *imports* runs in this process
by the check's design and is the documented residual (docs/NOTES.md, "Trustworthy scores").
"""


def _main():
    import json
    import os
    import sys
    import traceback

    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.set_inheritable(out.fileno(), False)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    p = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    nonce = p.pop("nonce", "")
    ns = {"__name__": "clawgym_check", "__file__": "check.py"}
    try:
        exec(compile(p.pop("code"), "check.py", "exec"), ns)
        g = ns.get("grade")
        if not callable(g):
            raise NameError("check code defines no grade(transcript, workspace_path)")
        r = g(p["transcript"], p["workspace"])
        line = json.dumps(r, default=repr)
    except BaseException:
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        os._exit(3)
    out.write("\n__CLAWGYM_GRADE_RESULT__" + nonce + line + "\n")
    out.flush()
    sys.stderr.flush()
    os._exit(0)


_main()
