"""Who may read what clawgym writes under the data root (NOTES "Host exposure").

Trajectories, bench results, the DuckDB catalog, caches, checkpoints and logs are owner-only by default; a shared
group (``shared=True``: ``LakeResource.shared_group``, ``$CLAWGYM_SHARED_GROUP=1`` at the entry points) opens them
to the owning group. Nothing is ever world-readable. Three layers:

- the entry points (``clawgym`` CLI, the Dagster lake resource) call :func:`protect` on the data root: it is
  made (or narrowed to) 0700, 0750 shared, so nothing below it (caches, checkpoints, logs, secrets, whoever wrote
  them and with whatever mode) can be reached by another user;
- the lake and catalog writers set their modes explicitly (0600 files / 0700 folders, 0640 / 0750 shared:
  :func:`make_dirs`, :func:`private_open`, :func:`chmod_private`), also in a lake folder outside the data root
  and for a library caller that never went through an entry point;
- :func:`configure` also sets the process umask (077 / 027) — NOT done by the entry points that run sandboxes:
  the sandbox backends make their host-side state folders with ``os.mkdir(…, 0o755)`` and the verifier's uid
  (docker) then cannot enter a 0700 HOME (seen: "cd: /root/.openclaw/workspace: Permission denied").

The library never reads the environment: the entry points hand theirs to :func:`shared_from_env`."""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

SHARED_ENV = "CLAWGYM_SHARED_GROUP"
PRIVATE_UMASK, SHARED_UMASK = 0o077, 0o027
_lock = threading.Lock()
_shared = False


def shared_from_env(env: Mapping[str, str]) -> bool:
    """True when `env` (an entry point's environment, which it passes in) has $CLAWGYM_SHARED_GROUP = 1 / true /
    yes / on."""
    return (env.get(SHARED_ENV) or "").strip().lower() in ("1", "true", "yes", "on")


def configure(shared: bool = False) -> int:
    """The modes setting (:func:`push` without a pop) plus the process umask: owner-only (077), or group-readable
    with `shared` (027). Returns the previous umask. Only for processes that run no sandbox (module docstring)."""
    global _shared
    with _lock:
        _shared = bool(shared)
        return os.umask(SHARED_UMASK if _shared else PRIVATE_UMASK)


_depth, _saved = 0, False


def push(shared: bool = False) -> None:
    """Make the lake writers use the shared (or owner-only) modes until the matching :func:`pop`, which puts back
    the setting from before the outermost push (entry points inside a longer-lived process: a Dagster run's
    resources, the CLI under a test runner)."""
    global _depth, _saved, _shared
    with _lock:
        if _depth == 0:
            _saved = _shared
        _depth += 1
        _shared = bool(shared)


def pop() -> None:
    """Undo one :func:`push` (the outermost puts back what was there before)."""
    global _depth, _shared
    with _lock:
        if _depth == 0:
            return
        _depth -= 1
        if _depth == 0:
            _shared = _saved


@contextlib.contextmanager
def configured(shared: bool = False) -> Iterator[None]:
    """:func:`push` for the block, then :func:`pop`."""
    push(shared)
    try:
        yield
    finally:
        pop()


def protect(root: str | os.PathLike, shared: bool | None = None) -> Path:
    """The data root `root`, created when missing, with mode 0700 (0750 when `shared`; default: the current
    setting): nothing below it is reachable by other users. A root owned by another user is left alone."""
    root = Path(root)
    mode = (0o750 if shared else 0o700) if shared is not None else dir_mode()
    if not root.exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(root, mode)
        except FileExistsError:
            pass
    st = os.stat(root)
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != mode:
        os.chmod(root, mode)
    return root


def is_shared() -> bool:
    """Whether this process's files are made group-readable."""
    return _shared


def dir_mode() -> int:
    """0o750 with a shared group, else 0o700."""
    return 0o750 if _shared else 0o700


def file_mode() -> int:
    """0o640 with a shared group, else 0o600."""
    return 0o640 if _shared else 0o600


def make_dirs(path: str | os.PathLike) -> Path:
    """`path` and its missing parents, each created with :func:`dir_mode` (whatever the umask); folders that
    already exist are left as they are."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, dir_mode())
        except FileExistsError:
            continue
        os.chmod(d, dir_mode())
    return path


def chmod_private(path: str | os.PathLike) -> None:
    """Set :func:`file_mode` on the file `path` when it exists (never through a symlink)."""
    try:
        os.chmod(path, file_mode(), follow_symlinks=False)
    except FileNotFoundError:
        pass
    except NotImplementedError:  # pragma: no cover (platforms without lchmod)
        if not os.path.islink(path):
            os.chmod(path, file_mode())


def private_open(path: str | os.PathLike):
    """A new file `path` (O_EXCL: never an existing one, never through a symlink) opened for binary writing,
    created with :func:`file_mode` whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                 file_mode())
    try:
        os.fchmod(fd, file_mode())
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


__all__ = ["SHARED_ENV", "configure", "push", "pop", "configured", "protect", "shared_from_env", "is_shared",
           "dir_mode", "file_mode", "make_dirs", "chmod_private", "private_open"]
