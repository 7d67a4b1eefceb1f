"""Our canonical task form: one Parquet row per task, files inline (raw bytes), exact round trip.

Nested parts that are plain data (files, reward files) are typed columns; free-form parts (rubric, reference,
source) are JSON strings so the schema never changes when a format adds a field.
"""

from __future__ import annotations

import io
import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from clawgym.tasks._io import ImportReport, atomic_write_bytes, task_error
from clawgym.tasks.model import File, RubricRule, Task, TaskError, ToolCall, Verifier
from clawgym.tasks.reader import DEFAULT_LIMITS, Limits

FILE_TYPE = pa.struct([("path", pa.string()), ("content", pa.binary()), ("mode", pa.int32())])

TASKS_SCHEMA = pa.schema([
    ("task_id", pa.string()),
    ("suite", pa.string()),
    ("split", pa.string()),
    ("route", pa.string()),
    ("family", pa.string()),
    ("category", pa.string()),
    ("subcategory", pa.string()),
    ("persona_id", pa.string()),
    ("skill_ids", pa.list_(pa.string())),
    ("difficulty", pa.int32()),
    ("seed", pa.int64()),
    ("instruction", pa.string()),
    ("files", pa.list_(FILE_TYPE)),
    ("verifier_kind", pa.string()),
    ("verifier_code", pa.string()),
    ("reward_files", pa.list_(FILE_TYPE)),
    ("rubric_json", pa.string()),  # JSON list of RubricRule, or null
    ("code_weight", pa.float64()),
    ("rubric_weight", pa.float64()),
    ("verifier_timeout_s", pa.float64()),
    ("reference_json", pa.string()),  # JSON list of ToolCall, or null
    ("program_reference_json", pa.string()),  # JSON list of ToolCall (the program teacher's), or null; optional
    ("workspace_dir", pa.string()),
    ("timeout_s", pa.float64()),
    ("source_json", pa.string()),
    ("fingerprint", pa.string()),  # sha256 of instruction + workspace (derived; for dedupe/joins)
], metadata={b"clawgym.table": b"tasks", b"clawgym.schema_version": b"1"})


OPTIONAL_COLUMNS = ("fingerprint", "program_reference_json")  # derived, or added later (a file without reads as null)


def _files(fs: list[File]) -> list[dict]:
    return [{"path": f.path, "content": f.content, "mode": int(f.mode)} for f in fs]


def task_to_row(t: Task) -> dict:
    """One row of TASKS_SCHEMA for `t` (rubric, reference and source as JSON text)."""
    v = t.verifier
    return {
        "task_id": t.task_id, "suite": t.suite, "split": t.split, "route": t.route, "family": t.family,
        "category": t.category, "subcategory": t.subcategory, "persona_id": t.persona_id,
        "skill_ids": list(t.skill_ids), "difficulty": t.difficulty, "seed": t.seed,
        "instruction": t.instruction, "files": _files(t.files),
        "verifier_kind": v.kind, "verifier_code": v.code, "reward_files": _files(v.reward_files),
        "rubric_json": None if v.rubric is None else json.dumps([r.model_dump(mode="json") for r in v.rubric]),
        "code_weight": v.code_weight, "rubric_weight": v.rubric_weight, "verifier_timeout_s": v.timeout_s,
        "reference_json": None if t.reference is None else json.dumps([c.model_dump(mode="json") for c in t.reference]),
        "program_reference_json": None if t.program_reference is None else json.dumps(
            [c.model_dump(mode="json") for c in t.program_reference]),
        "workspace_dir": t.workspace_dir, "timeout_s": t.timeout_s,
        "source_json": json.dumps(t.source, sort_keys=True), "fingerprint": t.fingerprint(),
    }


def tasks_to_table(tasks: Iterable[Task]) -> pa.Table:
    """An Arrow table of TASKS_SCHEMA with one row per task."""
    rows = [task_to_row(t) for t in tasks]
    return pa.Table.from_pylist(rows, schema=TASKS_SCHEMA)


