"""Shared helpers for importers/exporters: import reports, atomic writes, file modes."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from clawgym.tasks.model import File, Task, TaskError
from clawgym.tasks.names import safe_join


@dataclass
class ImportReport:
    """What a folder import produced: the good tasks and one TaskError per bad one."""

    tasks: list[Task] = field(default_factory=list)
    errors: list[TaskError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def extend(self, other: ImportReport) -> None:
        self.tasks.extend(other.tasks)
        self.errors.extend(other.errors)

    def raise_if_errors(self) -> None:
        if self.errors:
            raise self.errors[0]

    def summary(self) -> str:
        lines = [f"{len(self.tasks)} tasks imported, {len(self.errors)} errors"]
        lines += [f"  {e}" for e in self.errors]
        return "\n".join(lines)


def import_entries(root: Path, entries: Callable[[Path], Iterable[Path]], load: Callable[[Path], Task],
                   dup_file: Callable[[Path], str], dup_field: str) -> ImportReport:
    """Import each of `entries(root)` with `load` into one report (a folder importer's loop). A TaskError
    from `load` is reported and the entry skipped; so is a task_id already imported, reported at
    (`dup_file(entry)`, `dup_field`) naming the first entry. A root that is not a directory is one error."""
    report = ImportReport()
    if not root.is_dir():
        report.errors.append(TaskError(str(root), None, "is not a directory"))
        return report
    seen: dict[str, str] = {}
    for entry in entries(root):
        try:
            t = load(entry)
        except TaskError as e:
            report.errors.append(e)
            continue
        except ValueError as e:  # a model validator (e.g. a bad name) the loader did not turn into a TaskError
            report.errors.append(task_error(dup_file(entry), e))
            continue
        if t.task_id in seen:
            report.errors.append(TaskError(dup_file(entry), dup_field,
                                           f"duplicate of {seen[t.task_id]} ({t.task_id!r})"))
            continue
        seen[t.task_id] = entry.name
        report.tasks.append(t)
    return report


def task_error(file: str, e: Exception) -> TaskError:
    """A TaskError naming `file` and the first failing field of a pydantic ValidationError (or any error)."""
    errs = getattr(e, "errors", None)
    if callable(errs):
        try:
            first = errs()[0]
            loc = ".".join(str(x) for x in first.get("loc", ())) or None
            msg = str(first.get("msg", e)).removeprefix("Value error, ")
            return TaskError(file, loc, msg)
        except Exception:
            pass
    return TaskError(file, None, f"invalid task: {str(e).splitlines()[0] if str(e) else type(e).__name__}")


def make_task(file: str, **fields) -> Task:
    """Task(**fields), a validation error (a bad task_id, suite, family, file path...) as a TaskError naming
    `file` and the field."""
    try:
        return Task(**fields)
    except ValueError as e:
        raise task_error(file, e) from None


def normalise_mode(st_mode: int) -> int:
    """Mode handling (documented in clawgym/tasks/README.md): source permission bits are normalised to
    0o755 when any execute bit is set, else 0o644. Fixture trees are read-only (0444/0555); keeping that
    would make exported trees unwritable and workspaces read-only for the agent, so only the executable
    bit survives. Import -> export -> import is therefore a fixed point."""
    return 0o755 if st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH) else 0o644


# Reading a task folder: clawgym.tasks.reader.TaskDir (no symlinks, no hard links, size caps).


def write_tree(root: Path, files: list[File]) -> None:
    """Write files under root; a path that would leave root (ValueError) is never written."""
    for f in files:
        p = safe_join(root, f.path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(f.content)
        os.chmod(p, f.mode & 0o7777)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class AtomicDir:
    """Build a directory next to its destination, then swap it in (a killed run leaves no half folder)."""

    def __init__(self, dest: Path):
        self.dest = Path(dest)
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.dest.parent / f".{self.dest.name}.tmp-{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> Path:
        self.tmp.mkdir()
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        trash = None
        if self.dest.exists():
            trash = self.dest.parent / f".{self.dest.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(self.dest, trash)
        os.replace(self.tmp, self.dest)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
