"""Verifier hardening (clawgym.verify.guard) and judging that never pays for nothing.

Unit level: which files count as harness control, git config sanitising, pytest sections, the verifier's
environment, offline judging (no proxy -> unjudged; whole-run rules see only the agent's own output).
Sandbox level (bwrap and docker): the import guard makes stdlib / installed modules win over planted
ones while workspace-only modules still import; the verifier runs with a fresh HOME; reward/ is sealed.
"""

from __future__ import annotations

import json

import pytest
from test_verify_runtime import TmpSandbox  # tests/ is on sys.path (pytest prepend import mode)

from clawgym.tasks import File, RubricRule, Task, Verifier
from clawgym.tasks.model import RubricProxy
from clawgym.verify import verify_task
from clawgym.verify.guard import (
    control_kind,
    neutralize_controls,
    prepare_for_verification,
    sanitize_git_config,
    verifier_env,
)
from clawgym.verify.judge import OfflineJudge, RubricContext, RuleInput
from clawgym.verify.result import VerificationResult
from clawgym.verify.runtime import agent_output, clamp_score


@pytest.mark.parametrize("path,kind", [
    ("conftest.py", "python/pytest control"), ("tests/conftest.py", "python/pytest control"),
    ("pytest.ini", "python/pytest control"), ("a/b/x.pth", "python/pytest control"),
    ("sitecustomize.py", "python/pytest control"), ("pkg/__pycache__/m.cpython-311.pyc", "python/pytest control"),
    (".git/hooks/pre-commit", "git hook"), (".git/config", "git config"), ("sub/.git/config", "git config"),
    (".git/commondir", "git pointer"), (".git", "gitdir file"), ("pyproject.toml", "section"),
    ("setup.cfg", "section"), ("report.md", None), ("src/json.py", None), (".git/HEAD", None),
    ("config", None),
])
def test_control_kind(path, kind):
    assert control_kind(path) == kind


def test_sanitize_git_config_keeps_inert_keys_only():
    cfg = """[core]
\trepositoryformatversion = 0
\tfilemode = true
\tfsmonitor = "touch /tmp/pwned; echo"
\thooksPath = /tmp/hooks
\tpager = sh -c evil
[remote "origin"]
\turl = https://example.com/r.git
\tfetch = +refs/heads/*:refs/remotes/origin/*
[filter "x"]
\tclean = sh -c evil
\tsmudge = sh -c evil
[include]
\tpath = ../evil.cfg
[includeIf "gitdir:/"]
\tpath = /tmp/e
[diff "y"]
\ttextconv = evil
[user]
\tname = A; email = b
[alias]
\tst = !sh -c evil
"""
    out = sanitize_git_config(cfg)
    low = out.lower()
    for bad in ("fsmonitor", "hookspath", "pager", "filter", "clean", "smudge", "include", "textconv",
                "alias", "evil", "/tmp"):
        assert bad not in low, (bad, out)
    assert "repositoryformatversion = 0" in out and "[remote \"origin\"]" in out
    assert "url = https://example.com/r.git" in out


