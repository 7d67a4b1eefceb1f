"""Parity with ClawGym's own harness: the no-op score of each of the 37 fixture tasks, verified through
clawgym.verify in real sandboxes (docker and bwrap), equals clawgym_train_sample_noop_scores.json exactly
(float equality). Also: hybrid grade()+rubric scoring and reward/ isolation inside a real sandbox."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clawgym.tasks import File, RubricProxy, RubricRule, Task, Verifier
from clawgym.tasks.clawgym_format import import_clawgym_folder
from clawgym.verify import verify_noop, verify_noop_many, verify_task

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fixtures():
    d = Path(os.environ.get("CLAWGYM_FIXTURES") or REPO.parent / "shared" / "fixtures")
    sample, scores = d / "clawgym_train_sample", d / "clawgym_train_sample_noop_scores.json"
    if not sample.is_dir() or not scores.is_file():
        pytest.skip(f"ClawGym fixtures not found at {d} (set CLAWGYM_FIXTURES)")
    rep = import_clawgym_folder(sample)
    assert rep.ok, rep.summary()
    return rep.tasks, json.loads(scores.read_text())


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_noop_parity_exact(backend, fixtures, request):
    factory = request.getfixturevalue(f"{backend}_factory")
    tasks, expected = fixtures
    assert len(tasks) == len(expected) == 37
    results = verify_noop_many(tasks, factory, workers=2)
    got = {r.task_id: r.score for r in results}
    errors = {r.task_id: r.error for r in results if r.error}
    assert errors == {}
    assert got == expected  # exact float equality, every task
    assert sum(1 for v in got.values() if v > 0) == 3  # the non-trivial ones really ran check.py


HYBRID_CODE = '''
import json, os
def grade(transcript, workspace_path):
    out = os.path.join(workspace_path, "output", "summary.json")
    ok = os.path.isfile(out)
    data = json.load(open(out)) if ok else {}
    return {"exists": ok, "total_right": data.get("total") == 6, "saw_transcript": len(transcript) == 2,
            "cannot_write_outside": not os.access("/usr/bin", os.W_OK)}
'''


def test_hybrid_in_isolating_sandbox(any_isolating_factory):
    t = Task(task_id="h1", instruction="Sum input/n.csv into output/summary.json and explain in output/notes.md",
             files=[File(path="input/n.csv", content=b"n\n1\n2\n3\n")],
             verifier=Verifier(kind="grade", code=HYBRID_CODE, rubric=[
                 RubricRule(name="explains", file_path="output/notes.md", scores={"0": "no", "1": "yes"},
                            proxy=RubricProxy(required_phrases=["total", "6"], min_words=4))]))
    r0 = verify_noop(t, any_isolating_factory)
    assert r0.score == pytest.approx(0.7 * 0.25) and r0.rubric_score == 0.0 and r0.error is None
    with any_isolating_factory.open(t.files) as sb:
        sb.write_file("output/summary.json", b'{"total": 6}')
        sb.write_file("output/notes.md", b"The total is 6, from three rows.")
        r = verify_task(t, sb, transcript=[{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"}])
        assert "reward" not in {p.split("/")[0] for p in sb.list_files()}  # grade code never hits the disk
    assert r.subscores == {"exists": 1.0, "total_right": 1.0, "saw_transcript": 1.0, "cannot_write_outside": 1.0}
    assert r.score == pytest.approx(1.0) and r.judge == "offline"


def test_agent_planted_reward_is_replaced(any_isolating_factory, fixtures):
    tasks, expected = fixtures
    t = next(x for x in tasks if x.task_id == "task_0168")
    with any_isolating_factory.open(t.files) as sb:
        sb.write_file("reward/reward.sh", b"echo 1.0\n", 0o755)
        sb.write_file("reward/check.py", b"print('{}')\n")
        r = verify_task(t, sb)
    assert r.score == expected["task_0168"] and r.error is None
