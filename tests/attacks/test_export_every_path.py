"""Every way a workspace reaches a verifier goes through the one export ("Trust, round 3").

One small task (`calc`, reward_dir kind): its bash reward.sh checks that README.md is kept and runs pytest on a
hidden test that imports the workspace module `calc` (whose add() is buggy). Untouched it scores 0.5 (README kept,
the tests fail); a workspace that is gone scores 0.0. Each attack below is planted in the workspace as the agent
would leave it (one shell command run by the sandbox user: an agent tool call, the GRPO environment's `exec` tool,
or `Sandbox.exec`) and tries to raise the score (force the hidden tests to pass):

    symlinks out of the workspace (to a fixed calc.py in /tmp, a forged reward/ and conftest.py, /etc, /proc),
    hard links (pytest.ini <-> tox.ini), stdlib shims next to calc.py (json.py, os.py, argparse.py, the platform
    modules the stdlib tries), pytest configuration in each spelling (pytest.ini, pyproject.toml
    [tool.pytest.ini_options], setup.cfg [tool:pytest], tox.ini), conftest.py, .pth / sitecustomize.py /
    usercustomize.py (workspace and user site), bash startup files (.bashrc, .bash_profile, .profile, .bash_login,
    .bash_logout, a BASH_ENV-style file; workspace and HOME), a stale unchecked-hash __pycache__/calc.*.pyc beside
    calc.py and a sourceless calc.pyc, and the workspace replaced by a symlink or by a plain file.

Each must end with the score of the untouched workspace (0.5; 0.0 where the workspace itself is replaced) and a
class other than `infra`, on every path a workspace takes to a verifier, on docker and bwrap (the `backend`
fixture of tests/verify/test_reward_hacking.py):

1. the built-in rollout: `clawgym.agent.rollout.run_rollout` -> `_attempt` -> `Sandbox.export_workspace()` ->
   `clawgym.verify.runtime.verify_after_agent(..., export=export)` (a scripted policy, tests/hostile_endpoint.py);
2. GRPO's reward: `clawgym.train.grpo.SandboxEnvFactory` -> `SandboxEnv.exec` (the agent's tool) ->
   `make_reward_func()` -> `SandboxEnv._score` -> `verify_after_agent` (no TRL training);
3. the Harbor handover: the `[[verifier.collect]]` command of the exported task.toml
   (`clawgym.tasks.harbor_export._collect_command`) run in the agent's sandbox makes the tar; a fresh sandbox of the
   same backend stands in for Harbor's separate verifier environment (the image's copy of the workspace) and runs the
   exported tests/test.sh (`clawgym_unpack.py` then `clawgym_verify.py`), paths /tests and /logs/verifier moved
   under /tmp; the score is its reward.txt. Harbor itself does not run.

The OpenClaw runtime needs no path of its own: `clawgym.agent.runtimes.OpenClawRuntime` only `prepare`s the factory
(OpenClaw's binds) and `run`s the agent phase (`clawgym.agent.openclaw.run_openclaw`, which returns a LoopResult and
never verifies); the grading is `clawgym.agent.rollout._attempt`'s, the same code as path 1
(`sandbox.export_workspace()` then `verify_after_agent(..., export=export)`). Shown without OpenClaw:
`test_openclaw_module_never_grades` (clawgym.agent.openclaw and clawgym.agent.runtimes call neither
`export_workspace` nor a verifier) and `test_openclaw_runtime_is_graded_by_the_rollout_export` (run_rollout with an
OpenClawRuntime whose `prepare`/`run` are stand-ins, the stand-in planting an attack: graded by one
`export_workspace` and `verify_after_agent` with that export, to the same score).

`test_attack_is_armed_in_place` shows each attack is live: the same reward.sh run in place in the attacked sandbox
(`bash -lc`, the sandbox's own environment, no export, no guard) scores above the untouched 0.5.

Every attack must hold on every path: the Harbor handover prepares the workspace with clawgym.verify.guard's own
rules, generated into the exported task (tests/clawgym_guard.py), after an unpack that reads the tar by
clawgym/sandbox/host/export.py's rules (tests/clawgym_export.py); the unit tests at the end run those exported
programs directly, with no clawgym importable.
"""

from __future__ import annotations

import inspect
import io
import json
import math
import os
import sys
import tarfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hostile_endpoint import HostileEndpoint, exec_call, put  # noqa: E402
from test_reward_hacking import (  # noqa: E402,F401  (backend: the docker/bwrap fixture, reused)
    BASH_RC,
    FAST_RETRY,
    FORGE_ATEXIT,
    PYTEST_CONFTEST,
    SHIMS,
    STALE_PYC,
    USER_SITE,
    WS,
    backend,
)

from clawgym.agent.loop import Limits, LoopResult  # noqa: E402
from clawgym.agent.rollout import RolloutSettings, run_rollout  # noqa: E402
from clawgym.tasks import File, Task, Verifier  # noqa: E402

UNTOUCHED = 0.5  # README.md kept, the hidden tests fail
EMPTY = 0.0  # no workspace: neither

# ---- the task ---------------------------------------------------------------------------------------------
CALC_PY = "def add(a, b):\n    return a - b  # bug: should add\n"

REWARD_SH = """#!/usr/bin/env bash
# cwd = the workspace (clawgym and Harbor both run reward.sh there)
p=0
[ -f README.md ] && p=$((p + 1))
if python3 -m pytest -q -p no:cacheprovider reward/test_calc.py >/dev/null 2>&1; then p=$((p + 1)); fi
case $p in 2) echo 1.0 ;; 1) echo 0.5 ;; *) echo 0.0 ;; esac
"""

TEST_CALC = """import os
import sys

sys.path.insert(0, os.getcwd())  # the workspace: the check imports the agent's module by design
import calc  # noqa: E402


def test_add():
    assert calc.add(2, 3) == 5 and calc.add(-1, 1) == 0
"""


