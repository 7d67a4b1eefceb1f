"""clawgym's verifier inside a Harbor task (tests/clawgym_verify.py; stdlib only, no network, no downloads).

Exported by clawgym.tasks.harbor. tests/test.sh runs `python3 /tests/clawgym_verify.py` with the task's settings
in /tests/clawgym.json; the score goes to /logs/verifier/reward.txt and the per-check detail to
/logs/verifier/reward.json ({"reward": score, <check>: value, ...}). Semantics are clawgym.verify.runtime's:

- reward_dir: the task's reward/ folder (tests/reward/) is copied to <workspace>/reward (whatever the agent left
  there removed first), `bash reward/reward.sh` runs with cwd = the workspace; its LAST stdout line is the score.
  A check.py printing a JSON object gives the per-check detail.
- grade: the grade driver (tests/grade_driver.py) runs `grade(transcript, workspace)` from tests/check_code.py
  with an empty transcript (Harbor keeps no OpenAI transcript); the score is the mean of the checks.
- rc != 0, a timeout, no score -> 0 with the error in /logs/verifier/clawgym_error.txt; every score is clamped to
  [0, 1].

The workspace is the agent's, so before any check runs it is prepared as clawgym's clean room prepares it, by the
same code (tests/clawgym_guard.py: clawgym.verify.guard's rules, generated at export): harness-control files the
agent added or changed are restored or removed (`neutralize_controls`: conftest.py, pytest.ini, tox.ini, the pytest
part of setup.cfg / pyproject.toml read as pytest reads it, sitecustomize.py, *.pth, *.pyc and __pycache__, git
hooks and configs; tests/clawgym_controls.json holds the task's own control files, which stay), and every verifier
command runs in `verifier_env`: a fresh HOME, a clean PATH, no user site, no byte code written, no PYTHON*/BASH_ENV
/PYTEST_ADDOPTS of anyone's, and the allow-list import guard (tests/clawgym_site/: clawgym's sitecustomize.py and
protected_modules.txt) on PYTHONPATH, so a workspace file never shadows the standard library or an installed
package. What was neutralised goes to /logs/verifier/clawgym_hardening.json.

Env: CLAWGYM_REWARD_DIR overrides where reward/ goes (clawgym's own importer of this folder sets it, since its
sandbox keeps its own reward/ at that place); CLAWGYM_LOGS_DIR overrides /logs/verifier.
"""
import base64
import importlib.util
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# python3 -I puts neither this folder nor the cwd (the workspace) on sys.path; the modules shipped here are found
# first (tests/scoring.py, tests/tomli_w/ which the guard's pyproject.toml rewrite imports)
sys.path.insert(0, HERE)
MARK = "__CLAWGYM_GRADE_RESULT__"
GUARD_DIR = os.path.join(HERE, "clawgym_site")  # the import guard: nothing else is in that folder


def clamp(x):
    """x in [0, 1]; a non-number or non-finite one is 0."""
    if not isinstance(x, (int, float)):
        return 0.0
    x = float(x)
    if not math.isfinite(x):
        return 0.0
    return min(1.0, max(0.0, x))


def mean_of_checks(data):
    """clawgym.verify.scoring.mean_of_checks (tests/scoring.py)."""
    from scoring import mean_of_checks as m  # tests/scoring.py: clawgym.verify.scoring, verbatim

    return m(data)


def last_float(out):
    """The float on the last non-empty line (reward.sh's contract)."""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("reward.sh printed nothing")
    x = float(lines[-1].strip())
    if not math.isfinite(x):
        raise ValueError("reward.sh printed a non-finite score")
    return x


class File:
    """One file of the task (clawgym.tasks.File's fields `neutralize_controls` reads)."""

    def __init__(self, path, content, mode):
        self.path, self.content, self.mode = path, content, mode


class Shipped:
    """The task's own control files (tests/clawgym_controls.json) as `neutralize_controls` reads a task."""

    def __init__(self, controls):
        self.files = [File(p, base64.b64decode(c["content_b64"]), int(c.get("mode", 0o644)))
                      for p, c in controls.items()]

    def file_map(self):
        return {f.path: f.content for f in self.files}