def row_to_task(r: dict, where: str = "tasks") -> Task:
    """The Task of one TASKS_SCHEMA row; TaskError naming `where` and the field when it does not fit."""
    try:
        rubric = r.get("rubric_json")
        ref = r.get("reference_json")
        prog = r.get("program_reference_json")  # absent in files written before the program teacher's reference column
        return Task(
            task_id=r["task_id"], suite=r["suite"], split=r["split"], route=r["route"], family=r["family"],
            category=r["category"], subcategory=r["subcategory"], persona_id=r["persona_id"],
            skill_ids=list(r["skill_ids"] or []), difficulty=r["difficulty"], seed=r["seed"],
            instruction=r["instruction"],
            files=[File(path=f["path"], content=f["content"], mode=f["mode"]) for f in r["files"] or []],
            verifier=Verifier(
                kind=r["verifier_kind"], code=r["verifier_code"],
                reward_files=[File(path=f["path"], content=f["content"], mode=f["mode"])
                              for f in r["reward_files"] or []],
                rubric=None if rubric is None else [RubricRule.model_validate(x) for x in json.loads(rubric)],
                code_weight=r["code_weight"], rubric_weight=r["rubric_weight"], timeout_s=r["verifier_timeout_s"]),
            reference=None if ref is None else [ToolCall.model_validate(x) for x in json.loads(ref)],
            program_reference=None if prog is None else [ToolCall.model_validate(x) for x in json.loads(prog)],
            workspace_dir=r["workspace_dir"], timeout_s=r["timeout_s"],
            source=json.loads(r["source_json"]) if r.get("source_json") else {},
        )
    except KeyError as e:
        raise TaskError(where, str(e.args[0]), "missing") from None
    except TaskError:
        raise
    except Exception as e:
        tid = r.get("task_id") if isinstance(r, dict) else None
        if callable(getattr(e, "errors", None)):  # a pydantic ValidationError: name the field
            te = task_error(where, e)
            raise TaskError(where, te.field, f"invalid row (task {tid!r}): {te.problem}") from None
        raise TaskError(where, tid, f"invalid row: {str(e).splitlines()[0]}") from None


def check_row_sizes(r: dict, where: str, limits: Limits | None = None) -> None:
    """TaskError when a row's inline files break the per-file / per-task caps of `limits`."""
    lim = limits or DEFAULT_LIMITS
    tid = r.get("task_id") if isinstance(r.get("task_id"), str) else "?"
    total = 0
    for col in ("files", "reward_files"):
        fl = r.get(col) or []
        if len(fl) > lim.task_files:
            raise TaskError(where, col, f"task {tid!r}: {len(fl)} files, over the per-task cap of {lim.task_files}")
        for f in fl:
            path = f.get("path") if isinstance(f, dict) else None
            if isinstance(path, str) and (path.count("/") > lim.tree_depth or len(path) > 4096):
                raise TaskError(where, f"{col}[{path[:100]!r}]",
                                f"task {tid!r}: path deeper than {lim.tree_depth} folders or over 4096 characters")
            n = len(f.get("content") or b"") if isinstance(f, dict) else 0
            if n > lim.file_bytes:
                raise TaskError(where, f"{col}[{f.get('path')!r}]",
                                f"task {tid!r}: {n} bytes, over the per-file size cap of {lim.file_bytes}")
            total += n
    total += sum(len(r.get(k) or "") for k in ("instruction", "verifier_code", "rubric_json", "reference_json",
                                                "program_reference_json", "source_json") if isinstance(r.get(k), str))
    if total > lim.task_bytes:
        raise TaskError(where, "files", f"task {tid!r}: {total} bytes, over the per-task size cap of {lim.task_bytes}")


def table_to_tasks(table: pa.Table, where: str = "tasks") -> list[Task]:
    """The Tasks of a TASKS_SCHEMA table; TaskError for the first missing column."""
    missing = [n for n in TASKS_SCHEMA.names if n not in table.column_names and n not in OPTIONAL_COLUMNS]
    if missing:
        raise TaskError(where, missing[0], "missing")
    return [row_to_task(r, where) for r in table.to_pylist()]


