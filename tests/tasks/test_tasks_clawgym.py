"""ClawGym task folders: import, export, byte-exact round trip, error reporting."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clawgym.tasks import File, Task, TaskError, Verifier, import_any
from clawgym.tasks.clawgym_format import (
    export_clawgym_folder,
    export_clawgym_task,
    import_clawgym_folder,
    import_clawgym_task,
)

REPO = Path(__file__).resolve().parents[2]


def fixtures_dir() -> Path:
    return Path(os.environ.get("CLAWGYM_FIXTURES") or REPO.parent / "shared" / "fixtures")


@pytest.fixture(scope="module")
def sample() -> Path:
    d = fixtures_dir() / "clawgym_train_sample"
    if not d.is_dir():
        pytest.skip(f"ClawGym fixtures not found at {d} (set CLAWGYM_FIXTURES)")
    return d


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_import_all_fixture_tasks(sample):
    rep = import_clawgym_folder(sample)
    assert rep.ok, rep.summary()
    assert len(rep.tasks) == 37  # LICENSE beside the folders is ignored
    t = next(t for t in rep.tasks if t.task_id == "task_0168")
    assert t.route == "imported" and t.split == "train" and t.verifier.kind == "reward_dir"
    assert t.workspace_dir == "/root/.openclaw/workspace"
    assert {f.path for f in t.files} == {"input/campaigns.csv", "input/policies.yaml"}
    assert {f.path: f.mode for f in t.verifier.reward_files} == {"check.py": 0o644, "reward.sh": 0o755}
    assert t.instruction.startswith("We run three hype-item pre-orders")


def test_round_trip_byte_exact(sample, tmp_path):
    rep = import_clawgym_folder(sample)
    out = tmp_path / sample.name  # same folder name -> same suite on re-import
    export_clawgym_folder(rep.tasks, out)
    rep2 = import_clawgym_folder(out)
    assert rep2.ok and rep2.tasks == rep.tasks
    for t in rep.tasks:
        src, dst = sample / t.task_id, out / t.task_id
        assert tree(src) == tree(dst), t.task_id  # every file byte-equal, data_entry.json included
        # modes: read-only fixture bits are normalised, the executable bit survives
        assert os.stat(dst / "reward" / "reward.sh").st_mode & 0o777 == 0o755
        assert os.stat(dst / "data_entry.json").st_mode & 0o777 == 0o644
    # export of an export is a fixed point
    export_clawgym_folder(rep2.tasks, tmp_path / "again")
    for t in rep.tasks:
        assert tree(out / t.task_id) == tree(tmp_path / "again" / t.task_id)


def test_edited_task_exports_fresh_data_entry(sample, tmp_path):
    t = import_clawgym_task(sample / "task_0076")
    t2 = t.model_copy(update={"instruction": "Something else entirely."})
    export_clawgym_task(t2, tmp_path / "x")
    d = json.loads((tmp_path / "x" / "data_entry.json").read_text())
    assert d["user_query"] == "Something else entirely." and d["task_id"] == "task_0076"
    assert list(d) == ["task_id", "user_query", "input_mount_dir", "metadata"]  # formats.md order
    assert import_clawgym_task(tmp_path / "x").instruction == "Something else entirely."


def _mk(root: Path, name: str, entry, reward=True, files=None) -> Path:
    d = root / name
    (d / "input_files").mkdir(parents=True)
    if entry is not None:
        (d / "data_entry.json").write_text(entry if isinstance(entry, str) else json.dumps(entry))
    if reward:
        (d / "reward").mkdir()
        (d / "reward" / "reward.sh").write_text("#!/usr/bin/env bash\necho 1.0\n")
    for k, v in (files or {}).items():
        (d / "input_files" / k).parent.mkdir(parents=True, exist_ok=True)
        (d / "input_files" / k).write_text(v)
    return d


def test_folder_reports_every_bad_task_and_imports_the_rest(tmp_path):
    root = tmp_path / "suite"
    good = {"task_id": "g1", "user_query": "do x", "metadata": {"category": "", "grading_type": "automated"},
            "input_mount_dir": "/root/.openclaw/workspace"}
    _mk(root, "task_0001", good, files={"input/a.txt": "a"})
    _mk(root, "task_0002", dict(good, task_id="g2"))
    _mk(root, "task_0042", {"task_id": "b1"})
    _mk(root, "task_0043", "{not json")
    _mk(root, "task_0044", dict(good, task_id="b3"), reward=False)
    _mk(root, "task_0045", None)
    _mk(root, "task_0046", dict(good, task_id="b5", metadata={"grading_type": "weird"}))
    d = _mk(root, "task_0047", dict(good, task_id="b6"))
    os.symlink("/etc/passwd", d / "input_files" / "leak")
    _mk(root, "task_0048", dict(good, task_id="g1"))  # duplicate id
    _mk(root, "task_0049", dict(good, task_id="b8", metadata={"grading_type": "hybrid"}))
    (root / "README.md").write_text("not a task")
    rep = import_clawgym_folder(root)
    assert [t.task_id for t in rep.tasks] == ["g1", "g2"]
    msgs = [str(e) for e in rep.errors]
    assert msgs == [
        'task_0042/data_entry.json: missing "user_query"',
        msgs[1],
        "task_0044/reward: missing (a ClawGym task needs reward/reward.sh)",
        "task_0045/data_entry.json: missing",
        "task_0046/data_entry.json: \"metadata.grading_type\" unknown value 'weird'",
        "task_0047/input_files/leak: is a symlink (not allowed in task files)",
        "task_0048/data_entry.json: \"task_id\" duplicate of task_0001 ('g1')",
        'task_0049/reward/rubric.json: missing (metadata.grading_type is "hybrid")',
    ]
    assert msgs[1].startswith("task_0043/data_entry.json: is not valid JSON")
    assert all(isinstance(e, TaskError) and e.file.startswith("task_00") for e in rep.errors)
    # the same through import_any
    rep2 = import_any(root)
    assert len(rep2.tasks) == 2 and len(rep2.errors) == 8


def test_hybrid_rubric_and_grade_task_export(tmp_path):
    rubric = {"eval_type": "llm_rubric", "score_options": [0, 0.25, 0.5, 0.75, 1],
              "rules": [{"name": "tone", "file_path": "output/mail.md",
                         "scores": {"0": "rude", "0.5": "ok", "1": "warm"}}]}
    d = _mk(tmp_path / "s", "task_1", {"task_id": "h1", "user_query": "write mail",
                                       "metadata": {"grading_type": "hybrid"}})
    (d / "reward" / "rubric.json").write_text(json.dumps(rubric))
    t = import_clawgym_task(d)
    assert t.verifier.rubric[0].name == "tone" and t.verifier.weights() == (0.7, 0.3)
    # our own grade() task exported as a ClawGym folder gets check.py + the standard reward.sh
    g = Task(task_id="own1", instruction="make out.txt", files=[File(path="in.txt", content=b"hi")],
             verifier=Verifier(kind="grade", code="def grade(t, w):\n    return {'a': 1.0}\n"))
    export_clawgym_task(g, tmp_path / "own1")
    t2 = import_clawgym_task(tmp_path / "own1")
    assert t2.verifier.kind == "reward_dir" and t2.instruction == "make out.txt"
    check = (tmp_path / "own1" / "reward" / "check.py").read_text()
    assert "def grade" in check and "__main__" in check


def test_import_any_single_task_and_bad_paths(sample, tmp_path):
    rep = import_any(sample / "task_0168")
    assert rep.ok and [t.task_id for t in rep.tasks] == ["task_0168"]
    rep = import_any(tmp_path / "nope")
    assert not rep.tasks and str(rep.errors[0]).endswith("nope: not found")
    (tmp_path / "x.txt").write_text("?")
    assert "unknown task format" in str(import_any(tmp_path / "x.txt").errors[0])
    (tmp_path / "empty").mkdir()
    assert "no ClawGym task folders" in str(import_any(tmp_path / "empty").errors[0])
