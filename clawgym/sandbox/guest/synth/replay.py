"""Replay driver (runs inside a sandbox; stdlib only): applies every task's reference solution to a fresh
copy of its files, with the agent tools' own semantics (clawgym.agent.toolcore, as clawgym.agent.tools
applies it in a sandbox), and reports the files that changed.

job: {"tasks": [{"files": {path: base64}, "calls": [{name, arguments}]}], "forkserver": bool,
"exec_timeout": seconds a fork-served python3 run may take}. Result per task: {"overlay": {path: base64 |
None (removed)}, "errors": [one line per failed call]}.
"""

import base64
import os
import shutil
import subprocess
import sys

from clawgym.agent import toolcore
from clawgym.sandbox.guest.synth import forkserver
from clawgym.sandbox.guest.synth.common import Discard


class ExecResult:
    """The part of clawgym.sandbox.ExecResult the tools read."""

    def __init__(self, rc: int, stdout: str = "", stderr: str = "", timed_out: bool = False,
                 truncated: bool = False):
        self.rc, self.stdout, self.stderr, self.timed_out, self.truncated = rc, stdout, stderr, timed_out, truncated

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out


def _text(b, limit: int) -> tuple:
    s = (b or b"").decode("utf-8", errors="replace")
    return (s[:limit], True) if len(s) > limit else (s, False)


class DirWorkspace:
    """toolcore's workspace backend on a plain directory (the driver is inside the sandbox already): files
    outside it are refused; a command string runs under `bash -c` in `env` (the fork server's PATH)."""

    def __init__(self, root: str, env: dict | None = None):
        self.workspace = os.path.normpath(root)
        self.env = env

    def _path(self, path: str) -> str:
        q = os.path.normpath(os.path.join(self.workspace, path))
        if q != self.workspace and not q.startswith(self.workspace + os.sep):
            raise PermissionError("path escapes the workspace: " + path)
        return q

    def read_file(self, path: str) -> bytes:
        with open(self._path(path), "rb") as fh:
            return fh.read()

    def write_file(self, path: str, content: bytes, mode: int = 0o644) -> None:
        q = self._path(path)
        os.makedirs(os.path.dirname(q), exist_ok=True)
        with open(q, "wb") as fh:
            fh.write(content)

    def remove(self, path: str) -> None:
        q = self._path(path)
        if os.path.isdir(q) and not os.path.islink(q):
            shutil.rmtree(q, ignore_errors=True)
        elif os.path.lexists(q):
            os.unlink(q)

    def exec(self, cmd, timeout=None, workdir=None, max_output=1_000_000) -> ExecResult:
        args = ["bash", "-c", cmd] if isinstance(cmd, str) else [str(c) for c in cmd]
        try:
            r = subprocess.run(args, cwd=workdir or self.workspace, capture_output=True, env=self.env,
                               timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return ExecResult(124, _text(e.stdout, max_output)[0], _text(e.stderr, max_output)[0], timed_out=True)
        except OSError as e:  # no such workdir, no bash
            return ExecResult(127, "", "%s: %s" % (type(e).__name__, e))
        (out, t1), (err, t2) = _text(r.stdout, max_output), _text(r.stderr, max_output)
        return ExecResult(r.returncode, out, err, truncated=t1 or t2)


def walk(d: str) -> dict:
    """Regular files under d (symlinks skipped): {relative path: bytes}."""
    out = {}
    for dp, _dns, fns in os.walk(d):
        for fn in fns:
            p = os.path.join(dp, fn)
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, d)] = fh.read()
    return out


def replay_task(d: str, files: dict, calls: list, env: dict | None = None) -> dict:
    """Write `files` (path -> base64) under the new directory d, apply `calls`, return overlay + errors."""
    os.makedirs(d)
    inputs = {}
    for p, b in files.items():
        q = os.path.join(d, p)
        os.makedirs(os.path.dirname(q), exist_ok=True)
        data = base64.b64decode(b)
        with open(q, "wb") as fh:
            fh.write(data)
        inputs[p] = data
    errors = toolcore.replay_errors(toolcore.replay(DirWorkspace(d, env), calls))
    after = walk(d)
    overlay = {p: base64.b64encode(b).decode() for p, b in after.items() if inputs.get(p) != b}
    overlay.update({p: None for p in inputs if p not in after})
    return {"overlay": overlay, "errors": errors, "nbytes": sum(len(x) for x in after.values())}


def run(job: dict, root: str, base_modules=None) -> list:
    env = None
    if job.get("forkserver", True):
        try:
            env = forkserver.start(root, float(job.get("exec_timeout", 60)), base_modules=base_modules)
        except Exception as e:  # no fork server: every python3 is a real process (same results, slower)
            sys.stderr.write("forkserver disabled: %r\n" % (e,))
            env = None
    junk = Discard()
    res = []
    for i, t in enumerate(job["tasks"]):
        d = os.path.join(root, "w%d" % i)
        r = replay_task(d, t["files"], t["calls"], env)
        junk.add(d, r.pop("nbytes"))
        res.append(r)
    return res