def test_neutralize_restores_removes_and_strips_sections():
    task = Task(task_id="t", instruction="x", files=[
        File(path="conftest.py", content=b"# task's own\n"),
        File(path="pyproject.toml", content=b"[project]\nname='p'\n\n[tool.pytest.ini_options]\naddopts='-q'\n"),
        File(path="keep.py", content=b"x = 1\n")],
        verifier=Verifier(kind="grade", code="def grade(t, w):\n    return {'a': 1}\n"))
    sb = TmpSandbox(task.files)
    sb.write_file("conftest.py", b"import os; os._exit(0)\n")  # changed -> restored
    sb.write_file("tests/conftest.py", b"evil\n")  # added -> removed
    sb.write_file("x.pth", b"import evil\n")
    sb.write_file(".git/hooks/post-checkout", b"#!/bin/sh\nevil\n")
    sb.write_file("pyproject.toml", b"[project]\nname='p2'\n\n[tool.pytest.ini_options]\naddopts='-p evil'\n")
    sb.write_file("keep.py", b"x = 2\n")  # an ordinary deliverable: untouched
    acts = {a["path"]: a["action"] for a in neutralize_controls(task, sb)}
    assert acts == {"conftest.py": "restored", "tests/conftest.py": "removed", "x.pth": "removed",
                    ".git/hooks/post-checkout": "removed", "pyproject.toml": "pytest configuration removed"}
    assert sb.read_file("conftest.py") == b"# task's own\n"
    files = set(sb.list_files("."))
    assert "tests/conftest.py" not in files and "x.pth" not in files
    import tomllib

    py = tomllib.loads(sb.read_file("pyproject.toml").decode())  # rewritten from the parsed document
    assert py["project"]["name"] == "p2" and py["tool"]["pytest"]["ini_options"] == {"addopts": "-q"}
    assert sb.read_file("keep.py") == b"x = 2\n"


def test_verifier_env_is_whole_and_clean():
    env = verifier_env("/tmp/v/home", "/tmp/v/py", "/w")
    assert env["HOME"] == "/tmp/v/home" and env["PYTHONPATH"] == "/tmp/v/py"
    assert env["PYTHONNOUSERSITE"] == "1" and env["GIT_CONFIG_GLOBAL"] == "/dev/null"
    assert env["PATH"].split(":")[0] == "/usr/local/sbin" and "/root" not in env["PATH"]
    keys = {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(int(env["GIT_CONFIG_COUNT"]))}
    assert keys["core.hooksPath"] == "/dev/null" and keys["core.fsmonitor"] == "false"
    assert env["BASH_ENV"] == "" and env["LD_PRELOAD"] == "" and env["PYTHONSTARTUP"] == ""


@pytest.mark.parametrize("x,want,err", [(0.5, 0.5, False), (1e300, 1.0, False), (-3, 0.0, False),
                                        (float("inf"), 0.0, True), (float("nan"), 0.0, True)])
def test_clamp_score(x, want, err):
    res = VerificationResult(task_id="t", score=0.0)
    assert clamp_score(x, res, "code") == want
    assert bool(res.errors) == err


def test_agent_output_drops_prompts_and_tool_results():
    tr = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "write the report"},
          {"role": "assistant", "content": "ok", "tool_calls": [{"id": "1", "function": {"name": "read"}}]},
          {"role": "tool", "tool_call_id": "1", "content": "FILE TEXT"}]
    out = agent_output(tr)
    assert out == [{"role": "assistant", "content": "ok", "tool_calls": [{"id": "1", "function": {"name": "read"}}]}]


def _rubric_task(rules, files=()):
    return Task(task_id="r", instruction="Write a summary of the meeting to summary.md", files=list(files),
                verifier=Verifier(kind="none", rubric=rules))


NOOP = [{"role": "system", "content": "You are a helpful assistant. summary meeting"},
        {"role": "user", "content": "Write a summary of the meeting to summary.md"},
        {"role": "assistant", "content": "I will not make any changes."}]


def test_offline_rule_without_proxy_is_unjudged_never_credit():
    task = _rubric_task([RubricRule(name="quality", file_path="", scores={"1": "great"}),
                         RubricRule(name="file", file_path="notes.md", scores={"1": "ok"})],
                        files=[File(path="notes.md", content=b"meeting notes, long enough text\n")])
    res = verify_task(task, TmpSandbox(task.files), NOOP, judge="offline")
    # neither rule declares a proxy: both unjudged offline, whether the agent wrote notes.md or not (the class
    # never depends on the workspace, so writing a rule's file cannot turn a 0 into an exclusion)
    assert res.unjudged and res.unjudged_rules == ["quality", "file"]
    rows = {r["name"]: r for r in res.rule_scores}
    assert rows["quality"]["score"] is None and rows["quality"]["unjudged"] and rows["file"]["unjudged"]
    sb = TmpSandbox(task.files)
    sb.write_file("notes.md", b"x")
    again = verify_task(task, sb, NOOP, judge="offline")
    assert again.unjudged_rules == res.unjudged_rules and again.score == res.score == 0.0


