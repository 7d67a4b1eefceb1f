"""ClawGym task folders (ClawGym-Agents RL/data/clawgym_{train,eval}) <-> Task.

    task_0000/data_entry.json   {"task_id", "user_query", "input_mount_dir", "metadata": {...}}
    task_0000/input_files/...   copied verbatim into the workspace
    task_0000/reward/reward.sh  run after the agent; LAST stdout line = the score
    task_0000/reward/check.py   helpers (either check.py style; reward.sh averages its JSON)
    task_0000/reward/rubric.json  optional {"eval_type": "llm_rubric", "rules": [...]} (hybrid tasks)

Byte-exact round trip: the raw data_entry.json text is kept in Task.source["data_entry"] and written
back verbatim on export as long as it still agrees with the task (task_id, user_query). File modes are
normalised (see clawgym.tasks._io.normalise_mode).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clawgym import DEFAULT_WORKSPACE
from clawgym.tasks import reader
from clawgym.tasks._io import AtomicDir, ImportReport, import_entries, make_task, write_tree
from clawgym.tasks.model import CATEGORY_LABELS, File, RubricRule, Task, TaskError, Verifier
from clawgym.tasks.names import NAME_RULE, check_name, is_name, safe_join, to_name
from clawgym.tasks.reader import Budget, Limits, TaskDir, load_json

DATA_ENTRY = "data_entry.json"
RUBRIC_FILE = "rubric.json"
FORMAT = "clawgym"

# The reward.sh every ClawGym task ships (mean of check.py's JSON values; bools count 1/0).
STANDARD_REWARD_SH = (
    "#!/usr/bin/env bash\nset -euo pipefail\n\n"
    "python3 {ws}/reward/check.py {ws} | python3 -c 'import json, sys; raw = sys.stdin.read().strip(); "
    "data = json.loads(raw); print(sum(float(v) for v in data.values()) / len(data) if isinstance(data, dict) "
    "and data else float(data) if isinstance(data, (int, float)) else 0.0)'\n"
)
# check.py main appended to grade()-style code when exporting one of our tasks as a ClawGym folder.
GRADE_MAIN = '''

def _clawgym_main() -> None:
    import json as _json
    import sys as _sys

    workspace_path = _sys.argv[1] if len(_sys.argv) > 1 else "."
    print(_json.dumps(grade([], workspace_path)))


if __name__ == "__main__":
    _clawgym_main()
'''

_LABEL_TO_CATEGORY = {v.lower(): k for k, v in CATEGORY_LABELS.items()}


def _category(raw: str) -> str:
    return _LABEL_TO_CATEGORY.get(raw.strip().lower(), raw)


def _parse_rubric(data: Any, file: str) -> list[RubricRule]:
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise TaskError(file, "rules", "must be a list of rubric rules")
    rules = []
    for i, r in enumerate(data["rules"]):
        if not isinstance(r, dict):
            raise TaskError(file, f"rules[{i}]", "must be an object")
        for k in ("name", "file_path", "scores"):
            if k not in r:
                raise TaskError(file, f"rules[{i}].{k}", "missing")
        if not isinstance(r["scores"], dict):
            raise TaskError(file, f"rules[{i}].scores", "must be an object")
        try:
            rules.append(RubricRule.model_validate(r))
        except Exception as e:  # pydantic detail
            raise TaskError(file, f"rules[{i}]", f"invalid: {e}") from None
    return rules


def import_clawgym_task(dir: str | Path, *, suite: str | None = None, split: str | None = None,
                        limits: Limits | None = None, suite_budget: Budget | None = None,
                        follow_root: bool = True) -> Task:
    """One ClawGym task folder -> Task. Raises TaskError naming the file and field on bad input.

    The folder is untrusted: it is read through clawgym.tasks.reader.TaskDir, so a symlink anywhere
    in it (``input_files/`` or ``reward/`` themselves, ``data_entry.json``, any entry below), a hard link, a
    special file or a file over the size caps (`limits`; `suite_budget` is shared by a folder import) is a
    TaskError. `follow_root`: the folder itself may be a symlink (True for a path the caller named; a folder
    import passes False for its entries)."""
    d = Path(dir)
    label = d.name
    if not d.is_dir() and not d.is_symlink():
        raise TaskError(label, None, "is not a directory")
    with TaskDir(d, label, limits=limits, suite=suite_budget, follow_root=follow_root) as td:
        return _import_task_dir(td, d, label, suite, split)


def _import_task_dir(td: TaskDir, d: Path, label: str, suite: str | None, split: str | None) -> Task:
    fname = f"{label}/{DATA_ENTRY}"
    if td.kind(DATA_ENTRY) == "missing":
        raise TaskError(fname, None, "missing")
    raw = td.read_bytes(DATA_ENTRY)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TaskError(fname, None, f"is not valid JSON: {e}") from None
    data = load_json(text, fname, None, td.limits)
    if not isinstance(data, dict):
        raise TaskError(fname, None, "must be a JSON object")
    for key in ("task_id", "user_query"):
        if key not in data:
            raise TaskError(fname, key, "missing")
        if not isinstance(data[key], str) or not data[key].strip():
            raise TaskError(fname, key, "must be a non-empty string")
    if not is_name(data["task_id"]):
        raise TaskError(fname, "task_id", f"{data['task_id']!r} is not a valid task id ({NAME_RULE})")
    meta = data.get("metadata", {})
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise TaskError(fname, "metadata", "must be an object")
    mount = data.get("input_mount_dir", DEFAULT_WORKSPACE)
    if not isinstance(mount, str) or not mount.startswith("/"):
        raise TaskError(fname, "input_mount_dir", "must be an absolute path")
    category = meta.get("category", "")
    if not isinstance(category, str):
        raise TaskError(fname, "metadata.category", "must be a string")
    grading_type = meta.get("grading_type", "automated")
    if grading_type not in ("automated", "hybrid", "llm_judge"):
        raise TaskError(fname, "metadata.grading_type", f"unknown value {grading_type!r}")

    files = td.read_tree("input_files")
    if td.kind("reward") == "missing":
        raise TaskError(f"{label}/reward", None, "missing (a ClawGym task needs reward/reward.sh)")
    reward_files = td.read_tree("reward")
    names = {f.path for f in reward_files}
    if "reward.sh" not in names:
        raise TaskError(f"{label}/reward/reward.sh", None, "missing")
    rubric = None
    if RUBRIC_FILE in names:
        rf = next(f for f in reward_files if f.path == RUBRIC_FILE)
        rname = f"{label}/reward/{RUBRIC_FILE}"
        try:
            rtext = rf.content.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TaskError(rname, None, f"is not valid JSON: {e}") from None
        rdata = load_json(rtext, rname, None, td.limits)
        rubric = _parse_rubric(rdata, rname) or None
    if grading_type == "hybrid" and not rubric:
        raise TaskError(f"{label}/reward/{RUBRIC_FILE}", None, 'missing (metadata.grading_type is "hybrid")')

    if split is None:
        split = "train" if "train" in d.parent.name else "bench"
    return make_task(
        fname,
        task_id=data["task_id"],
        suite=suite or to_name(d.parent.name, "clawgym"),
        split=split,
        route="imported",
        family="clawgym",
        category=_category(category),
        instruction=data["user_query"],
        files=files,
        verifier=Verifier(kind="reward_dir", reward_files=reward_files, rubric=rubric, timeout_s=120.0),
        workspace_dir=mount,
        source={"format": FORMAT, "dirname": label, "data_entry": text},
    )


def import_clawgym_folder(dir: str | Path, *, suite: str | None = None, split: str | None = None,
                          limits: Limits | None = None) -> ImportReport:
    """Every task folder under dir. Bad tasks are reported (one TaskError each); the rest are imported.
    Plain files beside the task folders (LICENSE, README) and hidden entries are ignored; a symlink to a
    folder is a bad task (never followed). All tasks together share the per-suite size cap of `limits`."""
    root = Path(dir)
    budget = reader.suite_budget(limits)
    name = suite or to_name(root.name, "clawgym")
    return import_entries(
        root, lambda r: sorted(p for p in r.iterdir() if p.is_dir() and not p.name.startswith(".")),
        lambda d: import_clawgym_task(d, suite=name, split=split, limits=limits, suite_budget=budget,
                                      follow_root=False),
        lambda d: f"{d.name}/{DATA_ENTRY}", "task_id")


def _data_entry_text(task: Task) -> str:
    raw = task.source.get("data_entry") if task.source.get("format") == FORMAT else None
    if isinstance(raw, str):
        try:
            d = json.loads(raw)
            if d.get("task_id") == task.task_id and d.get("user_query") == task.instruction:
                return raw
        except (json.JSONDecodeError, AttributeError):
            pass
    grading = "hybrid" if task.verifier.rubric and task.verifier.kind != "none" else (
        "llm_judge" if task.verifier.kind == "none" else "automated")
    label = CATEGORY_LABELS.get(task.category, task.category)
    entry = {"task_id": task.task_id, "user_query": task.instruction, "input_mount_dir": task.workspace_dir,
             "metadata": {"category": label, "grading_type": grading}}
    return json.dumps(entry, indent=2, ensure_ascii=False) + "\n"


def reward_files_for(task: Task) -> list[File]:
    """The reward/ folder a task exports as: its own for reward_dir tasks; for grade() tasks a check.py
    (the code + a main printing grade([], ws) as JSON) and the standard reward.sh."""
    v = task.verifier
    if v.kind == "reward_dir":
        files = list(v.reward_files)
    elif v.kind == "grade":
        code = (v.code or "").rstrip("\n") + "\n" + GRADE_MAIN
        sh = STANDARD_REWARD_SH.format(ws=task.workspace_dir)
        files = [File(path="check.py", content=code.encode(), mode=0o644),
                 File(path="reward.sh", content=sh.encode(), mode=0o755)]
    else:  # rubric only: code part scores 0 in ClawGym's harness; say so explicitly
        files = [File(path="reward.sh", content=b"#!/usr/bin/env bash\necho 0.0\n", mode=0o755)]
    if v.rubric and not any(f.path == RUBRIC_FILE for f in files):
        rub = {"eval_type": "llm_rubric", "score_options": [0, 0.25, 0.5, 0.75, 1],
               "rules": [r.model_dump(exclude_none=True) for r in v.rubric]}
        files.append(File(path=RUBRIC_FILE, content=(json.dumps(rub, indent=2) + "\n").encode(), mode=0o644))
    return files


def export_clawgym_task(task: Task, out_dir: str | Path) -> Path:
    """Write task as a ClawGym folder at out_dir (the task folder itself; replaced atomically)."""
    out = Path(out_dir)
    with AtomicDir(out) as tmp:
        (tmp / DATA_ENTRY).write_text(_data_entry_text(task), encoding="utf-8")
        (tmp / "input_files").mkdir()
        write_tree(tmp / "input_files", task.files)
        (tmp / "reward").mkdir()
        write_tree(tmp / "reward", reward_files_for(task))
    return out


def export_folder_name(task: Task) -> str:
    """The folder a task exports to inside an export folder: its original ClawGym folder name when that is a
    valid name, else its task_id (always a valid name). Never a path: see export_clawgym_folder."""
    dirname = task.source.get("dirname") if task.source.get("format") == FORMAT else None
    # isinstance narrows for the checker only: is_name is already False for anything but a str
    return dirname if isinstance(dirname, str) and is_name(dirname) else check_name(task.task_id, "task_id")


def export_clawgym_folder(tasks: list[Task], out_dir: str | Path) -> list[Path]:
    """Each task to out_dir/<original folder name or task_id>/. Only folders directly inside out_dir are
    created or replaced (names are checked, paths go through safe_join): nothing outside out_dir is touched.
    Two tasks that would share a folder are a TaskError before anything is written."""
    out = Path(out_dir)
    dests: dict[str, str] = {}
    for t in tasks:
        name = export_folder_name(t)
        if name in dests:
            raise TaskError(name, "task_id", f"{t.task_id!r} and {dests[name]!r} would both export to {name}/")
        dests[name] = t.task_id
    return [export_clawgym_task(t, safe_join(out, export_folder_name(t))) for t in tasks]
