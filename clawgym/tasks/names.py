"""Names are identifiers: task ids, family names, suite names and model / checkpoint / policy /
partition keys all match one pattern where they enter, and every path built from one goes through
`safe_join`, which refuses anything that would leave its root.

    NAME_RE = ^[A-Za-z0-9][A-Za-z0-9._+@-]{0,127}$   and no ".."

(`+` and `@` are kept because `clawgym bench add` has always accepted them for model names.) A name is
therefore always one plain path component: no "/", no leading "." or "-", never "." or "..".
"""

from __future__ import annotations

import os
import re
from pathlib import Path

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+@-]{0,127}$"
NAME_RE = re.compile(NAME_PATTERN)
NAME_RULE = "1-128 characters: letters, digits and . _ + @ -, starting with a letter or digit, no '..'"


def is_name(value: object) -> bool:
    """True when `value` is a str matching NAME_PATTERN (and holds no '..')."""
    return isinstance(value, str) and NAME_RE.fullmatch(value) is not None and ".." not in value


def check_name(value: object, what: str = "name") -> str:
    """`value` when it is a valid name; ValueError naming `what` otherwise."""
    if not is_name(value):
        raise ValueError(f"{what} {value!r} is not a valid name ({NAME_RULE})")
    return value  # type: ignore[return-value]


def to_name(value: str, default: str) -> str:
    """A valid name made from free text (e.g. a folder name used as a suite name): characters outside the
    pattern become '_', leading non-alphanumerics and '..' are removed; `default` when nothing is left."""
    s = re.sub(r"[^A-Za-z0-9._+@-]", "_", value or "")
    while ".." in s:
        s = s.replace("..", ".")
    s = s.lstrip("._+@-")[:128]
    return s if is_name(s) else default


def check_relpath(rel: object, what: str = "path") -> str:
    """`rel` when it is a relative POSIX path of plain components (no '', '.', '..', no leading '/', no NUL,
    no backslash); ValueError naming `what` otherwise."""
    if not isinstance(rel, str) or not rel:
        raise ValueError(f"{what} must be a non-empty relative path (got {rel!r})")
    if rel.startswith("/") or "\x00" in rel or "\\" in rel:
        raise ValueError(f"{what} {rel!r} must be a relative path inside its folder")
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{what} {rel!r} must be a normalised relative path (no '', '.' or '..' parts)")
    return rel


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def safe_join(root: str | os.PathLike, *parts: str) -> Path:
    """root / parts, refusing (ValueError) any part that is absolute or holds '..', '.' or an empty component,
    and any result that (after resolving the symlinks that already exist on the way) is not under root.
    Each part may hold '/' separated components (e.g. a workspace file path)."""
    root_abs = os.path.abspath(os.fspath(root))
    comps: list[str] = []
    for p in parts:
        comps += check_relpath(os.fspath(p), "path component").split("/")
    joined = os.path.join(root_abs, *comps)
    if not _under(os.path.normpath(joined), root_abs):
        raise ValueError(f"{'/'.join(comps)!r} leaves {root_abs}")
    real_root = os.path.realpath(root_abs)
    if not _under(os.path.realpath(joined), real_root):
        raise ValueError(f"{'/'.join(comps)!r} leaves {root_abs} (through a symlink)")
    return Path(joined)


__all__ = ["NAME_PATTERN", "NAME_RE", "NAME_RULE", "is_name", "check_name", "to_name", "check_relpath",
           "safe_join"]