def test_whole_run_proxy_sees_only_agent_output():
    rule = RubricRule(name="mentions", file_path="", scores={"1": "x"},
                      proxy=RubricProxy(required_phrases=["summary", "meeting"]))
    task = _rubric_task([rule])
    res = verify_task(task, TmpSandbox(), NOOP, judge="offline")  # the phrases are only in the prompts
    assert not res.unjudged and res.score == 0.0
    did = NOOP[:2] + [{"role": "assistant", "content": "Here is the meeting summary."}]
    assert verify_task(task, TmpSandbox(), did, judge="offline").score == 1.0


def test_negative_only_checks_never_credit_nothing():
    j = OfflineJudge()
    neg = RubricRule(name="n", file_path="", scores={}, proxy=RubricProxy(forbidden_phrases=["lorem"], max_words=50))
    assert not j.can_judge(neg)
    mixed = RubricRule(name="m", file_path="", scores={},
                       proxy=RubricProxy(required_phrases=["total"], forbidden_phrases=["lorem"]))
    ctx = RubricContext(task_id="t", instruction="", transcript=agent_output(NOOP))
    out = j.score_rules(ctx, [RuleInput(rule=mixed, content=None)])
    assert out[0]["score"] == 0.0  # the forbidden phrase is absent, but nothing positive was produced


# ------------------------------------------------------------------ in real sandboxes -------------
def _iso(request, name):
    return request.getfixturevalue(name)


@pytest.fixture(params=["bwrap_factory", "docker_factory"])
def iso_factory(request):
    return request.getfixturevalue(request.param)


def test_import_guard_env_and_sealed_reward(iso_factory):
    check = (
        "import json, os, sys, subprocess\n"
        "r = subprocess.run([sys.executable, '-c', 'import json, helper; print(json.__file__, helper.VALUE)'],"
        " capture_output=True, text=True, cwd=os.environ.get('WORKSPACE'))\n"
        "out = {'json_real': json.__file__.startswith('/usr/lib/python3'),\n"
        "       'child_json_real': r.stdout.strip().startswith('/usr/lib/python3'),\n"
        "       'helper': r.stdout.strip().endswith(' 7'),\n"
        "       'fresh_home': not os.path.exists(os.path.expanduser('~/.bashrc')) and os.environ['HOME'] != '/root',\n"
        "       'no_user_site': os.environ.get('PYTHONNOUSERSITE') == '1'}\n"
        "for name in ('reward/check.py', 'reward/new.txt'):\n"
        "    try:\n"
        "        open(name, 'a').write('x'); out['sealed_' + name] = 0\n"
        "    except OSError:\n"
        "        out['sealed_' + name] = 1\n"
        "print(json.dumps(out))\n")
    reward_sh = ("#!/usr/bin/env bash\nset -euo pipefail\n"
                 "python3 reward/check.py | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); "
                 "bad=[k for k,v in d.items() if not v]; print(bad, file=sys.stderr); "
                 "print(sum(map(float, d.values()))/len(d))'\n")
    task = Task(task_id="guard", instruction="x", files=[File(path="helper.py", content=b"VALUE = 7\n")],
                verifier=Verifier(kind="reward_dir", reward_files=[
                    File(path="reward.sh", content=reward_sh.encode(), mode=0o755),
                    File(path="check.py", content=check.encode())]))
    with iso_factory.open(task.files) as sb:
        # what an agent leaves behind
        sb.write_file("json.py", b"raise SystemExit('planted json')\n")
        sb.exec("mkdir -p ~/.local/lib/python3.11/site-packages && "
                "echo 'import os; os._exit(0)' > ~/.local/lib/python3.11/site-packages/usercustomize.py && "
                "echo 'echo planted' > ~/.bashrc", timeout=20)
        res = verify_task(task, sb, [], judge="offline")
    assert res.errors == [], (res.errors, res.stderr_tail)
    assert res.score == 1.0, res.stderr_tail