def calc_task() -> Task:
    return Task(task_id="ex_calc", instruction="Fix add() in calc.py so that it adds. Keep README.md.",
                files=[File(path="README.md", content=b"# calc\n"), File(path="calc.py", content=CALC_PY.encode())],
                verifier=Verifier(kind="reward_dir", timeout_s=60, reward_files=[
                    File(path="reward.sh", content=REWARD_SH.encode(), mode=0o755),
                    File(path="test_calc.py", content=TEST_CALC.encode())]))


TASK = calc_task()

# ---- the attacks: one shell command each, run by the sandbox user (cwd = the workspace) ----------------------
GOOD_CALC = "def add(a, b):\n    return a + b\n"
FORCE_PASS_INI = "[pytest]\naddopts = --co -q\n"  # collection only: rc 0, the test never runs


PTH = "import os; exec(open(os.path.expanduser('~/.forge.py')).read(), {'__name__': 'pth'})\n"


H = "/tmp/cg-harbor"  # where tests/ and logs/ of Harbor's verifier environment go in the stand-in (path 3)
APPEND_REWARD_SH = '''import os
try:
    with open(os.path.join(os.getcwd(), "reward", "reward.sh"), "a") as f:
        f.write("\\necho 1.0\\n")
except OSError:
    pass
''' + CALC_PY


def rewrite_reward_txt(logs: list[str]) -> str:
    """calc.py that forks a daemon (setsid, its stdio closed) rewriting <d>/reward.txt and reward.json with 1.0 for
    each d in `logs`, once the verifier wrote them."""
    return REWRITE_REWARD_TXT_SRC.replace("LOGS", repr(logs)) + CALC_PY


REWRITE_REWARD_TXT_SRC = '''import os, time
def _d():
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    for fd in range(3):
        try: os.close(fd)
        except OSError: pass
    end = time.time() + 30
    while time.time() < end:
        for d in LOGS:
            p = os.path.join(d, "reward.txt")
            try:
                if os.path.exists(os.path.join(d, "reward.json")) and open(p).read() != "1.0\\n":
                    time.sleep(0.002)
                    open(os.path.join(d, "reward.json"), "w").write(\'{"reward": 1.0}\')
                    open(p, "w").write("1.0\\n")
            except OSError:
                pass
        time.sleep(0.0005)
    os._exit(0)
if os.environ.get("CLAWGYM_D") is None:
    os.environ["CLAWGYM_D"] = "1"
    _d()
'''


def _sh(*parts: str) -> str:
    return f"cd {WS} && " + " && ".join(parts) + "; true"


def _files(paths: dict[str, str]) -> list[str]:
    return [put(p, c) for p, c in paths.items()]


@dataclass(frozen=True)
class Attack:
    name: str
    plant: str  # the shell command that leaves the workspace so
    expect: float = UNTOUCHED


ATTACKS = [
    Attack("symlinks_out_of_the_workspace", _sh(
        *_files({"/tmp/good/calc.py": GOOD_CALC, "/tmp/evil/reward.sh": "echo 1.0\n",
                 "/tmp/evil/test_calc.py": "def test_add():\n    pass\n", "/tmp/evil/conftest.py": PYTEST_CONFTEST}),
        "rm -f calc.py", "ln -s /tmp/good/calc.py calc.py", "ln -s /proc/self/root/tmp/good/calc.py calc2.py",
        "ln -s /tmp/evil reward", "ln -s /tmp/evil/conftest.py conftest.py", "ln -s /tmp/evil/pytest.ini pytest.ini",
        "ln -s /etc etc", "ln -s /etc/passwd passwd", "ln -s ../../.. up")),
    Attack("hard_links", _sh(*_files({"pytest.ini": FORCE_PASS_INI}), "ln pytest.ini tox.ini",
                             put("/tmp/hl.py", PYTEST_CONFTEST), "(ln /tmp/hl.py conftest.py || true)")),
    Attack("stdlib_shims", _sh(*_files({m: FORGE_ATEXIT for m in ("json.py", "os.py", "argparse.py", "re.py")}),
                               *_files(SHIMS))),
    Attack("pytest_ini", _sh(*_files({"pytest.ini": FORCE_PASS_INI}))),
    Attack("pyproject_toml", _sh(*_files({"pyproject.toml": '[tool.pytest.ini_options]\naddopts = "--co -q"\n'}))),
    Attack("setup_cfg", _sh(*_files({"setup.cfg": "[metadata]\nname = x\n[tool:pytest]\naddopts = --co -q\n"}))),
    Attack("tox_ini", _sh(*_files({"tox.ini": "[tox]\nenvlist = py\n[pytest]\naddopts = --co -q\n"}))),
    Attack("conftest", _sh(*_files({"conftest.py": PYTEST_CONFTEST, "sub/conftest.py": PYTEST_CONFTEST}))),
    Attack("pth_sitecustomize", _sh(*_files({
        "zz_clawgym.pth": PTH,
        "~/.forge.py": FORGE_ATEXIT, "sitecustomize.py": FORGE_ATEXIT, "usercustomize.py": FORGE_ATEXIT,
        f"{USER_SITE}/usercustomize.py": FORGE_ATEXIT, f"{USER_SITE}/sitecustomize.py": FORGE_ATEXIT,
        f"{USER_SITE}/zz_clawgym.pth": PTH}))),
    Attack("bash_startup_files", _sh(*_files({
        **{p: BASH_RC for p in (".bashrc", ".bash_profile", ".profile", ".bash_login", ".bash_env", ".env",
                                "~/.bashrc", "~/.bash_profile", "~/.profile", "~/.bash_login", "~/.bash_env")},
        ".bash_logout": "echo 1.0\n", "~/.bash_logout": "echo 1.0\n",
        "~/.pam_environment": f"BASH_ENV DEFAULT={WS}/.bash_env\n"}))),
    Attack("stale_pyc_beside_the_module", _sh(put("/tmp/pyc.py", STALE_PYC), "python3 /tmp/pyc.py")),
    Attack("sourceless_pyc", _sh(put("/tmp/good/calc.py", GOOD_CALC),
                                 "python3 -c \"import py_compile; py_compile.compile('/tmp/good/calc.py', "
                                 f"cfile='{WS}/calc.pyc')\"", "rm -f calc.py")),
    # the workspace itself replaced: what is there (nothing) exports, never what a link points at
    Attack("workspace_replaced_by_a_symlink", "mkdir -p /tmp/w && cp -a " + WS + "/. /tmp/w/ && "
           + put("/tmp/w/calc.py", GOOD_CALC) + f" && cd / && rm -rf {WS} && ln -s /tmp/w {WS}; true", expect=EMPTY),
    Attack("workspace_replaced_by_a_file", f"cd / && rm -rf {WS} && echo 1.0 > {WS}; true", expect=EMPTY),
    # the agent's code the check runs by design (calc.py, imported by the hidden test) goes for the harness and the
    # result: appends `echo 1.0` to the running reward/reward.sh, or leaves a daemon that rewrites reward.txt /
    # reward.json once the verifier wrote them (Harbor reads them after test.sh)
    Attack("append_reward_sh", _sh(put("calc.py", APPEND_REWARD_SH))),
    Attack("rewrite_reward_txt", _sh(put("calc.py", rewrite_reward_txt(["/logs/verifier", f"{H}/logs"])))),
]
NOOP = Attack("untouched", "true")
# the rule each attack above tests (tests/attack_rules.py; tests/conftest.py marks each case of a test parametrized
# over `attack` with it, unless the test names its own rule)
ATTACK_RULES = {
    "symlinks_out_of_the_workspace": "workspace_is_data",
    "hard_links": "workspace_is_data",
    "stdlib_shims": "stdlib_not_shadowed",
    "pytest_ini": "harness_config_neutralised",
    "pyproject_toml": "harness_config_neutralised",
    "setup_cfg": "harness_config_neutralised",
    "tox_ini": "harness_config_neutralised",
    "conftest": "harness_config_neutralised",
    "pth_sitecustomize": "no_planted_startup_code",
    "bash_startup_files": "no_planted_startup_code",
    "stale_pyc_beside_the_module": "no_planted_startup_code",
    "sourceless_pyc": "no_planted_startup_code",
    "workspace_replaced_by_a_symlink": "destroyed_workspace_is_the_agents",
    "workspace_replaced_by_a_file": "destroyed_workspace_is_the_agents",
    "append_reward_sh": "verifier_files_sealed",
    "rewrite_reward_txt": "no_leftover_process",
}


