"""The task contract and its importers/exporters."""

from pathlib import Path

from clawgym.tasks._io import ImportReport  # noqa: F401
from clawgym.tasks.model import (  # noqa: F401
    CATEGORIES,
    CATEGORY_LABELS,
    RUBRIC_SCALE,
    File,
    RubricProxy,
    RubricRule,
    Task,
    TaskError,
    ToolCall,
    Verifier,
)
from clawgym.tasks.reader import Limits  # noqa: F401


def detect_format(path: "str | Path") -> str:
    """'clawgym_task' | 'clawgym_folder' | 'harbor_task' | 'harbor_folder' | 'pinchbench_file' |
    'pinchbench_folder' | 'parquet'."""
    p = Path(path)
    if p.is_file():
        if p.suffix == ".parquet":
            return "parquet"
        if p.suffix == ".md":
            return "pinchbench_file"
        raise TaskError(str(p), None, "unknown task format (expected .parquet, .md or a folder)")
    if p.is_dir():
        if (p / "data_entry.json").exists() or ((p / "reward").is_dir() and (p / "input_files").is_dir()):
            return "clawgym_task"
        if (p / "task.toml").is_file():  # Harbor: before the .md check (instruction.md)
            return "harbor_task"
        subs = [d for d in p.iterdir() if d.is_dir() and not d.name.startswith(".")]
        if any((d / "data_entry.json").exists() or (d / "reward").is_dir() for d in subs):
            return "clawgym_folder"
        if any((d / "task.toml").is_file() for d in subs):
            return "harbor_folder"
        if _real_dir(p / "tasks") and any((p / "tasks").glob("*.md")):
            return "pinchbench_folder"
        if any(p.glob("*.md")):
            return "pinchbench_folder"
        if any(p.glob("*.parquet")):
            return "parquet"
        raise TaskError(str(p), None, "no ClawGym task folders, PinchBench .md files or .parquet files found")
    raise TaskError(str(p), None, "not found")


def import_any(path: "str | Path", *, suite: "str | None" = None, limits: "Limits | None" = None) -> ImportReport:
    """Import tasks from any supported source, detecting the format. Errors go into the report: a bad task
    (a symlink or hard link in it, a file over the size caps of `limits`, a bad name, ...) is one error and
    the others are still imported. Everything is read through clawgym.tasks.reader."""
    from clawgym.tasks import clawgym_format, parquet_io, pinchbench
    from clawgym.tasks.names import check_name, to_name

    p = Path(path)
    rep = ImportReport()
    try:
        if suite is not None:
            try:
                check_name(suite, "suite")
            except ValueError as e:
                raise TaskError(str(p), "suite", str(e)) from None
        fmt = detect_format(p)
        if fmt == "clawgym_task":
            rep.tasks.append(clawgym_format.import_clawgym_task(p, suite=suite, limits=limits))
        elif fmt == "clawgym_folder":
            rep = clawgym_format.import_clawgym_folder(p, suite=suite, limits=limits)
        elif fmt in ("harbor_task", "harbor_folder"):
            from clawgym.tasks.harbor import import_harbor_folder

            rep = import_harbor_folder(p, suite=suite, limits=limits)
        elif fmt == "pinchbench_file":
            rep.tasks.append(pinchbench.import_pinchbench_file(p, suite=suite, limits=limits))
        elif fmt == "pinchbench_folder":
            root = p / "tasks" if _real_dir(p / "tasks") and any((p / "tasks").glob("*.md")) else p
            rep = pinchbench.import_pinchbench_folder(root, suite=suite or to_name(p.name, "pinchbench"),
                                                      limits=limits)
        else:
            files = [p] if p.is_file() else sorted(p.glob("*.parquet"))
            seen: set[str] = set()
            for f in files:
                one = parquet_io.read_tasks_parquet_report(f, limits=limits, follow=f == p)
                rep.errors.extend(one.errors)
                for t in one.tasks:
                    if t.task_id in seen:
                        rep.errors.append(TaskError(f.name, "task_id", f"duplicate task_id {t.task_id!r}"))
                        continue
                    seen.add(t.task_id)
                    rep.tasks.append(t)
    except TaskError as e:
        rep.errors.append(e)
    except (ValueError, RecursionError, OverflowError) as e:  # a file built to break a parser: one error, no crash
        rep.errors.append(TaskError(str(p), None, f"unreadable task source: {type(e).__name__}: {str(e)[:300]}"))
    return rep


def _real_dir(p: Path) -> bool:
    """A directory that is not a symlink (a bundle's `tasks/` must be its own)."""
    import stat as _stat

    try:
        return _stat.S_ISDIR(p.lstat().st_mode)
    except OSError:
        return False


__all__ = ["CATEGORIES", "CATEGORY_LABELS", "RUBRIC_SCALE", "File", "RubricProxy", "RubricRule", "Task",
           "TaskError", "ToolCall", "Verifier", "ImportReport", "Limits", "import_any", "detect_format"]
