"""Atomic replacement of a whole output folder: the one helper every writer of a folder uses (the model preparer,
the dataset writer, the task workspaces)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def replace_dir(out: Path, fill: Callable[[Path], None], mode: int | None = None) -> None:
    """Build `out` atomically: `fill` writes into a fresh temp folder beside it (chmod'ed to `mode` when
    given; mkdtemp's 0o700 otherwise), which then replaces any existing `out`: the old folder is renamed aside,
    the new one renamed into place, then the old one removed (`out` is missing only between two renames). On
    error the temp folder is removed and `out` is left as it was."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    old: Path | None = None
    try:
        fill(tmp)
        if mode is not None:
            os.chmod(tmp, mode)
        if out.exists() or out.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, old / out.name)
        os.replace(tmp, out)
    except BaseException:
        if old is not None and not out.exists() and (old / out.name).exists():
            os.replace(old / out.name, out)  # the new folder never arrived: the old one back
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