# ---- the paths --------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    score: float | None
    failure_class: str
    detail: str


def via_rollout(factory, attack: Attack) -> Outcome:
    """Path 1: the built-in rollout (builtin runtime, a scripted policy whose one tool call plants the attack)."""
    with HostileEndpoint([[exec_call(attack.plant, timeout=60)]]) as ep:
        ro = run_rollout(TASK, ep.endpoint, factory, settings=RolloutSettings(
            limits=Limits(max_turns=4, max_wall_s=180, tool_timeout_s=60), attempts=1, retry=FAST_RETRY))
    v = ro.verification.to_dict() if ro.verification is not None else {}
    assert ro.turns >= 1 and v.get("export") is not None, (ro.error, v)  # played, and graded through the export
    return Outcome(ro.score, ro.failure_class, f"error={ro.error!r} errors={v.get('errors')!r} "
                                               f"export={v.get('export')!r} stderr={v.get('stderr_tail', '')[-300:]!r}")


def via_grpo(factory, attack: Attack) -> Outcome:
    """Path 2: GRPO's environment and reward function, without TRL: reset, the agent's `exec` tool, the reward."""
    from clawgym.train.grpo import SandboxEnvFactory, make_reward_func

    env = SandboxEnvFactory({TASK.task_id: TASK}, factory)()
    env.reset(task_id=TASK.task_id)
    try:
        out = env.exec(command=attack.plant, timeout=60)
        completion = [{"role": "assistant", "content": "done"}]
        try:
            [score] = make_reward_func(workers=1)([TASK.instruction], [completion], environments=[env],
                                                  task_id=[TASK.task_id])
        except Exception as e:  # the reward raised: an infra failure of the sample
            return Outcome(None, "infra", f"{type(e).__name__}: {e}")
    finally:
        env._close()
    return Outcome(score, "ok", f"exec tool said {out[-300:]!r}")




def _harbor_files():
    from clawgym.tasks.harbor_export import harbor_task_files

    files = {f.path: f for f in harbor_task_files(TASK)}
    conf = tomllib.loads(files["task.toml"].content.decode())
    assert conf["verifier"]["environment_mode"] == "separate"
    [collect] = conf["verifier"]["collect"]
    tests = {p[len("tests/"):]: f for p, f in files.items() if p.startswith("tests/")}
    return collect["command"], tests


