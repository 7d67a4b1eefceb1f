"""The `noop` policy (one reply, "I will not make any changes.") over imported suites, through the whole
rollout path (policy server, agent loop, isolating sandbox, verifier, offline judge): what an agent that
does nothing scores.

(a) ClawGym fixture folder (../shared/fixtures or CLAWGYM_FIXTURES): every score equals
    clawgym_train_sample_noop_scores.json exactly, none infra. test_verify_parity checks the same numbers
    through the verifier alone (verify_noop_many); this one goes through run_rollouts.
(b) a PinchBench checkout named by CLAWGYM_PINCHBENCH_DIR: every scored task scores 0, unjudged ones are
    counted (no judge endpoint, rules without proxies), none infra.
(c) always: three small PinchBench files (automated, llm_judge with whole-run criteria, hybrid) written to
    a tmp dir: automated -> scored 0; llm_judge without a judge -> "unjudged", score None; hybrid -> scored 0.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from clawgym.agent.policies import RetryPolicy
from clawgym.agent.rollout import SCORED_CLASSES, RolloutSettings, run_rollout, run_rollouts
from clawgym.tasks import import_any

REPO = Path(__file__).resolve().parents[2]
FAST_RETRY = RetryPolicy(attempts=2, backoff_s=0.05, timeout_s=30)


def _fixtures_dir() -> Path:
    return Path(os.environ.get("CLAWGYM_FIXTURES") or REPO.parent / "shared" / "fixtures")


def _infra(ros) -> dict[str, str | None]:
    return {r.task_id: r.error for r in ros if r.failure_class == "infra"}


# ------------------------------------------------------------------ (a) ClawGym fixture -------
def test_noop_rollouts_reproduce_clawgym_noop_scores(any_isolating_factory):
    d = _fixtures_dir()
    sample, scores = d / "clawgym_train_sample", d / "clawgym_train_sample_noop_scores.json"
    if not sample.is_dir() or not scores.is_file():
        pytest.skip(f"ClawGym fixtures not found at {d} (set CLAWGYM_FIXTURES)")
    rep = import_any(sample)
    assert rep.ok, rep.summary()
    expected = json.loads(scores.read_text())
    assert {t.task_id for t in rep.tasks} == set(expected)
    ros = run_rollouts(rep.tasks, "noop", any_isolating_factory, workers=2,
                       settings=RolloutSettings(retry_wait_s=0.5, retry=FAST_RETRY))
    assert _infra(ros) == {}
    assert {r.failure_class for r in ros} <= set(SCORED_CLASSES), {r.task_id: r.failure_class for r in ros}
    got = {r.task_id: r.score for r in ros}
    assert got == expected  # exact float equality, every task
    assert sum(v > 0 for v in got.values()) == sum(v > 0 for v in expected.values())
    # the agent really ran (one reply, no tool calls) and nothing in the workspace changed
    assert all(r.tool_calls == 0 and r.workspace_diff == [] for r in ros)


# ------------------------------------------------------------------ (b) a PinchBench checkout -
def test_noop_scores_zero_on_pinchbench_checkout(any_isolating_factory):
    env = os.environ.get("CLAWGYM_PINCHBENCH_DIR")
    if not env:
        pytest.skip("CLAWGYM_PINCHBENCH_DIR is not set (point it at a pinchbench/skill checkout)")
    root = Path(env)
    if not root.is_dir():
        pytest.skip(f"CLAWGYM_PINCHBENCH_DIR={env} is not a directory")
    rep = import_any(root)
    for e in rep.errors:  # one clear error per bad file, naming the file (and the field where there is one)
        assert e.file and str(e).startswith(e.file), str(e)
    if not rep.tasks:
        pytest.skip(f"no PinchBench task imported from {root}: {rep.summary()}")
    ros = run_rollouts(rep.tasks, "noop", any_isolating_factory, workers=2,
                       settings=RolloutSettings(retry_wait_s=0.5, retry=FAST_RETRY))
    assert _infra(ros) == {}
    scored = {r.task_id: r.score for r in ros if r.failure_class in SCORED_CLASSES}
    unjudged = [r for r in ros if r.failure_class == "unjudged"]
    assert len(scored) + len(unjudged) == len(ros)
    assert {k: v for k, v in scored.items() if v != 0} == {}, "a no-op agent got credit"
    for r in unjudged:
        assert r.score is None and r.verification and r.verification.unjudged_rules, r.task_id
    print(f"pinchbench noop: {len(ros)} tasks, {len(scored)} scored (all 0), {len(unjudged)} unjudged, "
          f"{len(rep.errors)} import errors")


# ------------------------------------------------------------------ (c) self-contained --------
AUTOMATED = textwrap.dedent('''\
    ---
    id: task_noop_automated
    name: Count Lines
    category: files
    grading_type: automated
    timeout_seconds: 60
    workspace_files:
      - path: data/items.txt
        content: |
          apple
          banana
          cherry
    ---

    ## Prompt

    Count the lines of `data/items.txt` and write the number to `count.txt`.

    ## Expected Behavior

    count.txt holds 3.

    ## Grading Criteria

    - [ ] count.txt exists and holds 3

    ## Automated Checks

    ```python
    import os

    def grade(transcript, workspace_path):
        p = os.path.join(workspace_path, "count.txt")
        exists = os.path.isfile(p)
        right = exists and open(p).read().strip() == "3"
        return {"exists": exists, "right": right}
    ```
    ''')

LLM_JUDGE = textwrap.dedent('''\
    ---
    id: task_noop_judge
    name: Explain Recursion
    category: writing
    grading_type: llm_judge
    timeout_seconds: 60
    workspace_files: []
    ---

    ## Prompt

    Explain recursion to a ten-year-old in a short paragraph.

    ## Expected Behavior

    A clear, friendly explanation in the reply.

    ## Grading Criteria

    - [ ] The explanation is correct and suited to a child

    ## LLM Judge Rubric

    ### Criterion 1: Correctness

    **Score 1.0**: Recursion is explained correctly.
    **Score 0.5**: Partly correct.
    **Score 0.0**: No explanation or wrong.

    ### Criterion 2: Audience

    **Score 1.0**: Suited to a ten-year-old.
    **Score 0.0**: Not suited.
    ''')

HYBRID = textwrap.dedent('''\
    ---
    id: task_noop_hybrid
    name: Sales Memo
    category: writing
    grading_type: hybrid
    timeout_seconds: 60
    grading_weights:
      automated: 0.6
      llm_judge: 0.4
    workspace_files:
      - source: sales.csv
        dest: data/sales.csv
    ---

    ## Prompt

    Summarise data/sales.csv in memo.md, stating the total.

    ## Expected Behavior

    memo.md states the total 30.

    ## Grading Criteria

    - [ ] memo.md exists

    ## Automated Checks

    ```python
    import os

    def grade(transcript, workspace_path):
        p = os.path.join(workspace_path, "memo.md")
        ok = os.path.isfile(p)
        return {"memo": ok, "total": ok and "30" in open(p).read()}
    ```

    ## LLM Judge Rubric

    ### Criterion 1: Accuracy (`memo.md`)

    **Score 1.0**: The total 30 is stated correctly.
    **Score 0.0**: No total.
    ''')


@pytest.fixture
def pinch_tasks(tmp_path):
    d = tmp_path / "pinch" / "tasks"
    d.mkdir(parents=True)
    (d / "task_noop_automated.md").write_text(AUTOMATED)
    (d / "task_noop_judge.md").write_text(LLM_JUDGE)
    (d / "task_noop_hybrid.md").write_text(HYBRID)
    (tmp_path / "pinch" / "assets").mkdir()
    (tmp_path / "pinch" / "assets" / "sales.csv").write_text("item,amount\na,10\nb,20\n")
    rep = import_any(tmp_path / "pinch")
    assert rep.ok, rep.summary()
    by_id = {t.task_id: t for t in rep.tasks}
    assert set(by_id) == {"task_noop_automated", "task_noop_judge", "task_noop_hybrid"}
    assert by_id["task_noop_judge"].verifier.kind == "none"
    assert all(not r.file_path and r.proxy is None for r in by_id["task_noop_judge"].verifier.rubric)
    return by_id


def test_noop_on_pinchbench_format(pinch_tasks, any_isolating_factory):
    ros = {tid: run_rollout(t, "noop", any_isolating_factory,
                            settings=RolloutSettings(retry_wait_s=0.5, retry=FAST_RETRY))
           for tid, t in pinch_tasks.items()}
    assert _infra(ros.values()) == {}

    a = ros["task_noop_automated"]
    assert a.failure_class in SCORED_CLASSES and a.score == 0.0, (a.failure_class, a.error)
    assert a.verification.subscores == {"exists": 0.0, "right": 0.0}
    assert a.verification.error is None  # grade() really ran and found nothing

    j = ros["task_noop_judge"]
    assert j.failure_class == "unjudged" and j.score is None, (j.failure_class, j.score, j.error)
    assert sorted(j.verification.unjudged_rules) == ["Criterion 1: Correctness", "Criterion 2: Audience"]
    assert j.verification.judge == "offline"

    # code 0; its rubric rule declares no proxy, so offline it is unjudged for EVERY rollout (the class depends on
    # the task and the judge only: an agent that writes the rule's file cannot turn its 0 into an exclusion)
    h = ros["task_noop_hybrid"]
    assert h.failure_class == "unjudged" and h.score is None, (h.failure_class, h.error)
    assert h.verification.code_score == 0.0 and h.verification.unjudged_rules


class _RecordingJudge:
    """Scores every rule 0 and records what it was shown."""

    name = "recording"

    def __init__(self):
        self.seen: list = []

    def score_rules(self, ctx, items):
        self.seen.append((list(ctx.transcript or []), set(ctx.existing_files), [it.rule.name for it in items]))
        return [{"score": 0.0, "reason": "stub"} for _ in items]


def test_noop_llm_judge_task_with_a_judge_is_scored(pinch_tasks, any_isolating_factory):
    """With a judge that can score every rule the same task is scored (0 here), and the judge is shown
    only the agent's own output: no prompt, no task files."""
    judge = _RecordingJudge()
    ro = run_rollout(pinch_tasks["task_noop_judge"], "noop", any_isolating_factory,
                     settings=RolloutSettings(retry_wait_s=0.5, retry=FAST_RETRY), judge=judge)
    assert ro.failure_class in SCORED_CLASSES and ro.score == 0.0, (ro.failure_class, ro.error)
    assert ro.verification.judge == "recording" and ro.verification.unjudged_rules == []
    assert len(judge.seen) == 1
    transcript, files, names = judge.seen[0]
    assert names == ["Criterion 1: Correctness", "Criterion 2: Audience"]
    assert files == set()
    assert transcript and {m.get("role") for m in transcript} == {"assistant"}
    assert "ten-year-old" not in json.dumps(transcript)  # the prompt is not the agent's output
