"""PinchBench task files: import (inline and asset workspace files), scoring, round trip, errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from test_verify_runtime import TmpSandbox  # tests/ is on sys.path (pytest prepend import mode)

from clawgym.tasks import TaskError, import_any
from clawgym.tasks.pinchbench import (
    ADAPTER_MARK,
    export_pinchbench_task,
    import_pinchbench_file,
    import_pinchbench_folder,
    parse_rubric_section,
)
from clawgym.verify import verify_task

AUTOMATED = textwrap.dedent('''\
    ---
    id: task_90_word_count
    name: Word Count Report
    category: productivity
    grading_type: automated
    timeout_seconds: 120
    workspace_files:
      - path: notes/meeting.txt
        content: |
          alpha beta gamma
          delta epsilon
    ---

    # Word count

    ## Prompt

    Count the words in `notes/meeting.txt` and write the number to `count.txt`.

    ---

    ## Expected Behavior

    The agent reads the file and writes `5` to count.txt.

    ## Grading Criteria

    - [ ] count.txt exists
    - [ ] it holds 5

    ## Automated Checks

    ```python
    import os

    def grade(transcript, workspace_path):
        p = os.path.join(workspace_path, "count.txt")
        exists = os.path.isfile(p)
        # a '## heading' inside code must not split sections
        right = exists and open(p).read().strip() == "5"
        return {"exists": exists, "right": right}
    ```
    ''')

HYBRID = textwrap.dedent('''\
    ---
    id: task_91_summary
    name: Summary Memo
    category: writing
    grading_type: hybrid
    timeout_seconds: 300
    grading_weights:
      automated: 0.6
      llm_judge: 0.4
    workspace_files:
      - source: sales.csv
        dest: data/sales.csv
    ---

    ## Prompt

    Summarise data/sales.csv in memo.md, mentioning the total.

    ## Expected Behavior

    A short memo.

    ## Grading Criteria

    - [ ] memo.md exists

    ## Automated Checks

    ```python
    import os
    def grade(transcript, workspace_path):
        return {"memo": os.path.isfile(os.path.join(workspace_path, "memo.md"))}
    ```

    ## LLM Judge Rubric

    ### Criterion 1: Accuracy (`memo.md`)

    **Score 1.0**: The total 30 is stated correctly.
    **Score 0.5**: A total is given but wrong.
    **Score 0.0**: No total.

    ### Criterion 2: Tone

    **Score 1.0**: Professional.
    **Score 0.0**: Not professional.
    ''')


@pytest.fixture
def suite(tmp_path) -> Path:
    d = tmp_path / "tasks"
    d.mkdir()
    (d / "task_90_word_count.md").write_text(AUTOMATED)
    (d / "task_91_summary.md").write_text(HYBRID)
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "sales.csv").write_text("item,amount\na,10\nb,20\n")
    return d


def test_import_automated_inline_files_and_score(suite):
    t = import_pinchbench_file(suite / "task_90_word_count.md")
    assert t.task_id == "task_90_word_count" and t.category == "productivity_collaboration"
    assert t.subcategory == "productivity" and t.timeout_s == 120
    assert t.instruction == "Count the words in `notes/meeting.txt` and write the number to `count.txt`."
    assert t.file_map() == {"notes/meeting.txt": b"alpha beta gamma\ndelta epsilon\n"}
    assert t.verifier.kind == "grade" and t.verifier.rubric is None and "## heading" in t.verifier.code
    with TmpSandbox(t.files) as sb:
        assert verify_task(t, sb).score == 0.0
        sb.write_file("count.txt", b"5\n")
        r = verify_task(t, sb)
    assert r.score == 1.0 and r.subscores == {"exists": 1.0, "right": 1.0}


def test_import_hybrid_assets_and_score_offline(suite):
    t = import_pinchbench_file(suite / "task_91_summary.md", assets_dir=suite.parent / "assets")
    assert t.file_map() == {"data/sales.csv": b"item,amount\na,10\nb,20\n"}
    assert t.verifier.weights() == pytest.approx((0.6, 0.4))
    rules = t.verifier.rubric
    assert [r.name for r in rules] == ["Criterion 1: Accuracy (`memo.md`)", "Criterion 2: Tone"]
    assert rules[0].file_path == "memo.md" and rules[1].file_path == ""
    assert rules[0].scores == {"1": "The total 30 is stated correctly.", "0.5": "A total is given but wrong.",
                               "0": "No total."}
    class Scripted:  # a judge that can score any rule (stands in for an LLM judge endpoint)
        name = "scripted"

        def score_rules(self, ctx, items):
            seen.append([m.get("role") for m in ctx.transcript or []])
            return [{"score": 1.0, "reason": "fine"} for _ in items]

    seen: list = []
    done = [{"role": "user", "content": "Summarise"}, {"role": "assistant", "content": "Done, memo written."}]
    with TmpSandbox(t.files) as sb:
        r0 = verify_task(t, sb)
        # without a judge the PinchBench criteria (no proxies) are unjudged: never credit, flagged
        assert r0.score == 0.0 and r0.judge == "offline" and r0.unjudged
        sb.write_file("memo.md", b"Total sales: 30.")
        r = verify_task(t, sb, transcript=done)
        assert r.code_score == 1.0 and r.unjudged and r.unjudged_rules == [x.name for x in rules]
        assert all(row["score"] is None for row in r.rule_scores)
        rj = verify_task(t, sb, transcript=done, judge=Scripted())
    assert rj.code_score == 1.0 and rj.rubric_score == 1.0 and rj.score == pytest.approx(1.0) and not rj.unjudged
    assert rj.judge == "scripted" and len(rj.rule_scores) == 2
    assert seen == [["assistant"]]  # the whole-run rule saw the agent's own output, not the prompt


def test_round_trip_verbatim_and_generated(suite, tmp_path):
    rep = import_pinchbench_folder(suite, assets_dir=suite.parent / "assets")
    assert rep.ok and len(rep.tasks) == 2
    out = tmp_path / "out" / "tasks"
    for t in rep.tasks:
        export_pinchbench_task(t, out / t.source["filename"])
    assert (out / "task_90_word_count.md").read_text() == AUTOMATED
    assert (out / "task_91_summary.md").read_text() == HYBRID  # verbatim, assets written beside it
    rep2 = import_pinchbench_folder(out)
    assert rep2.ok and [t.model_dump(exclude={"source"}) for t in rep2.tasks] == \
        [t.model_dump(exclude={"source"}) for t in rep.tasks]
    # an edited task is rendered fresh and still re-imports to the same task
    t = rep.tasks[1].model_copy(update={"instruction": "Summarise it differently."})
    p = export_pinchbench_task(t, tmp_path / "gen" / "x.md")
    assert ADAPTER_MARK not in p.read_text()  # PinchBench's own check code, without our transcript adapter
    back = import_pinchbench_file(p)
    assert back.model_dump(exclude={"source", "suite"}) == t.model_dump(exclude={"source", "suite"})


def test_llm_judge_only_and_rubric_fallback():
    rules = parse_rubric_section("Judge the memo overall for clarity.")
    assert len(rules) == 1 and rules[0].name == "llm_judge" and rules[0].scores["1"].startswith("Judge")


BAD = {
    "nofm.md": ("# no front matter\n", 'nofm.md: "front matter" missing'),
    "noid.md": ("---\nname: x\n---\n## Prompt\nhi\n", 'noid.md: missing "id"'),
    "badtype.md": ("---\nid: a\ngrading_type: vibes\n---\n## Prompt\nhi\n", 'badtype.md: "grading_type" must be'),
    "noprompt.md": ("---\nid: b\n---\n## Expected Behavior\nx\n", 'noprompt.md: "## Prompt" missing section'),
    "nocode.md": ("---\nid: c\n---\n## Prompt\nhi\n## Automated Checks\nnone\n",
                  'nocode.md: "## Automated Checks" needs a fenced python'),
    "syntax.md": ("---\nid: d\n---\n## Prompt\nhi\n## Automated Checks\n```python\ndef grade(:\n```\n",
                  'syntax.md: "## Automated Checks" SyntaxError'),
    "asset.md": ("---\nid: e\nworkspace_files:\n  - source: nope.txt\n    dest: a.txt\n---\n## Prompt\nhi\n"
                 "## Automated Checks\n```python\ndef grade(t, w):\n    return {}\n```\n",
                 "asset.md: \"workspace_files[0].source\" asset 'nope.txt' not found"),
    "yaml.md": ("---\nid: [unclosed\n---\n## Prompt\nhi\n", 'yaml.md: "front matter" is not valid YAML'),
}


def test_folder_reports_every_bad_file(tmp_path):
    d = tmp_path / "tasks"
    d.mkdir()
    (d / "good.md").write_text(AUTOMATED)
    for name, (text, _) in BAD.items():
        (d / name).write_text(text)
    rep = import_pinchbench_folder(d)
    assert [t.task_id for t in rep.tasks] == ["task_90_word_count"]
    got = sorted(str(e) for e in rep.errors)
    want = sorted(m for _, m in BAD.values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.startswith(w), (g, w)
    # import_any detects the folder format too
    rep2 = import_any(tmp_path)
    assert len(rep2.tasks) == 1 and len(rep2.errors) == len(BAD)
    with pytest.raises(TaskError):
        import_pinchbench_file(d / "noid.md")


LLM_JUDGE = textwrap.dedent('''\
    ---
    id: task_92_tidy_readme
    name: Tidy a README
    category: content_transformation
    grading_type: llm_judge
    timeout_seconds: 90
    workspace_files:
      - source: messy_readme.txt
        dest: README.txt
    ---

    # Task: Tidy a README

    ## Prompt

    Rewrite `README.txt` as clean markdown in `README.md`.

    ---

    ## Expected Behavior

    The agent reads README.txt and writes README.md.

    ---

    ## LLM Judge Rubric

    ### Criterion 1: Structure (Weight: 75%)

    **Score 1.0**: Clear headings and lists.
    **Score 0.5**: Some structure.
    **Score 0.0**: A wall of text.

    ### Criterion 2: Faithful (Weight: 25%)

    **Score 1.0**: Nothing lost.
    **Score 0.0**: Content lost.

    ---

    ## Additional Notes

    ## Not a rubric heading either
    ''')


def test_llm_judge_weighted_criteria_and_repo_assets(tmp_path):
    (tmp_path / "tasks").mkdir()
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "messy_readme.txt").write_text("install: run make. usage: run it.")
    p = tmp_path / "tasks" / "task_92_tidy_readme.md"
    p.write_text(LLM_JUDGE)
    t = import_pinchbench_file(p)  # asset found in <repo>/assets like PinchBench's layout
    assert t.file_map() == {"README.txt": b"install: run make. usage: run it."}
    assert t.verifier.kind == "none" and t.verifier.weights() == (0.0, 1.0)
    assert [(r.name, r.weight) for r in t.verifier.rubric] == [
        ("Criterion 1: Structure (Weight: 75%)", 0.75), ("Criterion 2: Faithful (Weight: 25%)", 0.25)]
    assert t.verifier.rubric[0].scores == {"1": "Clear headings and lists.", "0.5": "Some structure.",
                                           "0": "A wall of text."}

    class FixedJudge:
        name = "fixed"

        def score_rules(self, ctx, items):
            return [{"score": 1.0, "reason": "ok"}, {"score": 0.0, "reason": "lost"}]

    with TmpSandbox(t.files) as sb:
        r = verify_task(t, sb, transcript=[{"role": "assistant", "content": "done"}], judge=FixedJudge())
    assert r.code_score is None and r.rubric_score == pytest.approx(0.75) and r.score == pytest.approx(0.75)
    assert [x["weight"] for x in r.rule_scores] == [0.75, 0.25]
    out = export_pinchbench_task(t, tmp_path / "out" / "tasks" / "x.md")
    assert out.read_text() == LLM_JUDGE and (tmp_path / "out" / "tasks" / "messy_readme.txt").is_file()