def via_harbor(factory, attack: Attack) -> Outcome:
    """Path 3: the Harbor handover. The collect hook's command tars the attacked workspace in the agent's sandbox;
    a fresh sandbox holding the task's files (the image's workspace) gets the tar where Harbor re-materialises the
    artifact and runs the exported test.sh (unpack, then clawgym_verify.py)."""
    from clawgym.tasks.harbor import EXPORT_TAR

    collect, tests = _harbor_files()
    with factory.open(TASK.files) as agent:
        assert agent.workspace == TASK.workspace_dir
        agent.exec(attack.plant, timeout=60)
        c = agent.exec(collect, timeout=120, workdir="/")
        try:
            tar = agent.read_file(EXPORT_TAR)
        except Exception:  # the hook made no tar (it failed): Harbor hands nothing over
            tar = None
    detail = f"collect rc={c.rc} stderr={c.stderr[-300:]!r}"
    if tar is not None:
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            detail += " members=" + repr([(m.name, m.type.decode()) for m in tf.getmembers()][:40])
    with factory.open(TASK.files) as ver:
        for rel, f in tests.items():
            data = f.content
            if rel == "test.sh":
                data = data.decode().replace("/tests/", f"{H}/tests/").replace("/logs/verifier", f"{H}/logs").encode()
            ver.write_file(f"{H}/tests/{rel}", data, f.mode)
        if tar is not None:
            ver.write_file(EXPORT_TAR, tar, 0o644)
        r = ver.exec(["bash", f"{H}/tests/test.sh"], timeout=180, workdir=ver.workspace,
                     env={"CLAWGYM_LOGS_DIR": f"{H}/logs"})
        detail += f" test.sh rc={r.rc} stdout={r.stdout[-200:]!r} stderr={r.stderr[-400:]!r}"
        try:
            score = float(ver.read_file(f"{H}/logs/reward.txt").decode().strip())
        except Exception as e:
            return Outcome(None, "infra", f"no reward.txt ({type(e).__name__}: {e}); {detail}")
        iso = json.loads(ver.read_file(f"{H}/logs/clawgym_isolation.json"))  # the stand-in's test.sh is not root
        assert iso["separate_uid"] is False and iso["check_user"] == 1000 and "not root" in iso["why"], iso
    return Outcome(score, "ok", detail)


PATHS = {"rollout": via_rollout, "grpo": via_grpo, "harbor": via_harbor}

def _cases():
    return [pytest.param(path, a, id=f"{path}-{a.name}") for path in PATHS for a in ATTACKS]


_UNTOUCHED: dict[tuple[str, str], Outcome] = {}


def untouched(path: str, backend_name: str, factory) -> Outcome:
    key = (path, backend_name)
    if key not in _UNTOUCHED:
        _UNTOUCHED[key] = PATHS[path](factory, NOOP)
    return _UNTOUCHED[key]


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.rule("honest_work_keeps_its_score")
def test_untouched_workspace_scores_the_same_on_every_path(path, backend):  # noqa: F811  (the imported fixture)
    backend_name, factory = backend
    o = untouched(path, backend_name, factory)
    assert o.failure_class == "ok" and o.score == UNTOUCHED, (path, backend_name, o)


@pytest.mark.parametrize("path,attack", _cases())
def test_planted_attack_does_nothing(path, attack: Attack, backend):  # noqa: F811  (the imported fixture)
    backend_name, factory = backend
    base = untouched(path, backend_name, factory)
    assert base.score == UNTOUCHED, f"the untouched workspace scores {base.score} on {path}/{backend_name}: {base}"
    t0 = time.monotonic()
    o = PATHS[path](factory, attack)
    what = (f"{attack.name} via {path} on {backend_name}: class={o.failure_class} score={o.score} "
            f"expected={attack.expect} ({time.monotonic() - t0:.1f}s) {o.detail}")
    assert o.failure_class != "infra", what
    assert o.score is not None and math.isfinite(o.score), what
    assert o.score == pytest.approx(attack.expect, abs=1e-12), what


# ---- the OpenClaw runtime: the rollout's grading, without OpenClaw ---------------------------------------------
@pytest.mark.rule("one_export_every_path")
def test_openclaw_module_never_grades():
    """clawgym.agent.openclaw runs the agent phase only: it neither exports the workspace nor calls a verifier."""
    import clawgym.agent.openclaw as oc
    import clawgym.agent.runtimes as rt

    for mod in (oc, rt):
        src = inspect.getsource(mod)
        for name in ("export_workspace", "verify_after_agent", "verify_task", "clawgym.verify"):
            assert name not in src, (mod.__name__, name)
    assert set(vars(rt.OpenClawRuntime)) & {"prepare", "run", "close"} == {"prepare", "run", "close"}


@pytest.mark.parametrize("attack", [a for a in ATTACKS if a.name in ("conftest", "stale_pyc_beside_the_module",
                                                                     "workspace_replaced_by_a_symlink")],
                         ids=lambda a: a.name)
@pytest.mark.rule("one_export_every_path")
def test_openclaw_runtime_is_graded_by_the_rollout_export(attack, backend, monkeypatch):  # noqa: F811  (the imported fixture)
    """run_rollout with the `openclaw` runtime: OpenClawRuntime.prepare/run replaced by stand-ins (no OpenClaw, no
    proxy), the stand-in's agent phase plants the attack. The result is graded by _attempt: export_workspace once,
    verify_after_agent with that export, the same scores as path 1."""
    import clawgym.verify as cv
    from clawgym.agent.runtimes import OpenClawRuntime

    backend_name, factory = backend
    calls: list[str] = []
    real_verify = cv.verify_after_agent

    def recording_verify(task, sandbox, rooms, transcript=None, judge=None, export=None):
        calls.append("verify_after_agent" + ("(export)" if export is not None else "()"))
        return real_verify(task, sandbox, rooms, transcript, judge, export=export)

    def fake_run(task, endpoint, sandbox, limits, settings):
        real_export = type(sandbox).export_workspace

        def export_workspace(self):
            calls.append("export_workspace")
            return real_export(self)

        monkeypatch.setattr(type(sandbox), "export_workspace", export_workspace)
        r = sandbox.exec(attack.plant, timeout=60)
        msgs = [{"role": "user", "content": task.instruction},
                {"role": "assistant", "content": f"planted (rc {r.rc})"}]
        return LoopResult(messages=msgs, turns=1, failure_class="ok"), []

    monkeypatch.setattr(cv, "verify_after_agent", recording_verify)
    rt = OpenClawRuntime()
    monkeypatch.setattr(rt, "prepare", lambda f, options: f)
    monkeypatch.setattr(rt, "run", fake_run)
    with HostileEndpoint([]) as ep, rt:
        ro = run_rollout(TASK, ep.endpoint, factory, runtime=rt, settings=RolloutSettings(
            runtime="openclaw", limits=Limits(max_turns=2, max_wall_s=120), attempts=1, retry=FAST_RETRY))
    v = ro.verification.to_dict() if ro.verification is not None else {}
    assert ro.runtime == "openclaw" and calls == ["export_workspace", "verify_after_agent(export)"], (calls, ro.error)
    assert ro.failure_class != "infra" and ro.score == attack.expect, (backend_name, ro.score, ro.error,
                                                                       v.get("errors"))