def test_prepare_kills_leftovers_and_empties_home_and_tmp(iso_factory):
    task = Task(task_id="p", instruction="x", files=[File(path="a.txt", content=b"a")],
                verifier=Verifier(kind="grade", code="def grade(t, w):\n    return {'a': 1}\n"))
    with iso_factory.open(task.files) as sb:
        sb.exec("setsid nohup sh -c 'while :; do sleep 0.2; done' >/dev/null 2>&1 & "
                "echo x > /tmp/left; mkdir -p ~/.config && echo y > ~/.config/z", timeout=20)
        prep = prepare_for_verification(task, sb)
        r = sb.exec(["python3", "-c", "import os\nn = 0\nfor p in os.listdir('/proc'):\n    try:\n"
                     "        n += open(f'/proc/{p}/cmdline', 'rb').read().startswith(b'sh\\0-c\\0while')\n"
                     "    except (OSError, ValueError):\n        pass\nprint(n)"], timeout=20, env=prep.env)
        assert r.stdout.split() == ["0"], r
        r = sb.exec("ls -A /tmp; ls -A /root ; ls -A /root/.openclaw", timeout=20, env=prep.env)
        out = r.stdout.split()
        assert "left" not in out and ".config" not in out, out
        assert "workspace" in out  # the workspace itself survives
        assert sb.read_file("a.txt") == b"a"
        assert json.loads(json.dumps(prep.actions)) == []


def test_replaced_workspace_path_fails_closed_not_infra(iso_factory):
    """The agent swaps a directory on the way to the workspace for a symlink: the verifier does not run on
    whatever it points at; the task scores 0 with an error (the agent's doing), no SandboxError (infra)."""
    task = Task(task_id="swap", instruction="x", files=[File(path="a.txt", content=b"a")],
                verifier=Verifier(kind="grade", code="def grade(t, w):\n    return {'a': 1}\n"))
    with iso_factory.open(task.files) as sb:
        r = sb.exec("mkdir -p /tmp/fake/workspace && cp -r ~/.openclaw/workspace/. /tmp/fake/workspace/ && "
                    "mv ~/.openclaw ~/.moved && ln -s /tmp/fake ~/.openclaw", timeout=20)
        assert r.rc == 0, r
        res = verify_task(task, sb, [], judge="offline")
    assert res.score == 0.0 and any("could not be made safe" in e for e in res.errors), res.errors


# ---- parsed pytest configuration, the shipped protected-module list, the workspace export --------------------
@pytest.mark.parametrize("text", [
    'tool.pytest.ini_options.addopts = "--co"\n',
    '[tool]\npytest.ini_options.addopts = "--co"\n',
    '[ tool . pytest . ini_options ]\naddopts = "--co"\n',
    '["tool"."pytest".ini_options]\naddopts = "--co"\n',
    'tool = {pytest = {ini_options = {addopts = "--co"}}}\n',
    '[project]\nname = "x"\n[tool."pytest".ini_options]\naddopts = "--co"\n',
])
def test_pyproject_pytest_table_removed_in_every_spelling(text):
    import tomllib

    from clawgym.verify.guard import strip_pytest_config

    out = strip_pytest_config("pyproject.toml", text, None)
    assert out is not None
    doc = tomllib.loads(out)
    assert "pytest" not in (doc.get("tool") or {})
    if "project" in text:
        assert doc["project"] == {"name": "x"}  # the rest of the agent's file is kept


