"""clawgym's verifier inside a Harbor task (tests/clawgym_verify.py; stdlib only, no network, no downloads).

Exported by clawgym.tasks.harbor. tests/test.sh runs `python3 /tests/clawgym_verify.py` with the task's settings
in /tests/clawgym.json; the score goes to /logs/verifier/reward.txt and the per-check detail to
/logs/verifier/reward.json ({"reward": score, <check>: value, ...}). Semantics are clawgym.verify.runtime's:

- reward_dir: the task's reward/ folder (tests/reward/) is copied to <workspace>/reward (whatever the agent left
  there removed first), `bash reward/reward.sh` runs with cwd = the workspace; its LAST stdout line is the score.
  A check.py printing a JSON object gives the per-check detail.
- grade: the grade driver (tests/grade_driver.py) runs `grade(transcript, workspace)` from tests/check_code.py
  with an empty transcript (Harbor keeps no OpenAI transcript); the score is the mean of the checks.
- rc != 0, a timeout, no score -> 0 with the error in reward.json["error"]; every score is clamped to [0, 1].

Env: CLAWGYM_REWARD_DIR overrides where reward/ goes (clawgym's own importer of this folder sets it, since its
sandbox keeps its own reward/ at that place); CLAWGYM_LOGS_DIR overrides /logs/verifier.
"""
import json
import math
import os
import secrets
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "__CLAWGYM_GRADE_RESULT__"


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
    sys.path.insert(0, HERE)
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


def run_reward_dir(cfg, ws, detail):
    """reward/ to <ws>/reward, `bash reward/reward.sh` in ws; check.py's JSON into `detail`."""
    dest = os.environ.get("CLAWGYM_REWARD_DIR") or os.path.join(ws, "reward")
    if os.path.islink(dest) or os.path.isfile(dest):
        os.unlink(dest)
    elif os.path.isdir(dest):
        shutil.rmtree(dest)
    shutil.copytree(os.path.join(HERE, "reward"), dest)
    r = subprocess.run(["bash", os.path.join(dest, "reward.sh")], cwd=ws, capture_output=True, text=True,
                       timeout=cfg.get("timeout_s", 120))
    sys.stderr.write(r.stderr[-4000:])
    if r.returncode != 0:
        raise RuntimeError(f"reward.sh exited {r.returncode}: {r.stderr.strip()[-500:]}")
    x = last_float(r.stdout)
    check = os.path.join(dest, "check.py")
    if os.path.isfile(check):  # per-check detail (the score itself is reward.sh's)
        try:
            c = subprocess.run(["python3", check, ws], cwd=ws, capture_output=True, text=True,
                               timeout=cfg.get("timeout_s", 120))
            d = json.loads(c.stdout.strip().splitlines()[-1])
            if isinstance(d, dict):
                detail.update({str(k): float(v) for k, v in d.items()
                               if isinstance(v, (int, float)) and k != "reward"})
        except Exception:
            pass
    return x


def run_grade(cfg, ws, detail):
    """The grade driver on check_code.py (empty transcript); the checks into `detail`."""
    with open(os.path.join(HERE, "check_code.py"), encoding="utf-8") as fh:
        code = fh.read()
    with open(os.path.join(HERE, "grade_driver.py"), encoding="utf-8") as fh:
        driver = fh.read()
    nonce = secrets.token_hex(16)
    payload = json.dumps({"code": code, "transcript": [], "workspace": ws, "nonce": nonce})
    r = subprocess.run(["python3", "-P", "-c", driver], cwd=ws, input=payload, capture_output=True, text=True,
                       timeout=cfg.get("timeout_s", 120))
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
        x = run_reward_dir(cfg, ws, detail) if cfg["kind"] == "reward_dir" else run_grade(cfg, ws, detail)
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
