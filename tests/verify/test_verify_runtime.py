"""verify_task semantics on a throwaway in-test sandbox (a temp dir + subprocess; no isolation).

The real backends (docker, bwrap) are exercised by tests/verify/test_verify_parity.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from clawgym.sandbox.base import ExecResult, Sandbox, SandboxConfig, SandboxError
from clawgym.tasks.model import File, RubricProxy, RubricRule, Task, Verifier
from clawgym.verify import OfflineJudge, VerificationResult, make_judge, verify_noop, verify_task


class TmpSandbox(Sandbox):
    backend = "test-tmp"

    def __init__(self, files=()):
        self.root = tempfile.mkdtemp(prefix="cg-verify-test-")
        super().__init__(SandboxConfig(workspace=self.root))
        self.write_files(files)

    def exec(self, cmd, timeout=None, workdir=None, env=None, stdin=None, max_output=1_000_000):
        if isinstance(cmd, str):
            cmd = ["bash", "-lc", cmd]
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=workdir or self.root, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = p.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            out, err = p.communicate()
            return ExecResult(124, out.decode(), err.decode(), True, time.perf_counter() - t0)
        return ExecResult(p.returncode, out.decode(), err.decode(), False, time.perf_counter() - t0)

    def _p(self, path):
        return Path(self.root) / path

    def write_file(self, path, content, mode=0o644):
        p = self._p(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)
        os.chmod(p, mode)

    def read_file(self, path):
        return self._p(path).read_bytes()

    def list_files(self, path="."):
        base = self._p(path)
        return sorted(str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file())

    def remove(self, path):
        p = self._p(path)
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)


class TmpFactory:
    def open(self, files=()):
        return TmpSandbox(files)


def grade_task(code: str, rubric=None, **kw) -> Task:
    return Task(task_id="t1", instruction="Write output/report.md summarising input/data.csv.",
                files=[File(path="input/data.csv", content=b"a,b\n1,2\n")],
                verifier=Verifier(kind="grade", code=code, rubric=rubric, **kw))


GRADE_OK = '''
import os
def grade(transcript, workspace_path):
    p = os.path.join(workspace_path, "output", "report.md")
    ok = os.path.isfile(p)
    return {"exists": ok, "mentions_total": ok and "total" in open(p).read().lower(), "half": 0.5,
            "n_msgs": float(len(transcript) > 0)}
'''


def test_grade_mean_of_subscores_bools_count_one_zero():
    t = grade_task(GRADE_OK)
    with TmpSandbox(t.files) as sb:
        r0 = verify_task(t, sb)
        assert r0.score == pytest.approx(0.5 / 4) and r0.error is None
        assert r0.subscores == {"exists": 0.0, "mentions_total": 0.0, "half": 0.5, "n_msgs": 0.0}
        sb.write_file("output/report.md", b"# Report\nThe total is 3.\n")
        r1 = verify_task(t, sb, transcript=[{"role": "user", "content": "hi"}])
        assert r1.score == pytest.approx((1 + 1 + 0.5 + 1) / 4)
        assert r1.code_score == r1.score and r1.rubric_score is None and r1.judge is None
        # the check code never lands in the workspace
        assert sb.list_files() == ["input/data.csv", "output/report.md"]


@pytest.mark.parametrize("code,needle", [
    ("def grade(t, w):\n    raise RuntimeError('boom')\n", "boom"),
    ("def grade(t, w):\n    return {'a': 'yes'}\n", "non-numeric"),
    ("def grade(t, w):\n    return {}\n", "empty dict"),
    ("x = 1\n", "no grade"),
    ("def grade(t, w):\n    import time; time.sleep(30)\n", "timed out"),
    ("def grade(t, w:\n", "SyntaxError"),
])
def test_grade_failures_score_zero_and_keep_error(code, needle):
    t = grade_task(code, timeout_s=2.0)
    with TmpSandbox(t.files) as sb:
        r = verify_task(t, sb)
    assert r.score == 0.0 and r.code_score == 0.0
    assert r.error and needle in r.error, r.error


def reward_task(sh: str, check: str | None = None, timeout_s=120.0) -> Task:
    rf = [File(path="reward.sh", content=sh.encode(), mode=0o755)]
    if check:
        rf.append(File(path="check.py", content=check.encode()))
    return Task(task_id="r1", instruction="do it", files=[File(path="input/x.txt", content=b"x")],
                verifier=Verifier(kind="reward_dir", reward_files=rf, timeout_s=timeout_s))


def test_reward_dir_last_line_and_agent_reward_dir_replaced():
    check = ("import json, os, sys\nws = sys.argv[1]\n"
             "print(json.dumps({'reward': 0.5, 'a': True, "
             "'b': os.path.exists(os.path.join(ws, 'reward', 'planted.txt'))}))\n")
    sh = ("#!/usr/bin/env bash\nset -euo pipefail\necho noise\n"
          "python3 reward/check.py \"$PWD\" | python3 -c 'import json,sys; d=json.load(sys.stdin); "
          "print(sum(float(v) for v in d.values())/len(d))'\n")
    t = reward_task(sh, check)
    with TmpSandbox(t.files) as sb:
        sb.write_file("reward/planted.txt", b"agent was here")
        sb.write_file("reward/reward.sh", b"echo 1.0\n", 0o755)
        r = verify_task(t, sb)
        assert r.error is None, r.error
        assert r.score == 0.5  # (0.5 + 1 + 0) / 3: the agent's planted reward/ was removed first
        assert r.subscores == {"reward.sh": 0.5}
        assert not any(p == "reward/planted.txt" for p in sb.list_files())


@pytest.mark.parametrize("sh,needle", [
    ("echo 0.7\nexit 3\n", "exited 3"),
    ("echo not-a-number\n", "not a float"),
    ("echo\n", "printed nothing"),
    ("sleep 20; echo 1\n", "timed out"),
    ("echo nan\n", "finite"),
])
def test_reward_dir_failures(sh, needle):
    t = reward_task(sh, timeout_s=1.5)
    with TmpSandbox(t.files) as sb:
        r = verify_task(t, sb)
    assert r.score == 0.0 and needle in (r.error or ""), r.error


def test_reward_dir_workspace_mismatch_is_reported():
    sh = "python3 /root/.openclaw/workspace/reward/check.py /root/.openclaw/workspace\n"
    t = reward_task(sh)
    with TmpSandbox(t.files) as sb:
        r = verify_task(t, sb)
    assert r.score == 0.0 and "hard-codes /root/.openclaw/workspace" in r.error


RUBRIC = [
    RubricRule(name="clarity", file_path="output/report.md",
               scores={"0": "bad", "0.25": "", "0.5": "ok", "0.75": "", "1": "great"},
               proxy=RubricProxy(required_phrases=["total"], min_words=5, max_words=200,
                                 required_headings=["Report"])),
    RubricRule(name="memo", file_path="output/memo.md", scores={"0": "no", "1": "yes"}),
]


def test_hybrid_offline_proxies_and_missing_file():
    t = grade_task(GRADE_OK, rubric=RUBRIC)
    with TmpSandbox(t.files) as sb:
        sb.write_file("output/report.md", b"# Report\nThe total is 3 apples.\n")
        r = verify_task(t, sb, transcript=[{"role": "user", "content": "go"}])
    assert r.judge == "offline"
    by = {x["name"]: x for x in r.rule_scores}
    assert by["clarity"]["score"] == 1.0
    # memo declares no proxy: unjudged offline whatever the workspace holds (its file is missing here) -- the
    # class depends on the task and the judge, never on what the agent wrote
    assert by["memo"]["unjudged"] and by["memo"]["score"] is None and r.unjudged_rules == ["memo"]
    assert r.rubric_score == 1.0
    assert r.code_score == pytest.approx(3.5 / 4)
    assert r.score == pytest.approx(0.7 * 3.5 / 4 + 0.3 * 1.0)
    d = r.to_dict()
    assert set(d) >= {"task_id", "score", "code_score", "rubric_score", "subscores", "rule_scores", "error",
                      "judge", "duration_s"}
    json.dumps(d)
    assert VerificationResult.from_dict(d) == r


def test_offline_proxy_partial_floors_to_scale():
    t = grade_task(GRADE_OK, rubric=RUBRIC[:1])
    with TmpSandbox(t.files) as sb:
        # phrase, >=5 words, <=200 ok; heading missing
        sb.write_file("output/report.md", b"no heading here, the total\n")
        r = verify_task(t, sb)
    assert r.rule_scores[0]["score"] == 0.75
    assert "heading" in r.rule_scores[0]["reason"]


def test_rubric_only_task_and_noop():
    t = Task(task_id="ro", instruction="write", verifier=Verifier(kind="none", rubric=RUBRIC[1:]))
    r = verify_noop(t, TmpFactory())
    assert r.code_score is None and r.score == 0.0 and r.rubric_score == 0.0


def test_judge_exception_propagates_never_a_zero():
    """A judge that fails is our failure: it leaves verify_task (the rollout becomes infra), never a 0."""
    class Broken:
        name = "broken"

        def score_rules(self, ctx, items):
            raise RuntimeError("endpoint down")

    t = grade_task(GRADE_OK, rubric=RUBRIC[:1])
    with TmpSandbox(t.files) as sb:
        sb.write_file("output/report.md", b"# Report\ntotal\n")
        with pytest.raises(RuntimeError, match="endpoint down"):
            verify_task(t, sb, judge=Broken())


def test_make_judge_specs(monkeypatch):
    assert isinstance(make_judge(None), OfflineJudge)
    assert isinstance(make_judge("offline"), OfflineJudge)
    monkeypatch.delenv("CLAWGYM_JUDGE_BASE_URL", raising=False)
    assert isinstance(make_judge("auto"), OfflineJudge)
    j = make_judge("openai:m1@http://127.0.0.1:9/v1")
    assert j.name == "openai:m1"
    with pytest.raises(ValueError):
        make_judge("nonsense")


def test_verify_task_opens_its_own_sandbox_from_factory():
    t = grade_task(GRADE_OK)
    r = verify_task(t, files=list(t.files) + [File(path="output/report.md", content=b"total 3")], factory=TmpFactory())
    assert r.subscores["exists"] == 1.0 and r.subscores["mentions_total"] == 1.0


def test_sandbox_failure_propagates_as_infra():
    class Dead(TmpSandbox):
        def exec(self, *a, **k):
            raise SandboxError("container died")

    t = grade_task(GRADE_OK)
    with Dead(t.files) as sb, pytest.raises(SandboxError, match="container died"):
        verify_task(t, sb)
