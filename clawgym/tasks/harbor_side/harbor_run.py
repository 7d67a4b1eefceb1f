"""Runs a Harbor task's tests/test.sh (or solution/solve.sh) in a clawgym sandbox (stdlib only, no network).

Shipped by clawgym.tasks.harbor as part of an imported Harbor task's verifier (reward/harbor_run.py, called by
reward/reward.sh with cwd = the sandbox workspace) and inside its oracle reference (an `exec` call).

A Harbor task assumes absolute paths: its tests at /tests, its logs at /logs/verifier, its workspace at the
Dockerfile's WORKDIR (e.g. /app), its solution at /solution. A clawgym sandbox has none of them (its workspace is
its own, the sandbox user cannot create top-level folders), so the task's own files are copied to a private
folder and the paths in their text are mapped: /tests -> <tmp>/tests, /logs -> <tmp>/logs, /solution ->
<tmp>/solution, WORKDIR -> the sandbox workspace (a path is replaced only as a whole path prefix). The test.sh
then runs with cwd = the workspace; the score is what it writes: /logs/verifier/reward.txt (a float) or
/logs/verifier/reward.json ({"reward": x, ...}, else the mean of its values) -- Harbor reads reward.json first.
It is printed as the last stdout line (clawgym's reward.sh contract). No reward file: exit 2 with the reason.
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

NO_REWARD = "harbor test.sh wrote no reward"


def rewrite(text, mapping):
    """Replace each absolute path prefix of `mapping` (longest first) where it stands as a whole path."""
    for src in sorted(mapping, key=len, reverse=True):
        dst = mapping[src]
        if not src or src == "/" or src == dst:
            continue
        pat = r"(?<![A-Za-z0-9_.\-/])" + re.escape(src) + r"(?![A-Za-z0-9_.\-])"
        text = re.sub(pat, lambda m, d=dst: d, text)
    return text


def materialise(src_dir, dst_dir, mapping):
    """Copy src_dir to dst_dir, rewriting the paths of `mapping` in every UTF-8 text file."""
    for dp, _dns, fns in os.walk(src_dir):
        rel = os.path.relpath(dp, src_dir)
        out = os.path.normpath(os.path.join(dst_dir, rel))
        os.makedirs(out, exist_ok=True)
        for fn in fns:
            p = os.path.join(dp, fn)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb") as fh:
                data = fh.read()
            try:
                data = rewrite(data.decode("utf-8"), mapping).encode("utf-8")
            except UnicodeDecodeError:
                pass
            q = os.path.join(out, fn)
            with open(q, "wb") as fh:
                fh.write(data)
            os.chmod(q, 0o755 if os.stat(p).st_mode & 0o111 else 0o644)


def score_of(logs):
    """Harbor's reading of /logs/verifier: reward.json first, then reward.txt. (score, detail) or None."""
    rj, rt = os.path.join(logs, "reward.json"), os.path.join(logs, "reward.txt")
    if os.path.isfile(rj):
        with open(rj) as fh:
            d = json.load(fh)
        if isinstance(d, (int, float)) and not isinstance(d, bool):
            return float(d), {"reward": float(d)}
        if not isinstance(d, dict) or not d:
            raise ValueError("reward.json is not an object of numbers")
        vals = {str(k): float(v) for k, v in d.items() if isinstance(v, (int, float))}
        if not vals:
            raise ValueError("reward.json holds no numbers")
        x = vals["reward"] if "reward" in vals else sum(vals.values()) / len(vals)
        return x, vals
    if os.path.isfile(rt):
        with open(rt) as fh:
            s = fh.read().strip()
        x = float(s.splitlines()[-1]) if s else float("nan")
        return x, {"reward": x}
    return None


