"""Atomic replacement of a whole output folder, shared by the model preparer and the dataset writer."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable


def replace_dir(out: Path, fill: Callable[[Path], None], mode: int | None = None) -> None:
    """Build `out` atomically: `fill` writes into a fresh temp folder beside it (chmod'ed to `mode` when
    given; mkdtemp's 0o700 otherwise), which then replaces any existing `out`. On error the temp folder
    is removed and `out` is left as it was."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        fill(tmp)
        if mode is not None:
            os.chmod(tmp, mode)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