class Workspace:
    """The workspace folder as `neutralize_controls` reads a sandbox: regular files by workspace-relative path,
    never reached through a symlink (a path with a linked parent is refused, a link itself never followed)."""

    def __init__(self, root):
        self.root = root

    def _path(self, rel):
        parts = [x for x in rel.split("/") if x not in ("", ".")]
        if not parts or ".." in parts:
            raise ValueError(f"{rel!r} is no workspace path")
        cur = self.root
        for x in parts[:-1]:
            cur = os.path.join(cur, x)
            if os.path.islink(cur):
                raise ValueError(f"{rel!r}: a parent is a symlink")
        return os.path.join(self.root, *parts)

    def walk(self):
        """(regular files, odd entries [path, kind, target]) below the root, iteratively, links not entered."""
        files, odd, stack = [], [], [""]
        while stack:
            rel = stack.pop()
            try:
                entries = list(os.scandir(os.path.join(self.root, rel) if rel else self.root))
            except OSError:
                continue
            for e in entries:
                r = f"{rel}/{e.name}" if rel else e.name
                if e.is_symlink():
                    try:
                        target = os.readlink(e.path)
                    except OSError:
                        target = ""
                    odd.append([r, "symlink", target])
                elif e.is_dir(follow_symlinks=False):
                    stack.append(r)
                elif e.is_file(follow_symlinks=False):
                    files.append(r)
                else:
                    odd.append([r, "special", ""])
        return sorted(files), odd

    def list_files(self, path="."):
        return self.walk()[0]

    def read_file(self, rel):
        fd = os.open(self._path(rel), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            return fh.read()

    def write_file(self, rel, content, mode=0o644):
        p = self._path(rel)
        self.remove(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        os.chmod(p, mode)

    def remove(self, rel):
        p = self._path(rel)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        elif os.path.lexists(p):
            os.unlink(p)


def shipped(name):
    """tests/<name>.py, a module the exporter wrote beside this program from clawgym's own source; loaded by its
    path, so that no same-named module elsewhere on sys.path can stand in."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def prepare(ws, logs):
    """clawgym.verify.guard's preparation of a clean room, on this workspace: control files neutralised (the
    actions written to <logs>/clawgym_hardening.json), and the environment every verifier command runs in.
    Raises clawgym_guard.UnsafeWorkspace when a control file cannot be neutralised (the check then scores 0)."""
    guard = shipped("clawgym_guard")  # generated from clawgym.verify.guard by the exporter

    with open(os.path.join(HERE, "clawgym_controls.json"), encoding="utf-8") as fh:
        task = Shipped(json.load(fh))
    w = Workspace(ws)
    actions = guard.neutralize_controls(task, w, [o for o in w.walk()[1] if o[0].split("/")[0] != "reward"])
    with open(os.path.join(logs, "clawgym_hardening.json"), "w") as fh:
        json.dump(actions, fh)
    home = tempfile.mkdtemp(prefix="clawgym-home-")
    return guard.verifier_env(home, GUARD_DIR, ws)


def run_reward_dir(cfg, ws, detail, env):
    """reward/ to <ws>/reward, `bash reward/reward.sh` in ws under `env`; check.py's JSON into `detail`."""
    dest = os.environ.get("CLAWGYM_REWARD_DIR") or os.path.join(ws, "reward")
    if os.path.islink(dest) or os.path.isfile(dest):
        os.unlink(dest)
    elif os.path.isdir(dest):
        shutil.rmtree(dest)
    shutil.copytree(os.path.join(HERE, "reward"), dest)
    r = subprocess.run([shutil.which("bash", path=env["PATH"]) or "bash", os.path.join(dest, "reward.sh")], cwd=ws,
                       env=env, capture_output=True, text=True, timeout=cfg.get("timeout_s", 120))
    sys.stderr.write(r.stderr[-4000:])
    if r.returncode != 0:
        raise RuntimeError(f"reward.sh exited {r.returncode}: {r.stderr.strip()[-500:]}")
    x = last_float(r.stdout)
    check = os.path.join(dest, "check.py")
    if os.path.isfile(check):  # per-check detail (the score itself is reward.sh's)
        try:
            c = subprocess.run(["python3", check, ws], cwd=ws, env=env, capture_output=True, text=True,
                               timeout=cfg.get("timeout_s", 120))
            d = json.loads(c.stdout.strip().splitlines()[-1])
            if isinstance(d, dict):
                detail.update({str(k): float(v) for k, v in d.items()
                               if isinstance(v, (int, float)) and k != "reward"})
        except Exception:
            pass
    return x


def run_grade(cfg, ws, detail, env):
    """The grade driver on check_code.py (empty transcript) under `env`; the checks into `detail`."""
    with open(os.path.join(HERE, "check_code.py"), encoding="utf-8") as fh:
        code = fh.read()
    with open(os.path.join(HERE, "grade_driver.py"), encoding="utf-8") as fh:
        driver = fh.read()
    nonce = secrets.token_hex(16)
    payload = json.dumps({"code": code, "transcript": [], "workspace": ws, "nonce": nonce})
    r = subprocess.run(["python3", "-P", "-c", driver], cwd=ws, env=env, input=payload, capture_output=True,
                       text=True, timeout=cfg.get("timeout_s", 120))
    sys.stderr.write(r.stderr[-4000:])
    if r.returncode != 0:
        raise RuntimeError(f"grade() crashed (rc {r.returncode}): {r.stderr.strip()[-800:]}")
    line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith(MARK + nonce)), None)
    if line is None:
        raise RuntimeError("grade() printed no result")
    score, subs = mean_of_checks(json.loads(line[len(MARK + nonce):]))
    detail.update({k: v for k, v in subs.items() if k != "reward"})
    return score


def main():
    """Verify, write reward.txt and reward.json, print the score."""
    with open(os.path.join(HERE, "clawgym.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    ws = cfg.get("workspace") or os.getcwd()
    logs = os.environ.get("CLAWGYM_LOGS_DIR") or "/logs/verifier"
    os.makedirs(logs, exist_ok=True)
    detail = {}
    error = None
    try:
        env = prepare(ws, logs)
        x = run_reward_dir(cfg, ws, detail, env) if cfg["kind"] == "reward_dir" else run_grade(cfg, ws, detail, env)
    except subprocess.TimeoutExpired:
        x, error = 0.0, f"verifier timed out after {cfg.get('timeout_s', 120)} s"
    except Exception as e:
        x, error = 0.0, f"{type(e).__name__}: {e}"
    x = clamp(x)
    with open(os.path.join(logs, "reward.txt"), "w") as fh:
        fh.write(f"{x!r}\n")
    out = {"reward": x}
    out.update({k: clamp(v) for k, v in detail.items()})
    with open(os.path.join(logs, "reward.json"), "w") as fh:
        json.dump(out, fh)
    if error:
        sys.stderr.write(f"clawgym verifier: {error}\n")
        with open(os.path.join(logs, "clawgym_error.txt"), "w") as fh:
            fh.write(error + "\n")
    print(x)


if __name__ == "__main__":
    main()