def test_pyproject_keeps_the_tasks_own_pytest_table():
    import tomllib

    from clawgym.verify.guard import strip_pytest_config

    orig = '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
    assert strip_pytest_config("pyproject.toml", orig, orig) is None
    out = strip_pytest_config("pyproject.toml", 'tool.pytest.ini_options = {addopts = "--co"}\n', orig)
    assert tomllib.loads(out)["tool"]["pytest"] == {"ini_options": {"testpaths": ["tests"]}}
    assert strip_pytest_config("pyproject.toml", '[project]\nname = "y"\n', None) is None


@pytest.mark.parametrize("text", ["[tool:pytest]\naddopts = --co\n", "[tool:pytest] ; c\naddopts = --co\n",
                                  "[metadata]\nname = x\n  [tool:pytest]\naddopts = --co\n"])
def test_setup_cfg_pytest_sections_removed(text):
    from clawgym.verify.guard import _ini_pytest_sections, strip_pytest_config

    out = strip_pytest_config("setup.cfg", text, None)
    assert out is not None and not _ini_pytest_sections(out)


def test_shipped_protected_list_covers_the_rootfs():
    """The import guard's data: every name the sandbox's own library imports is in the shipped list."""
    import os

    from clawgym.verify.protected import library_dirs, scan, shipped

    rootfs = os.environ.get("CLAWGYM_ROOTFS", "/var/lib/clawgym/rootfs")
    if not library_dirs(rootfs):
        pytest.skip(f"no sandbox rootfs with a python library at {rootfs} (scripts/build_sandbox_image.sh)")
    missing = scan(rootfs) - shipped()
    assert not missing, f"regenerate with `python -m clawgym.verify.protected`: {sorted(missing)[:20]}"
    assert {"org", "java", "vms_lib"} <= shipped()  # platform shims outside sys.stdlib_module_names


def test_export_resolves_links_inside_and_drops_the_rest(tmp_path):
    import os

    from clawgym.sandbox import get_factory

    f = get_factory("local")
    try:
        with f.open([File(path="in.txt", content=b"data\n")]) as sb:
            ws = sb.host_workspace
            os.makedirs(f"{ws}/out/empty")
            os.symlink("../in.txt", f"{ws}/out/rel.txt")
            os.symlink("/etc/passwd", f"{ws}/abs.txt")
            os.symlink(f"/proc/self/root{ws}/in.txt", f"{ws}/proc.txt")
            os.symlink("out", f"{ws}/outlink")
            os.symlink("outlink/rel.txt", f"{ws}/chain.txt")
            os.symlink("loop2", f"{ws}/loop1")
            os.symlink("loop1", f"{ws}/loop2")
            os.symlink("reward/check.py", f"{ws}/r.txt")
            os.mkfifo(f"{ws}/fifo")
            with open(f"{ws}/x.sh", "w") as fh:
                fh.write("#!/bin/sh\n")
            os.chmod(f"{ws}/x.sh", 0o6777)
            e = sb.export_workspace()
            # the link's target, inside the workspace, changes after the export: the export keeps the old bytes
            with open(f"{ws}/in.txt", "w") as fh:
                fh.write("changed\n")
        assert sorted(e.files) == ["chain.txt", "in.txt", "out/rel.txt", "x.sh"]
        assert e.files["chain.txt"] == e.files["out/rel.txt"] == b"data\n"
        assert e.modes["x.sh"] == 0o755 and e.modes["in.txt"] == 0o644
        assert e.empty_dirs() == ["out/empty"]
        dropped = {d["path"]: d["why"] for d in e.dropped}
        assert set(dropped) == {"abs.txt", "proc.txt", "outlink", "loop1", "loop2", "r.txt", "fifo"}
        assert "outside" in dropped["abs.txt"] and "outside" in dropped["proc.txt"]
        assert "directory" in dropped["outlink"] and "levels" in dropped["loop1"]
        with f.rooms().open(e.file_objects()) as room:
            room.make_dirs(e.empty_dirs())
            assert room.read_file("chain.txt") == b"data\n"
            assert os.path.isdir(f"{room.host_workspace}/out/empty")
            assert not os.path.islink(f"{room.host_workspace}/chain.txt")
    finally:
        f.close()