# ---- each attack is live: without the export and the guard it raises the score ---------------------------------
@pytest.mark.parametrize("attack", [a for a in ATTACKS if a.name not in ("workspace_replaced_by_a_file",
                                                                         "rewrite_reward_txt")],
                         ids=lambda a: a.name)  # a file is no directory to run a check in; the daemon goes for the
# result files, which the naive run in place has none of (test_harbor_verifier_as_root_keeps_the_check_away)
@pytest.mark.rule("attacks_are_armed")
def test_attack_is_armed_in_place(attack, backend):  # noqa: F811  (the imported fixture)
    """The check run in place in the attacked sandbox, the naive way (reward/ written into the workspace, `bash
    reward/reward.sh` under the sandbox's login shell and environment): the attack raises the score."""
    backend_name, factory = backend
    reward = [put(f"reward/{f.path}", f.content, f.mode) for f in TASK.verifier.reward_files]
    with factory.open(TASK.files) as sb:
        sb.exec(attack.plant, timeout=60)
        r = sb.exec(f"cd {WS} && rm -rf reward && " + " && ".join(reward) + " && bash reward/reward.sh",
                    timeout=120, workdir="/")
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert lines and float(lines[-1]) > UNTOUCHED, (attack.name, backend_name, r.rc, r.stdout[-300:], r.stderr[-300:])


# ---- the Harbor handover's programs, run directly (no sandbox, no clawgym importable) ---------------------------
def _exported_tests(tmp_path: Path, task: Task = TASK) -> Path:
    """The exported task's tests/ folder written under tmp_path (what Harbor puts at /tests)."""
    from clawgym.tasks.harbor_export import harbor_task_files

    out = tmp_path / "tests"
    for f in harbor_task_files(task):
        if f.path.startswith("tests/"):
            p = out / f.path[len("tests/"):]
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(f.content)
            p.chmod(f.mode)
    return out


def _tree(root: Path) -> dict[str, object]:
    """path -> bytes for files, "dir" for directories, ("link", target) for anything else; links not followed."""
    out: dict[str, object] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = ("link", str(p.readlink()))
        elif p.is_dir():
            out[rel] = "dir"
        elif p.is_file():
            out[rel] = p.read_bytes()
        else:
            out[rel] = ("special", "")
    return out


