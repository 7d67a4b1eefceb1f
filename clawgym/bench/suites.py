"""Loading task suites from folders (ClawGym task dirs or PinchBench markdown files)."""

from __future__ import annotations

from pathlib import Path

from clawgym.lake.io import REPO_ROOT


def resolve_dir(path: str) -> Path:
    """A folder path; relative paths are taken from the repository root."""
    p = Path(path).expanduser()
    return (p if p.is_absolute() else REPO_ROOT / p).resolve()


def load_suite_folder(path: str, *, suite: str, split: str = "bench", fmt: str = "auto"):
    """ImportReport of a folder. fmt auto: PinchBench when the folder holds *.md task files, else ClawGym."""
    from clawgym.tasks.clawgym_format import import_clawgym_folder
    from clawgym.tasks.pinchbench import import_pinchbench_folder

    d = resolve_dir(path)
    if fmt == "auto":
        fmt = "pinchbench" if d.is_dir() and any(p.name.lower() not in ("readme.md", "task_template.md")
                                                  for p in d.glob("*.md")) else "clawgym"
    if fmt == "pinchbench":
        rep = import_pinchbench_folder(d, suite=suite)
        for t in rep.tasks:
            t.split = split
        return rep
    return import_clawgym_folder(d, suite=suite, split=split)