def table_to_report(table: pa.Table, where: str = "tasks", limits: Limits | None = None) -> ImportReport:
    """Like table_to_tasks, but a bad row (a bad name, a file over the caps, a duplicate task_id) is one error
    in the report and the other rows are still imported."""
    rep = ImportReport()
    missing = [n for n in TASKS_SCHEMA.names if n not in table.column_names and n not in OPTIONAL_COLUMNS]
    if missing:
        rep.errors.append(TaskError(where, missing[0], "missing"))
        return rep
    seen: set[str] = set()
    for i in range(table.num_rows):
        r = table.slice(i, 1).to_pylist()[0]
        try:
            check_row_sizes(r, where, limits)
            t = row_to_task(r, where)
        except TaskError as e:
            rep.errors.append(e)
            continue
        if t.task_id in seen:
            rep.errors.append(TaskError(where, "task_id", f"duplicate task_id {t.task_id!r}"))
            continue
        seen.add(t.task_id)
        rep.tasks.append(t)
    return rep


def write_tasks_parquet(tasks: Iterable[Task], path: str | Path) -> Path:
    """Atomic: written to a temp file beside path, then os.replace."""
    table = tasks_to_table(tasks)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    atomic_write_bytes(Path(path), buf.getvalue())
    return Path(path)


def _open_table(p: Path, limits: Limits | None, follow: bool) -> pa.Table:
    """The table of one Parquet file, read safely: not a symlink (unless `follow`, for a path the caller
    named), a regular file, its size and its uncompressed size (from the footer, before any data is read)
    within the per-suite cap."""
    lim = limits or DEFAULT_LIMITS
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise TaskError(str(p), None, "not found") from None
    except OSError as e:
        if os.path.islink(p):
            raise TaskError(str(p), None, "is a symlink (not allowed in an imported folder)") from None
        raise TaskError(str(p), None, f"cannot be opened: {e.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise TaskError(str(p), None, "is not a regular file")
        if st.st_size > lim.suite_bytes:
            raise TaskError(str(p), None, f"is {st.st_size} bytes, over the per-suite size cap of {lim.suite_bytes}")
        try:
            pf = pq.ParquetFile(fh)
            md = pf.metadata
            raw = sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
            if raw > lim.suite_bytes:
                raise TaskError(str(p), None, f"holds {raw} bytes uncompressed, over the per-suite size cap of "
                                              f"{lim.suite_bytes}")
            # decoded, batch by batch: a dictionary-encoded column can decode to far more than the footer says,
            # so the cap is checked on what each batch really holds, before the next one is decoded
            batches, decoded = [], 0
            for b in pf.iter_batches(batch_size=16):
                decoded += b.nbytes
                if decoded > lim.suite_bytes:
                    raise TaskError(str(p), None, f"decodes to over {lim.suite_bytes} bytes (the per-suite size "
                                                  "cap; the footer said less)")
                batches.append(b)
            return pa.Table.from_batches(batches, schema=pf.schema_arrow)
        except TaskError:
            raise
        except Exception as e:
            raise TaskError(str(p), None, f"is not a readable Parquet file: {str(e).splitlines()[0]}") from None


def read_tasks_parquet(path: str | Path, *, limits: Limits | None = None) -> list[Task]:
    """The Tasks of a Parquet file written by :func:`write_tasks_parquet`; TaskError when it is missing or
    unreadable, or over the size caps of `limits`."""
    p = Path(path)
    table = _open_table(p, limits, follow=True)
    tasks = table_to_tasks(table, p.name)
    for r in table.select(["task_id", "files", "reward_files"]).to_pylist():
        check_row_sizes(r, p.name, limits)
    return tasks


def read_tasks_parquet_report(path: str | Path, *, limits: Limits | None = None, follow: bool = True) -> ImportReport:
    """An ImportReport of a Parquet file: bad rows are errors, good rows tasks (import_any's Parquet path)."""
    p = Path(path)
    try:
        table = _open_table(p, limits, follow)
    except TaskError as e:
        return ImportReport(errors=[e])
    return table_to_report(table, p.name, limits)