def paths(tmp, ws, cfg):
    """Harbor's absolute paths -> where they are in this sandbox."""
    m = {"/tests": os.path.join(tmp, "tests"), "/logs": os.path.join(tmp, "logs"),
         "/solution": os.path.join(tmp, "solution")}
    wd = cfg.get("workdir") or ""
    if wd and wd != "/" and wd != ws:
        m[wd] = ws
    if cfg.get("clawgym_verifier"):  # our own exported verifier: its reward/ folder goes to tmp, not <ws>/reward
        m[(wd or ws).rstrip("/") + "/reward"] = os.path.join(tmp, "wsreward")
    for k, v in (cfg.get("extra_paths") or {}).items():  # e.g. skills_dir -> <ws>/skills
        m[k] = os.path.join(ws, v) if not v.startswith("/") else v
    return m


def run_tests(here, ws):
    """tests/test.sh with the paths mapped; the reward it writes printed last (exit 2: none)."""
    with open(os.path.join(here, "harbor.json")) as fh:
        cfg = json.load(fh)
    tmp = tempfile.mkdtemp(prefix="harbor-")
    m = paths(tmp, ws, cfg)
    for d in ("logs/verifier", "logs/agent", "logs/artifacts"):
        os.makedirs(os.path.join(tmp, d), exist_ok=True)
    materialise(os.path.join(here, "tests"), os.path.join(tmp, "tests"), m)
    # CLAWGYM_VERIFY_IN_PLACE: clawgym's own exported test.sh verifies this workspace as it is (clawgym has made it
    # its clean room's export already) instead of unpacking a Harbor artifact tar, which no collect hook made here
    env = dict(os.environ, CLAWGYM_REWARD_DIR=os.path.join(tmp, "wsreward"),
               CLAWGYM_LOGS_DIR=os.path.join(tmp, "logs", "verifier"), CLAWGYM_VERIFY_IN_PLACE="1")
    env.update({k: rewrite(str(v), m) for k, v in (cfg.get("env") or {}).items()})
    rc = None
    try:
        r = subprocess.run(["bash", os.path.join(tmp, "tests", "test.sh")], cwd=ws, env=env,
                           stdout=sys.stderr, stderr=sys.stderr, timeout=float(cfg.get("timeout_s", 600)))
        rc = r.returncode
    except subprocess.TimeoutExpired:
        sys.stderr.write("%s: tests/test.sh timed out after %ss\n" % (NO_REWARD, cfg.get("timeout_s")))
        sys.exit(2)
    try:
        got = score_of(os.path.join(tmp, "logs", "verifier"))
    except (ValueError, json.JSONDecodeError) as e:
        sys.stderr.write("harbor reward unreadable: %s\n" % e)
        sys.exit(2)
    if got is None:
        sys.stderr.write("%s: neither /logs/verifier/reward.txt nor /logs/verifier/reward.json exists "
                         "(tests/test.sh exited %s)\n" % (NO_REWARD, rc))
        sys.exit(2)
    x, detail = got
    if not math.isfinite(x):
        sys.stderr.write("harbor reward is not a finite number\n")
        sys.exit(2)
    sys.stderr.write("harbor rewards: %s\n" % json.dumps(detail))
    shutil.rmtree(tmp, ignore_errors=True)
    print(x)


def solve(files, cfg, ws):
    """The oracle: solution/ files (path -> text) to a private folder, paths mapped, solve.sh run in ws."""
    tmp = tempfile.mkdtemp(prefix="harbor-solve-")
    m = paths(tmp, ws, cfg)
    os.makedirs(os.path.join(tmp, "logs", "agent"), exist_ok=True)
    for rel, (text, mode) in files.items():
        q = os.path.join(tmp, "solution", rel)
        os.makedirs(os.path.dirname(q), exist_ok=True)
        with open(q, "w", encoding="utf-8") as fh:
            fh.write(rewrite(text, m))
        os.chmod(q, mode)
    r = subprocess.run(["bash", os.path.join(tmp, "solution", "solve.sh")], cwd=ws)
    sys.exit(r.returncode)


if __name__ == "__main__":
    run_tests(os.path.dirname(os.path.abspath(__file__)), os.getcwd())
