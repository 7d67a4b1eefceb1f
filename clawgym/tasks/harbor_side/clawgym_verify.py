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

The agent's code runs inside the check by design (reward.sh's tests import the workspace), so the check runs where
that code cannot reach the harness or the result (clawgym.verify.guard's seal_reward, execute-only bash and stdout
result channel, on this side):

- run as root (Harbor's test.sh): the harness (reward.sh and the rest of reward/, the grade driver, the import
  guard, an execute-only copy of bash) is copied into a root-owned, read-only folder; reward/ in the workspace is a
  root-owned read-only copy too, and the workspace's top folder is root's and sticky, so reward/ cannot be renamed
  away; the rest of the workspace is handed to an unprivileged uid (nobody, 65534) with no other files, which runs
  reward.sh / the grade driver / check.py (no supplementary groups, its own session);
- every mode: this process is a child subreaper and not dumpable; reward.sh runs from its text (`bash -c`, $0
  its path), so appending to a file changes nothing that runs; bash is an execute-only copy (a process exec'd from
  a file its user cannot read is not dumpable: the agent's code cannot open reward.sh's stdout through /proc); the
  score is reward.sh's stdout as it was when reward.sh exited; then every process the check left (descendants,
  reparented here as to a subreaper, and as root every process of the unprivileged uid) is stopped and killed
  before this process alone writes reward.txt / reward.json (an entry there first removed, never followed);
- not root (clawgym's own in-place run in its sandbox, CLAWGYM_VERIFY_IN_PLACE, or a non-root verifier): no uid to
  drop to, so files of the same uid are not protected here; in clawgym's own run the host seals reward/ from
  outside (clawgym.verify.guard), as the built-in path does, and the points above still hold.

Env: CLAWGYM_REWARD_DIR overrides where reward/ goes (clawgym's own importer of this folder sets it, since its
sandbox keeps its own reward/ at that place); CLAWGYM_LOGS_DIR overrides /logs/verifier.
"""
import base64
import ctypes
import importlib.util
import json
import math
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# python3 -I puts neither this folder nor the cwd (the workspace) on sys.path; the modules shipped here are found
# first (tests/scoring.py, tests/tomli_w/ which the guard's pyproject.toml rewrite imports)
sys.path.insert(0, HERE)
MARK = "__CLAWGYM_GRADE_RESULT__"
GUARD_DIR = os.path.join(HERE, "clawgym_site")  # the import guard: nothing else is in that folder
NOBODY = 65534  # the uid (and gid) the check runs as when this runs as root: it owns no file of the image
ROOT = False  # main(): run as root, not in place -- the check then runs as NOBODY
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36


def _prctl(op, arg):
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(op, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _procs():
    """{pid: (ppid, uids, state)} of every process visible in /proc (not this one)."""
    out = {}
    for e in os.listdir("/proc"):
        if not e.isdigit() or int(e) == os.getpid():
            continue
        try:
            with open(f"/proc/{e}/status") as fh:
                st = dict(ln.split(":", 1) for ln in fh.read().splitlines() if ":" in ln)
            out[int(e)] = (int(st["PPid"]), {int(x) for x in st["Uid"].split()}, st["State"].split()[0])
        except (OSError, KeyError, ValueError):
            continue
    return out


def _left(procs):
    """The pids the check may have left: descendants of this process (a subreaper: orphans come back here), and as
    root every process of the unprivileged uid (any of its real / effective / saved uids)."""
    me, kids = os.getpid(), {}
    for pid, (ppid, _, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    out, stack = set(), [me]
    while stack:
        for c in kids.get(stack.pop(), []):
            if c not in out:
                out.add(c)
                stack.append(c)
    if ROOT:
        out |= {pid for pid, (_, uids, _) in procs.items() if NOBODY in uids}
    return {pid for pid in out if procs[pid][2] != "Z"}


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_left():
    """Stop, then kill, every process the check left, until none is left (as root also by kill(-1) as the
    unprivileged uid: one call that a forking process cannot outrun)."""
    for _ in range(200):
        if ROOT:
            pid = os.fork()
            if pid == 0:
                try:
                    os.setgroups([])
                    os.setgid(NOBODY)
                    os.setuid(NOBODY)
                    os.kill(-1, signal.SIGKILL)
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
        left = _left(_procs())
        if not left:
            _reap()
            return
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in left:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        time.sleep(0.005)
        _reap()
    raise RuntimeError("processes of the check could not be killed")


def run_check(argv, ws, env, timeout, stdin=b""):
    """argv as the check's user in its own session, cwd = ws: (rc, stdout, stderr) as they were when it exited,
    read after every process it left is gone. TimeoutExpired past `timeout`."""
    out, err, inp = (tempfile.TemporaryFile() for _ in range(3))
    inp.write(stdin)
    inp.seek(0)
    kw = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if ROOT else {}
    p = subprocess.Popen(argv, cwd=ws, env=env, stdin=inp, stdout=out, stderr=err, start_new_session=True,
                         close_fds=True, **kw)
    try:
        rc = p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        kill_left()
        raise
    n_out, n_err = os.fstat(out.fileno()).st_size, os.fstat(err.fileno()).st_size  # what it wrote by its exit
    kill_left()
    return rc, _tail(out, n_out), _tail(err, n_err)


def _tail(fh, n, cap=8 << 20):
    """The last `cap` bytes of the first `n` of `fh`, as text (the score is the last line)."""
    fh.seek(max(0, n - cap))
    return fh.read(min(n, cap)).decode(errors="replace")


def harness(env):
    """A private folder for the harness: root-owned and read-only to the check as root, this uid's own (mode 0700)
    otherwise; holding an execute-only copy of bash (its processes not dumpable) and the import guard."""
    h = tempfile.mkdtemp(prefix="clawgym-harness-")
    shutil.copytree(GUARD_DIR, os.path.join(h, "clawgym_site"))
    bash = os.path.join(h, "bash")
    shutil.copyfile(os.path.realpath(shutil.which("bash", path=env["PATH"]) or "/bin/bash"), bash)
    os.chmod(bash, 0o111)
    if ROOT:
        seal(h)
    return h


def seal(path):
    """`path` root's and read-only for others (directories 0755, files 0444 or 0555 with an exec bit, bash
    0111), never following a link."""
    for dp, dns, fns in os.walk(path):
        for n in [*dns, *fns]:
            q = os.path.join(dp, n)
            st = os.lstat(q)
            if stat.S_ISLNK(st.st_mode):
                os.unlink(q)
                continue
            os.chown(q, 0, 0, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                m = st.st_mode & 0o777
                os.chmod(q, 0o111 if m == 0o111 else (0o555 if m & 0o111 else 0o444))
        os.chown(dp, 0, 0, follow_symlinks=False)
        os.chmod(dp, 0o755)


def reachable(ws):
    """As root: every folder above the workspace searchable by others (o+x, never o+r or o+w), so that the check's
    uid reaches its cwd (the task's WORKDIR may lie under /root, 0700 in the image; the verifier's container is
    thrown away after)."""
    d = os.path.dirname(os.path.abspath(ws))
    while True:
        st = os.lstat(d)
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & 0o001:
            os.chmod(d, stat.S_IMODE(st.st_mode) | 0o001)
        if d == "/":
            return
        d = os.path.dirname(d)


def hand_over(ws, keep):
    """As root: the workspace to the check's uid (it may write scratch files there) except `keep` (root's); the top
    folder root's and sticky (0o1777), so that the check cannot rename `keep` away."""
    for dp, dns, fns in os.walk(ws):
        if dp == ws:
            dns[:] = [d for d in dns if d != keep]
        for n in [*dns, *fns]:
            if dp == ws and n == keep:
                continue
            os.chown(os.path.join(dp, n), NOBODY, NOBODY, follow_symlinks=False)
    os.chown(ws, 0, 0)
    os.chmod(ws, 0o1777)


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
    if ROOT:
        os.chown(home, NOBODY, NOBODY)
        reachable(ws)
    env = guard.verifier_env(home, GUARD_DIR, ws)
    h = harness(env)
    env["PYTHONPATH"] = os.path.join(h, "clawgym_site")
    return env, h


