"""Every task's starting files as a folder `<root>/<task_id>/` (the `mock_workspaces` asset), replaced as a whole
(clawgym.fsatomic.replace_dir): a reader sees the old folders or the new ones, never half of each.

    rep = write_workspaces(tasks, Path("data/workspaces"))
    rep.failed   # task_id -> why its folder was not written (a path the host cannot hold): that task only
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from clawgym.fsatomic import replace_dir
from clawgym.tasks.names import check_name, safe_join


@dataclass
class WorkspacesReport:
    """What write_workspaces wrote."""

    n_written: int = 0  # task folders
    failed: dict[str, str] = field(default_factory=dict)  # task_id -> error
    by_extension: dict[str, int] = field(default_factory=dict)  # file suffix (lower case, "(none)") -> files
    sizes: list[int] = field(default_factory=list)  # bytes per written workspace

    @property
    def n_files(self) -> int:
        return sum(self.by_extension.values())


def write_workspaces(tasks: Iterable, root: Path, warn: Callable[[str], object] | None = None) -> WorkspacesReport:
    """Replace `root` with one folder per task holding its files (mode 0755 for executables, 0644 otherwise;
    every path checked to stay inside its folder). A task whose files cannot be written is left out and reported
    (`warn` hears it); the others are written."""
    rep = WorkspacesReport()

    def fill(tmp: Path) -> None:
        for t in tasks:
            exts: dict[str, int] = {}
            name = None
            try:  # one task's odd files (a path the host cannot hold) are that task's error, never the whole run's
                name = check_name(t.task_id, "task_id")  # a plain name, never a path
                for f in t.files:
                    p = safe_join(tmp, name, f.path)  # never outside its folder
                    p.parent.mkdir(parents=True, exist_ok=True)
                    p.write_bytes(f.content)
                    os.chmod(p, 0o755 if f.mode & 0o111 else 0o644)
                    ext = Path(f.path).suffix.lower() or "(none)"
                    exts[ext] = exts.get(ext, 0) + 1
            except (OSError, ValueError) as e:
                rep.failed[t.task_id] = f"{type(e).__name__}: {str(e)[:300]}"
                if warn:
                    warn(f"workspace of {t.task_id} not written: {rep.failed[t.task_id]}")
                if name is not None:  # only a checked name is ever joined to a path, to remove it too
                    shutil.rmtree(tmp / name, ignore_errors=True)
                continue
            for k, v in exts.items():
                rep.by_extension[k] = rep.by_extension.get(k, 0) + v
            rep.n_written += 1
            rep.sizes.append(sum(len(f.content) for f in t.files))

    replace_dir(root, fill, mode=0o755)
    return rep


__all__ = ["WorkspacesReport", "write_workspaces"]