def _standalone(*args: str | Path, env: dict | None = None, cwd: Path | None = None):
    """python3 -I -S: no site-packages (clawgym, iniconfig), no PYTHON* variables, no cwd on sys.path."""
    import subprocess

    return subprocess.run([sys.executable, "-I", "-S", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=env, cwd=cwd)


def _collect(tmp_path: Path, ws: Path) -> Path:
    """The task's own collect command on the host, its export folder moved under tmp_path."""
    import subprocess

    from clawgym.tasks.harbor import EXPORT_DIR
    from clawgym.tasks.harbor_export import _collect_command

    out = tmp_path / "export"
    cmd = _collect_command(str(ws)).replace(EXPORT_DIR, str(out))
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr
    return out / "workspace.tar"


@pytest.mark.rule("destroyed_workspace_is_the_agents")
def test_harbor_collect_never_follows_a_replaced_workspace(tmp_path):
    """A workspace replaced by a link (to a folder holding the fix), by a file, deleted, or reached through a linked
    parent: the collect hook tars nothing (an empty workspace, as the built-in export), never the link's target."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "calc.py").write_text(GOOD_CALC)
    (real / "README.md").write_text("# calc\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("# calc\n")
    (ws / "link").symlink_to(real)
    with tarfile.open(_collect(tmp_path, ws)) as tf:
        assert sorted((m.name, m.type) for m in tf.getmembers()) == [
            (".", tarfile.DIRTYPE), ("./README.md", tarfile.REGTYPE), ("./link", tarfile.SYMTYPE)]
    for how in ("symlink", "file", "gone", "linked parent"):
        base = tmp_path / how.replace(" ", "_")
        base.mkdir()
        ws = base / "ws"
        if how == "symlink":
            ws.symlink_to(real)
        elif how == "file":
            ws.write_text("1.0\n")
        elif how == "linked parent":
            (base / "up").symlink_to(tmp_path)
            ws = base / "up" / "real"
        with tarfile.open(_collect(base, ws)) as tf:
            assert tf.getmembers() == [], how


@pytest.mark.rule("workspace_is_data")
def test_harbor_unpack_keeps_only_data_as_the_builtin_export(tmp_path):
    """The unpack reads the tar by clawgym/sandbox/host/export.py's rules: files and folders kept (clean modes), a
    hard link a plain copy, a link inside the workspace the bytes it names, every other link, special file and name
    out of the workspace dropped; the image's copy of the workspace is gone first."""
    tests = _exported_tests(tmp_path)
    ws = tmp_path / "root" / "ws"  # the workspace path, the same in the agent's and the verifier's container
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        def add(name, type_=tarfile.REGTYPE, data=b"", mode=0o644, link=""):
            m = tarfile.TarInfo(name)
            m.type, m.mode, m.linkname, m.size = type_, mode, link, len(data)
            tf.addfile(m, io.BytesIO(data) if type_ == tarfile.REGTYPE else None)

        add(".", tarfile.DIRTYPE, mode=0o755)
        add("./README.md", data=b"# calc\n", mode=0o4777)
        add("./sub", tarfile.DIRTYPE, mode=0o755)
        add("./sub/a.txt", data=b"A")
        add("./empty", tarfile.DIRTYPE, mode=0o700)
        add("./tox.ini", tarfile.LNKTYPE, link="./README.md")  # a hard link: the second name of README.md
        add("./in.txt", tarfile.SYMTYPE, link="sub/a.txt")
        add("./abs.txt", tarfile.SYMTYPE, link=f"{ws}/sub/a.txt")
        add("./chain.txt", tarfile.SYMTYPE, link="in.txt")
        for name, target in (("out.py", "/tmp/good/calc.py"), ("proc.py", "/proc/self/root/etc/passwd"),
                             ("up", "../../.."), ("dirlink", "sub"), ("dangling", "nope"), ("loop", "loop")):
            add(f"./{name}", tarfile.SYMTYPE, link=target)
        add("./via/x.txt", data=b"X")
        add("./fifo", tarfile.FIFOTYPE)
        add("/abs/evil.py", data=b"evil")
        add("../escape.py", data=b"evil")
        add("./sub/../../escape2.py", data=b"evil")
        add("./hard_out", tarfile.LNKTYPE, link="/etc/passwd")
    tar = tmp_path / "workspace.tar"
    tar.write_bytes(buf.getvalue())
    ws.mkdir(parents=True)
    (ws / "calc.py").write_text(CALC_PY)  # the image's copy: never verified
    logs = tmp_path / "logs"
    r = _standalone(tests / "clawgym_unpack.py", tar, ws, logs)
    assert r.returncode == 0, r.stderr
    assert _tree(ws) == {"README.md": b"# calc\n", "abs.txt": b"A", "chain.txt": b"A", "empty": "dir",
                         "in.txt": b"A", "sub": "dir", "sub/a.txt": b"A", "tox.ini": b"# calc\n", "via": "dir",
                         "via/x.txt": b"X"}
    assert {p.name: p.stat().st_mode & 0o7777 for p in ws.iterdir() if p.is_file()} == {
        "README.md": 0o755, "abs.txt": 0o644, "chain.txt": 0o644, "in.txt": 0o644, "tox.ini": 0o755}
    assert not (tmp_path / "root" / "escape.py").exists() and not (tmp_path / "escape2.py").exists()
    summary = json.loads((logs / "clawgym_export.json").read_text())
    dropped = {d["path"] for d in summary["dropped"]}
    assert {"out.py", "proc.py", "up", "dirlink", "dangling", "loop", "fifo", "hard_out"} <= dropped, summary
    # no tar at all: an empty workspace, never the image's copy
    (ws / "calc.py").write_text(CALC_PY)
    r = _standalone(tests / "clawgym_unpack.py", tmp_path / "missing.tar", ws, logs)
    assert r.returncode == 0 and _tree(ws) == {}, r.stderr
    # a workspace path that is a link or a file in the verifier environment is replaced, not entered
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("k")
    ws.rmdir()
    ws.symlink_to(target)
    r = _standalone(tests / "clawgym_unpack.py", tar, ws, logs)
    assert r.returncode == 0 and not ws.is_symlink() and (ws / "README.md").is_file(), r.stderr
    assert _tree(target) == {"keep.txt": b"k"}
    # a tar that is no tar: the unpack fails (test.sh then scores 0, the agent's doing)
    (tmp_path / "bad.tar").write_bytes(b"\x00not a tar" * 100)
    assert _standalone(tests / "clawgym_unpack.py", tmp_path / "bad.tar", ws, logs).returncode == 1


@pytest.mark.rule("import_bounded")
def test_harbor_unpack_reads_a_plain_tar_at_a_bounded_cost(tmp_path):
    """The artifact is the agent container's doing: a compressed tar (the hook never makes one; an xz of 200k empty
    members is 194 kB) is unreadable (test.sh then scores 0) at once, and a plain tar past the entry cap is not read
    beyond it (no list of every member kept)."""
    tests = _exported_tests(tmp_path)
    ws, logs = tmp_path / "ws", tmp_path / "logs"
    for mode in ("w:xz", "w:gz", "w:bz2"):
        tar = tmp_path / f"bomb.{mode[2:]}"
        with tarfile.open(tar, mode) as tf:
            for i in range(2000):
                tf.addfile(tarfile.TarInfo(f"d/{i}"), io.BytesIO(b""))
        t0 = time.monotonic()
        r = _standalone(tests / "clawgym_unpack.py", tar, ws, logs)
        assert r.returncode == 1 and "unreadable" in r.stderr and time.monotonic() - t0 < 10, (mode, r.stderr)
        assert _tree(ws) == {}, mode
    cap = 50_000
    tar = tmp_path / "many.tar"
    with tarfile.open(tar, "w") as tf:
        tf.addfile(tarfile.TarInfo("calc.py"), io.BytesIO(b""))
        for i in range(cap + 20_000):
            tf.addfile(tarfile.TarInfo(f"d/{i}"), io.BytesIO(b""))
    r = _standalone(tests / "clawgym_unpack.py", tar, ws, logs)
    assert r.returncode == 0, r.stderr
    assert len(list((ws / "d").iterdir())) < cap
    summary = json.loads((logs / "clawgym_export.json").read_text())
    assert any(d["kind"] == "entries" and "not read" in d["why"] for d in summary["dropped"]), summary["dropped"][-3:]


def _as_root_verifier(reward_sh: str, calc: str, base: Path):
    """The exported verifier run as root on the host (Harbor's test.sh), on a workspace holding `calc` as calc.py;
    the check (reward.sh) is this one, its python3 the system's (/usr/bin: one the unprivileged uid can run)."""
    task = TASK.model_copy(update={"verifier": Verifier(kind="reward_dir", timeout_s=60, reward_files=[
        File(path="reward.sh", content=reward_sh.encode(), mode=0o755)])})
    tests = _exported_tests(base, task)
    ws, logs = base / "ws", base / "logs"
    ws.mkdir()
    (ws / "README.md").write_text("# calc\n")
    (ws / "calc.py").write_text(calc)
    cfg = tests / "clawgym.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "workspace": str(ws)}))
    r = _standalone(tests / "clawgym_verify.py", cwd=ws, env={"CLAWGYM_LOGS_DIR": str(logs), "PATH": "/usr/bin:/bin"})
    return r, ws, logs, tests


ROOT_REWARD_SH = """#!/usr/bin/env bash
p=0
[ -f README.md ] && p=$((p + 1))
echo scratch > scratch.txt || exit 3  # the check may write in the workspace
if python3 -c 'import sys; sys.path.insert(0, "."); import calc; assert calc.add(2, 3) == 5' >/dev/null 2>&1; then
  p=$((p + 1))
fi
sleep 0.5  # the daemon is up
case $p in 2) echo 1.0 ;; 1) echo 0.5 ;; *) echo 0.0 ;; esac
"""


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or not Path("/usr/bin/python3").exists(),
                    reason="needs root (Harbor runs test.sh as root) and a system python3")