def run_reward_dir(cfg, ws, detail, env, h):
    """reward/ to <ws>/reward (root's and read-only as root), reward.sh run from its text by the execute-only bash
    in `h` as the check's user, cwd = ws, under `env`; check.py's JSON into `detail`."""
    dest = os.environ.get("CLAWGYM_REWARD_DIR") or os.path.join(ws, "reward")
    if os.path.islink(dest) or os.path.isfile(dest):
        os.unlink(dest)
    elif os.path.isdir(dest):
        shutil.rmtree(dest)
    shutil.copytree(os.path.join(HERE, "reward"), dest)
    if ROOT:
        seal(dest)
        if os.path.dirname(os.path.abspath(dest)) == os.path.abspath(ws):
            hand_over(ws, os.path.basename(dest))
    with open(os.path.join(HERE, "reward", "reward.sh"), encoding="utf-8", errors="surrogateescape") as fh:
        text = fh.read()
    script = os.path.join(dest, "reward.sh")
    # from its text: what runs is fixed now, whatever is written to a file later ($0 stays its path); a script
    # over one argument's limit runs from the harness's read-only copy
    argv = [os.path.join(h, "bash"), "-c", text, script] if len(text) < 100_000 else [os.path.join(h, "bash"), script]
    timeout = cfg.get("timeout_s", 120)
    rc, out, err = run_check(argv, ws, env, timeout)
    sys.stderr.write(err[-4000:])
    if rc != 0:
        raise RuntimeError(f"reward.sh exited {rc}: {err.strip()[-500:]}")
    x = last_float(out)
    check = os.path.join(HERE, "reward", "check.py")
    if os.path.isfile(check):  # per-check detail (the score itself is reward.sh's)
        try:
            with open(check, encoding="utf-8", errors="surrogateescape") as fh:
                src = fh.read()
            _, cout, _ = run_check(["python3", "-c", src, ws], ws, env, timeout)
            d = json.loads(cout.strip().splitlines()[-1])
            if isinstance(d, dict):
                detail.update({str(k): float(v) for k, v in d.items()
                               if isinstance(v, (int, float)) and k != "reward"})
        except Exception:
            pass
    return x


