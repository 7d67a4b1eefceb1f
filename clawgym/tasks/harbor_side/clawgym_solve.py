"""clawgym's reference solution inside a Harbor task (solution/clawgym_solve.py; stdlib only).

solution/solve.sh runs `python3 <this> <workspace>`: the task's reference tool calls (solution/reference.json)
are replayed on the workspace with the agent tools' own semantics (solution/toolcore.py is
clawgym.agent.toolcore, verbatim) -- exactly what clawgym's `oracle` policy does in a clawgym sandbox.
A failed call is reported on stderr (as clawgym's replay reports it); the exit code is 0 either way.
"""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import toolcore  # noqa: E402


class ExecResult:
    """The part of clawgym.sandbox.ExecResult the tools read."""

    def __init__(self, rc, stdout="", stderr="", timed_out=False, truncated=False):
        self.rc, self.stdout, self.stderr, self.timed_out, self.truncated = rc, stdout, stderr, timed_out, truncated

    @property
    def ok(self):
        return self.rc == 0 and not self.timed_out


class DirWorkspace:
    """toolcore's workspace backend on a plain directory (files outside it refused)."""

    def __init__(self, root):
        self.workspace = os.path.normpath(root)

    def _path(self, path):
        q = os.path.normpath(os.path.join(self.workspace, path))
        if q != self.workspace and not q.startswith(self.workspace + os.sep):
            raise PermissionError("path escapes the workspace: " + path)
        return q

    def read_file(self, path):
        with open(self._path(path), "rb") as fh:
            return fh.read()

    def write_file(self, path, content, mode=0o644):
        q = self._path(path)
        os.makedirs(os.path.dirname(q), exist_ok=True)
        with open(q, "wb") as fh:
            fh.write(content)

    def remove(self, path):
        q = self._path(path)
        if os.path.isdir(q) and not os.path.islink(q):
            shutil.rmtree(q, ignore_errors=True)
        elif os.path.lexists(q):
            os.unlink(q)

    def exec(self, cmd, timeout=None, workdir=None, max_output=1_000_000):
        args = ["bash", "-c", cmd] if isinstance(cmd, str) else [str(c) for c in cmd]
        try:
            r = subprocess.run(args, cwd=workdir or self.workspace, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return ExecResult(124, (e.stdout or b"").decode("utf-8", "replace"),
                              (e.stderr or b"").decode("utf-8", "replace"), timed_out=True)
        except OSError as e:
            return ExecResult(127, "", "%s: %s" % (type(e).__name__, e))
        out = r.stdout.decode("utf-8", "replace")
        err = r.stderr.decode("utf-8", "replace")
        return ExecResult(r.returncode, out[:max_output], err[:max_output],
                          truncated=len(out) > max_output or len(err) > max_output)


def main():
    """Replay reference.json on the workspace (argv[1], else the cwd)."""
    ws = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
    with open(os.path.join(HERE, "reference.json"), encoding="utf-8") as fh:
        calls = json.load(fh)
    for line in toolcore.replay_errors(toolcore.replay(DirWorkspace(ws), calls)):
        sys.stderr.write(line + "\n")


if __name__ == "__main__":
    main()