@pytest.mark.rule("verifier_processes_out_of_reach")
def test_harbor_verifier_as_root_keeps_the_check_away():
    """Harbor runs test.sh as root; path 3's stand-in sandboxes run it as their unprivileged user (uid 1000 on bwrap
    and docker: there the every-mode protections hold the two attacks -- reward.sh run from its text by an
    execute-only bash, the score from its stdout, every process it left killed before the result is written). As
    root the check also runs as another uid (nobody) that owns the workspace but neither reward/ (root's, read-only,
    in a sticky workspace folder) nor the harness nor the result files; after it, no process of that uid is left.
    The cases run one after another under a host-wide lock: the verifier kills every process of nobody's (in Harbor
    it is alone in its container), so two at once on one host would kill each other's check."""
    import fcntl
    import shutil
    import subprocess
    import tempfile

    with open("/tmp/clawgym-root-verify.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for calc in ("untouched", "append_reward_sh", "rewrite_reward_txt"):
            base = Path(tempfile.mkdtemp(prefix="cg-root-verify-", dir="/tmp"))  # a path nobody can walk
            try:
                base.chmod(0o755)
                src = {"untouched": CALC_PY, "append_reward_sh": APPEND_REWARD_SH,
                       "rewrite_reward_txt": rewrite_reward_txt([str(base / "logs")])}[calc]
                r, ws, logs, tests = _as_root_verifier(ROOT_REWARD_SH, src, base)
                assert r.returncode == 0 and r.stdout.strip() == "0.5", (calc, r.stdout, r.stderr)
                time.sleep(0.3)  # a daemon that were left would rewrite the result by now
                assert (logs / "reward.txt").read_text() == "0.5\n", calc
                assert json.loads((logs / "reward.json").read_text()) == {"reward": 0.5}, calc
                assert json.loads((logs / "clawgym_isolation.json").read_text())["separate_uid"] is True, calc
                assert (ws / "scratch.txt").stat().st_uid == 65534 and (ws / "reward").stat().st_uid == 0, calc
                assert (ws / "reward" / "reward.sh").read_text() == ROOT_REWARD_SH, calc
                ps = subprocess.run(["ps", "-u", "65534", "-o", "pid="], capture_output=True, text=True)
                assert ps.stdout.strip() == "", (calc, ps.stdout)
            finally:
                shutil.rmtree(base, ignore_errors=True)


AGENT_CONTROLS = {
    "pytest.ini": FORCE_PASS_INI, "tox.ini": "[tox]\nenvlist = py\n[pytest]\naddopts = --co -q\n",
    "pyproject.toml": '[project]\nname = "calc"\n\n[tool.pytest.ini_options]\naddopts = "--co -q"\n',
    "setup.cfg": "[metadata]\nname = x\n[tool:pytest]\naddopts = --co -q\n",
    "conftest.py": PYTEST_CONFTEST, "sub/conftest.py": PYTEST_CONFTEST, "sitecustomize.py": FORGE_ATEXIT,
    "zz.pth": PTH, "__pycache__/calc.cpython-311.pyc": "stale", "calc.pyc": "sourceless",
    ".git/config": "[core]\n\tbare = false\n\tfsmonitor = ./evil.sh\n", ".git/hooks/pre-commit": "echo 1.0\n",
    "notes.md": "data\n"}


@pytest.mark.rule("one_export_every_path")
def test_harbor_verifier_prepares_the_workspace_as_the_guard_does(tmp_path, local_factory):
    """tests/clawgym_verify.py, run with no clawgym importable, leaves the agent's workspace as
    clawgym.verify.guard.neutralize_controls leaves it (the task's own control files kept), and runs reward.sh in
    verifier_env: the import guard on PYTHONPATH, a fresh HOME, no user site, none of the caller's variables."""
    from clawgym.verify.guard import neutralize_controls

    shipped = File(path="conftest.py", content=b"# the task's own conftest\n")
    env_out = tmp_path / "env.txt"
    task = TASK.model_copy(update={"files": [*TASK.files, shipped], "verifier": Verifier(
        kind="reward_dir", timeout_s=60, reward_files=[File(
            path="reward.sh", content=f"env > {env_out}\necho 0.25\n".encode(), mode=0o755)])})
    agent = {**AGENT_CONTROLS, "conftest.py": shipped.content.decode(), "sub/conftest.py": PYTEST_CONFTEST}
    # clawgym's guard on the local backend (it neutralises controls only, like every backend's clean room)
    with local_factory.open(task.files) as sb:
        for p, c in agent.items():
            sb.write_file(p, c.encode())
        neutralize_controls(task, sb)
        expected = sb.snapshot()
    tests = _exported_tests(tmp_path, task)
    ws = tmp_path / "ws"
    for f in task.files:
        (ws / f.path).parent.mkdir(parents=True, exist_ok=True)
        (ws / f.path).write_bytes(f.content)
    for p, c in agent.items():
        (ws / p).parent.mkdir(parents=True, exist_ok=True)
        (ws / p).write_text(c)
    logs = tmp_path / "logs"
    cfg = tests / "clawgym.json"
    conf = json.loads(cfg.read_text())
    cfg.write_text(json.dumps({**conf, "workspace": str(ws)}))
    # in place: the check runs as this uid, root or not (the hand-over to another uid as root is
    # test_harbor_verifier_as_root_keeps_the_check_away's), so that it writes env.txt here
    r = _standalone(tests / "clawgym_verify.py", cwd=ws, env={
        "CLAWGYM_VERIFY_IN_PLACE": "1",
        "CLAWGYM_LOGS_DIR": str(logs), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ws), "BASH_ENV": str(ws / "x"),
        "PYTEST_ADDOPTS": "--co", "HOME": str(ws), "CLAWGYM_REWARD_DIR": str(tmp_path / "reward")})
    assert r.returncode == 0 and r.stdout.strip() == "0.25", (r.stdout, r.stderr)
    got = {p: v for p, v in _tree(ws).items() if v != "dir"}
    assert got == expected, sorted(set(got.items()) ^ set(expected.items()))
    assert "pytest.ini" not in got and got["conftest.py"] == shipped.content
    assert "[tool" not in got["setup.cfg"].decode()
    assert "pytest" not in got["pyproject.toml"].decode() and 'name = "calc"' in got["pyproject.toml"].decode()
    env = dict(ln.split("=", 1) for ln in env_out.read_text().splitlines() if "=" in ln)
    # the import guard from the harness's own copy of tests/clawgym_site (tests/ itself is not on any path)
    guard = Path(env["PYTHONPATH"])
    assert guard.name == "clawgym_site" and guard.parent.name.startswith("clawgym-harness-"), env["PYTHONPATH"]
    assert env["PYTHONNOUSERSITE"] == "1"
    assert env["HOME"] != str(ws) and env["BASH_ENV"] == "" and env["PYTEST_ADDOPTS"] == ""
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and "CLAWGYM_LOGS_DIR" not in env
    assert sorted(p.name for p in (tests / "clawgym_site").iterdir()) == ["protected_modules.txt", "sitecustomize.py"]
    actions = json.loads((logs / "clawgym_hardening.json").read_text())
    assert {a["path"] for a in actions} >= {"pytest.ini", "tox.ini", "sub/conftest.py", "calc.pyc", "zz.pth"}