def run_grade(cfg, ws, detail, env, h):
    """The grade driver on check_code.py (empty transcript) under `env`, as the check's user (the workspace stays
    root's and read-only as root: clawgym.verify.guard.seal_workspace); the checks into `detail`."""
    with open(os.path.join(HERE, "check_code.py"), encoding="utf-8") as fh:
        code = fh.read()
    with open(os.path.join(HERE, "grade_driver.py"), encoding="utf-8") as fh:
        driver = fh.read()
    nonce = secrets.token_hex(16)
    payload = json.dumps({"code": code, "transcript": [], "workspace": ws, "nonce": nonce})
    rc, out, err = run_check(["python3", "-P", "-c", driver], ws, env, cfg.get("timeout_s", 120),
                             stdin=payload.encode())
    sys.stderr.write(err[-4000:])
    if rc != 0:
        raise RuntimeError(f"grade() crashed (rc {rc}): {err.strip()[-800:]}")
    line = next((ln for ln in reversed(out.splitlines()) if ln.startswith(MARK + nonce)), None)
    if line is None:
        raise RuntimeError("grade() printed no result")
    score, subs = mean_of_checks(json.loads(line[len(MARK + nonce):]))
    detail.update({k: v for k, v in subs.items() if k != "reward"})
    return score


def write_result(logs, name, text):
    """<logs>/<name> written by this process alone: whatever is there removed first, the new file created, never
    followed through a link."""
    p = os.path.join(logs, name)
    try:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)
    except FileNotFoundError:
        pass
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def isolation(in_place):
    """What separates the check from this process, for the record (<logs>/clawgym_isolation.json): as root, the
    check's own uid; otherwise nothing but what every mode does, since a process of the same uid can signal this
    one and write its files, and an unprivileged user namespace is refused in the images this runs in (docker's
    default seccomp profile, a sandbox with max_user_namespaces 0). A score from a non-root verifier is then only
    as trustworthy as its image's user: clawgym's own in-place run seals the workspace from the host instead."""
    if ROOT:
        return {"check_user": NOBODY, "separate_uid": True}
    return {"check_user": os.geteuid(), "separate_uid": False,
            "why": ("in place (clawgym seals from the host)" if in_place
                    else "the verifier is not root: the check shares its uid")}


def main():
    """Verify, write reward.txt and reward.json, print the score."""
    global ROOT
    in_place = os.environ.get("CLAWGYM_VERIFY_IN_PLACE") == "1"
    ROOT = os.geteuid() == 0 and not in_place
    _prctl(PR_SET_CHILD_SUBREAPER, 1)  # what the check leaves comes back here, to be killed
    _prctl(PR_SET_DUMPABLE, 0)  # no process of this uid opens this one's files or memory through /proc
    with open(os.path.join(HERE, "clawgym.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    ws = cfg.get("workspace") or os.getcwd()
    logs = os.environ.get("CLAWGYM_LOGS_DIR") or "/logs/verifier"
    os.makedirs(logs, exist_ok=True)
    detail = {}
    error = None
    env, h = {}, None
    write_result(logs, "clawgym_isolation.json", json.dumps(isolation(in_place)))
    try:
        env, h = prepare(ws, logs)
        x = (run_reward_dir(cfg, ws, detail, env, h) if cfg["kind"] == "reward_dir"
             else run_grade(cfg, ws, detail, env, h))
    except subprocess.TimeoutExpired:
        x, error = 0.0, f"verifier timed out after {cfg.get('timeout_s', 120)} s"
    except Exception as e:
        x, error = 0.0, f"{type(e).__name__}: {e}"
    try:
        kill_left()  # nothing of the check is left when the result is written
    except RuntimeError as e:
        x, error = 0.0, str(e)
    for d in (h, env.get("HOME")):
        if d:
            shutil.rmtree(d, ignore_errors=True)
    x = clamp(x)
    write_result(logs, "reward.txt", f"{x!r}\n")
    out = {"reward": x}
    out.update({k: clamp(v) for k, v in detail.items()})
    write_result(logs, "reward.json", json.dumps(out))
    if error:
        sys.stderr.write(f"clawgym verifier: {error}\n")
        write_result(logs, "clawgym_error.txt", error + "\n")
    print(x)


if __name__ == "__main__":
    main()