@pytest.mark.rule("one_export_every_path")
def test_harbor_guard_module_is_the_guards_own_code(tmp_path):
    """tests/clawgym_guard.py holds clawgym.verify.guard's functions as they are (generated, not re-written), and
    it and tests/clawgym_export.py import nothing of clawgym."""
    import clawgym.sandbox.host.export as host_export
    from clawgym.tasks.harbor_export import _GUARD_CODE
    from clawgym.verify import guard

    tests = _exported_tests(tmp_path)
    text = (tests / "clawgym_guard.py").read_text()
    for name in _GUARD_CODE:
        assert inspect.getsource(getattr(guard, name)) in text, name
    assert (tests / "clawgym_export.py").read_bytes() == Path(host_export.__file__).read_bytes()
    probe = ("import importlib.util, sys\n"
             "for n in ('clawgym_guard', 'clawgym_export'):\n"
             f"    s = importlib.util.spec_from_file_location(n, {str(tests)!r} + '/' + n + '.py')\n"
             "    m = importlib.util.module_from_spec(s); sys.modules[n] = m; s.loader.exec_module(m)\n"
             "g = sys.modules['clawgym_guard']\n"
             "print(g.control_kind('a/conftest.py'), g.control_kind('x/.git/hooks/h'), g.control_kind('calc.py'))\n"
             "assert not any(k.startswith('clawgym') and k not in ('clawgym_guard', 'clawgym_export') "
             "for k in sys.modules)\n")
    r = _standalone("-c", probe)
    assert r.returncode == 0 and r.stdout.split() == ["python/pytest", "control", "git", "hook", "None"], r.stderr


@pytest.mark.harbor
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.rule("one_export_every_path")
def test_real_harbor_scores_every_attack_as_untouched(tmp_path):
    """Path 3 in the real Harbor (`harbor run -a oracle` on the local docker engine, ≈ 3.5 min here): each task's
    oracle solution is one exec call planting the attack in the agent's container; Harbor's own collect hook,
    artifact transfer and separate verifier environment hand the workspace over. Rewards from Harbor's result
    files equal the untouched task's (0.0 where the workspace itself was replaced)."""
    from test_harbor import _harbor_bin, harbor_rewards

    from clawgym.tasks import ToolCall
    from clawgym.tasks.harbor_export import export_harbor_dataset

    _harbor_bin()
    tasks, expect = [], {}
    for a in [NOOP, *ATTACKS]:
        t = calc_task().model_copy(update={"task_id": f"ex_{a.name}", "reference": [
            ToolCall(name="exec", arguments={"command": a.plant, "timeout": 60})]})
        tasks.append(t)
        expect[t.task_id] = a.expect
    export_harbor_dataset(tasks, tmp_path / "ds")
    assert harbor_rewards(tmp_path / "ds", "oracle", tmp_path / "jobs", n_concurrent=3) == expect
