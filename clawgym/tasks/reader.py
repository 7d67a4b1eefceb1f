"""The one safe reader every importer uses: imported task folders are untrusted input.

`TaskDir(root, label)` is a read-only view of one task's folder that never leaves it:

- every path is relative to the folder and walked one component at a time with ``O_NOFOLLOW`` (directories
  with ``O_DIRECTORY``): a symlink anywhere -- the folder itself, a top folder such as ``input_files/``, an
  entry file such as ``data_entry.json``, or anything below -- is a TaskError naming the file (and the field),
  never followed;
- an absolute path or one with ``..`` / empty / ``.`` parts (a PinchBench ``source``) is refused;
- a regular file with more than one link (``st_nlink > 1``) is refused: a hard link can point at a host file;
- FIFOs, devices and sockets are refused (opened ``O_NONBLOCK``, checked with ``fstat`` before reading);
- sizes are checked with ``fstat`` before reading, against a per-file cap, a per-task budget and an optional
  per-suite budget (`Limits`; defaults 16 MiB / 64 MiB / 1 GiB) -- a sparse 256 MiB file is never read.

`load_yaml` parses YAML with a SafeLoader that refuses aliases (no billion-laughs expansion) and bounds
node count and nesting depth, after a size cap on the text. `load_json` bounds nesting too.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml

from clawgym.tasks.model import File, TaskError
from clawgym.tasks.names import check_relpath

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class Limits:
    """Caps on what one import may read. Every importer takes `limits=`; the defaults suit real suites
    (the largest ClawGym-Bench task is well under 1 MiB)."""

    file_bytes: int = 16 * MiB  # one file (a workspace file, reward file, data_entry.json, a .md task file)
    task_bytes: int = 64 * MiB  # all files of one task together
    suite_bytes: int = 1 * GiB  # all files of one import together (one folder, one Parquet file)
    task_files: int = 10_000  # files in one task
    tree_depth: int = 32  # directory nesting in a task's folders
    yaml_bytes: int = 1 * MiB  # PinchBench front matter, before parsing
    yaml_nodes: int = 100_000  # YAML nodes (after parsing; aliases are refused anyway)
    yaml_depth: int = 64  # YAML / JSON nesting


DEFAULT_LIMITS = Limits()

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_O_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _size(n: int) -> str:
    for unit, k in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= k:
            return f"{n / k:g} {unit}"
    return f"{n} bytes"


class Budget:
    """Bytes one scope (a task, a suite) may still read; `take` raises TaskError naming the file past it."""

    def __init__(self, limit: int, scope: str):
        self.limit, self.scope, self.used = int(limit), scope, 0

    def take(self, n: int, file: str, field: str | None = None) -> None:
        if self.used + n > self.limit:
            raise TaskError(file, field, f"would exceed the per-{self.scope} size cap of {_size(self.limit)} "
                                         f"({_size(self.used)} read before this {_size(n)} file)")
        self.used += n


def suite_budget(limits: Limits | None = None) -> Budget:
    """A fresh per-suite Budget of `limits` (one per folder import, shared by its tasks)."""
    return Budget((limits or DEFAULT_LIMITS).suite_bytes, "suite")


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


class TaskDir:
    """A read-only view of one task folder (see the module docstring). Use as a context manager, or call
    close(). `label` is how errors name the folder (e.g. ``task_0042``); `follow_root` allows the folder
    itself to be a symlink (only for a path the user named explicitly, never for an entry of a suite)."""

    def __init__(self, root: str | Path, label: str, *, limits: Limits | None = None,
                 suite: Budget | None = None, task: Budget | None = None, follow_root: bool = False):
        self.root, self.label = Path(root), label
        self.limits = limits or DEFAULT_LIMITS
        self.suite = suite
        self.task = task or Budget(self.limits.task_bytes, "task")
        self.n_files = 0
        try:
            st = os.lstat(self.root)
        except FileNotFoundError:
            raise TaskError(label, None, "not found") from None
        if stat.S_ISLNK(st.st_mode) and not follow_root:
            raise TaskError(label, None, "is a symlink (a task folder must be a real folder)")
        try:
            self.fd = os.open(self.root, _O_DIR & ~(0 if not follow_root else os.O_NOFOLLOW))
        except NotADirectoryError:
            raise TaskError(label, None, "is not a directory") from None
        except OSError as e:
            raise TaskError(label, None, f"cannot be opened: {e.strerror}") from None

    # -- plumbing ---------------------------------------------------------------------------------------
    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> TaskDir:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):  # pragma: no cover - safety net
        try:
            self.close()
        except Exception:
            pass

    def name(self, rel: str) -> str:
        """How errors name `rel`: <label>/<rel>."""
        return f"{self.label}/{rel}" if self.label and rel else (rel or self.label)

    def _rel(self, rel: str, field: str | None) -> list[str]:
        try:
            return check_relpath(rel).split("/")
        except ValueError as e:
            raise TaskError(self.label, field, str(e)) from None

    def _walk_dirs(self, parts: list[str], field: str | None) -> int | None:
        """An fd of the directory parts (opened without following anything); None when one is missing.
        The caller closes it (unless it is self.fd)."""
        fd = self.fd
        for i, p in enumerate(parts):
            sub = "/".join(parts[:i + 1])
            try:
                st = os.stat(p, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            except NotADirectoryError:
                st = None
            if st is None:
                if fd != self.fd:
                    os.close(fd)
                return None
            k = _kind(st.st_mode)
            if k != "dir":
                if fd != self.fd:
                    os.close(fd)
                raise TaskError(self.name(sub), field, "is a symlink (not allowed in task files)" if k == "symlink"
                                else "is not a directory")
            try:
                nfd = os.open(p, _O_DIR, dir_fd=fd)
            except OSError as e:
                if fd != self.fd:
                    os.close(fd)
                raise TaskError(self.name(sub), field, f"cannot be opened ({e.strerror}; symlinks are not "
                                                       "allowed in task files)") from None
            if fd != self.fd:
                os.close(fd)
            fd = nfd
        return fd

    def kind(self, rel: str, field: str | None = None) -> str:
        """'missing' | 'file' | 'dir' | 'symlink' | 'other' for `rel` (its last part not followed). A symlink
        or non-directory on the way to it is a TaskError."""
        parts = self._rel(rel, field)
        fd = self._walk_dirs(parts[:-1], field)
        if fd is None:
            return "missing"
        try:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return "missing"
        finally:
            if fd != self.fd:
                os.close(fd)
        return _kind(st.st_mode)

    def _read_at(self, dfd: int, name: str, rel: str, field: str | None) -> tuple[bytes, int]:
        """(content, st_mode) of the regular file `name` in directory dfd, every check applied."""
        shown = self.name(rel)
        try:
            fd = os.open(name, _O_FILE, dir_fd=dfd)
        except FileNotFoundError:
            raise TaskError(shown, field, "missing") from None
        except OSError as e:  # ELOOP: a symlink
            st = None
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except OSError:
                pass
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise TaskError(shown, field, "is a symlink (not allowed in task files)") from None
            raise TaskError(shown, field, f"cannot be opened: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise TaskError(shown, field, "is a directory" if stat.S_ISDIR(st.st_mode)
                                else "is not a regular file")
            if st.st_nlink > 1:
                raise TaskError(shown, field, f"is a hard link (link count {st.st_nlink}): task files must not be "
                                              "linked to files outside the task folder")
            cap = self.limits.file_bytes
            if st.st_size > cap:
                raise TaskError(shown, field, f"is {_size(st.st_size)}, over the per-file size cap of {_size(cap)}")
            self.n_files += 1
            if self.n_files > self.limits.task_files:
                raise TaskError(shown, field, f"is over the cap of {self.limits.task_files} files per task")
            self.task.take(st.st_size, shown, field)
            if self.suite is not None:
                self.suite.take(st.st_size, shown, field)
            chunks, n = [], 0
            while True:
                b = os.read(fd, min(1 << 20, cap + 1 - n))
                if not b:
                    break
                chunks.append(b)
                n += len(b)
                if n > st.st_size or n > cap:
                    raise TaskError(shown, field, "changed while being read (grew past its size)")
            return b"".join(chunks), st.st_mode
        finally:
            os.close(fd)

    # -- reading ----------------------------------------------------------------------------------------
    def read_bytes(self, rel: str, field: str | None = None) -> bytes:
        """The content of the regular file `rel`; TaskError ("missing", a symlink, a hard link, too big...)."""
        parts = self._rel(rel, field)
        fd = self._walk_dirs(parts[:-1], field)
        if fd is None:
            raise TaskError(self.name(rel), field, "missing")
        try:
            return self._read_at(fd, parts[-1], rel, field)[0]
        finally:
            if fd != self.fd:
                os.close(fd)

    def read_text(self, rel: str, field: str | None = None) -> str:
        data = self.read_bytes(rel, field)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TaskError(self.name(rel), field, f"is not UTF-8 text: {e}") from None

    def read_tree(self, rel: str, field: str | None = None, *, missing_ok: bool = True) -> list[File]:
        """Every regular file under the folder `rel` (recursive, sorted by path) as Files with normalised
        modes (see clawgym.tasks._io.normalise_mode). The folder itself must not be a symlink; neither may
        anything below it. A missing folder is [] when missing_ok, else a TaskError."""
        from clawgym.tasks._io import normalise_mode

        parts = self._rel(rel, field)
        k = self.kind(rel, field)
        if k == "missing":
            if missing_ok:
                return []
            raise TaskError(self.name(rel), field, "missing")
        if k == "symlink":
            raise TaskError(self.name(rel), field, "is a symlink (not allowed in task files)")
        if k != "dir":
            raise TaskError(self.name(rel), field, "is not a directory")
        fd = self._walk_dirs(parts, field)
        assert fd is not None
        files: list[File] = []

        def walk(dfd: int, prefix: str, depth: int) -> None:
            if depth > self.limits.tree_depth:
                raise TaskError(self.name(f"{rel}/{prefix}".rstrip("/")), field,
                                f"nests deeper than {self.limits.tree_depth} folders")
            for name in sorted(os.listdir(dfd)):
                sub = f"{prefix}{name}"
                shown = f"{rel}/{sub}"
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                k = _kind(st.st_mode)
                if k == "symlink":
                    raise TaskError(self.name(shown), field, "is a symlink (not allowed in task files)")
                if k == "dir":
                    self.n_files += 1  # folders count towards the per-task entry cap too
                    if self.n_files > self.limits.task_files:
                        raise TaskError(self.name(shown), field,
                                        f"is over the cap of {self.limits.task_files} files per task")
                    try:
                        nfd = os.open(name, _O_DIR, dir_fd=dfd)
                    except OSError as e:
                        raise TaskError(self.name(shown), field, f"cannot be opened: {e.strerror}") from None
                    try:
                        walk(nfd, sub + "/", depth + 1)
                    finally:
                        os.close(nfd)
                elif k == "file":
                    content, mode = self._read_at(dfd, name, shown, field)
                    try:
                        files.append(File(path=sub, content=content, mode=normalise_mode(mode)))
                    except ValueError as e:
                        raise TaskError(self.name(shown), field, str(e).splitlines()[-1]) from None
                else:
                    raise TaskError(self.name(shown), field, "is not a regular file")

        try:
            walk(fd, "", 0)
        finally:
            if fd != self.fd:
                os.close(fd)
        files.sort(key=lambda f: f.path)
        return files


def read_single_file(path: str | Path, label: str = "", *, limits: Limits | None = None,
                     suite: Budget | None = None, task: Budget | None = None, field: str | None = None) -> bytes:
    """One file named by its own path (its folder is the caller's; the file itself is opened without
    following a symlink, with the hard-link and size checks of TaskDir). Errors name it `label`/<name>."""
    p = Path(path)
    with TaskDir(p.parent, label, limits=limits, suite=suite, task=task, follow_root=True) as d:
        return d.read_bytes(p.name, field)


# ------------------------------------------------------------------------------------------- YAML/JSON ----
class BoundedSafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses aliases (``*x``, also ``<<: *x`` merges) and caps node count and depth,
    so a few hundred bytes of front matter cannot expand into gigabytes (billion laughs)."""

    max_nodes = DEFAULT_LIMITS.yaml_nodes
    max_depth = DEFAULT_LIMITS.yaml_depth

    def __init__(self, stream):
        super().__init__(stream)
        self._nodes = 0
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            ev = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"YAML aliases are not allowed (*{ev.anchor})",
                                              ev.start_mark)
        self._nodes += 1
        if self._nodes > self.max_nodes:
            raise yaml.composer.ComposerError(None, None, f"more than {self.max_nodes} YAML nodes",
                                              self.peek_event().start_mark)
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                raise yaml.composer.ComposerError(None, None, f"YAML nested deeper than {self.max_depth}",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(text: str, file: str, field: str | None, limits: Limits | None = None) -> Any:
    """YAML text -> data with BoundedSafeLoader, after a size cap; TaskError naming file and field."""
    lim = limits or DEFAULT_LIMITS
    n = len(text.encode("utf-8", errors="replace"))
    if n > lim.yaml_bytes:
        raise TaskError(file, field, f"is {_size(n)}, over the YAML size cap of {_size(lim.yaml_bytes)}")
    loader_cls = BoundedSafeLoader
    if (lim.yaml_nodes, lim.yaml_depth) != (BoundedSafeLoader.max_nodes, BoundedSafeLoader.max_depth):
        # cast: a 3-argument type() with base BoundedSafeLoader is its subclass, which the checker cannot infer
        loader_cls = cast("type[BoundedSafeLoader]", type("BoundedSafeLoader", (BoundedSafeLoader,),
                                                           {"max_nodes": lim.yaml_nodes, "max_depth": lim.yaml_depth}))
    loader = loader_cls(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        raise TaskError(file, field, f"is not valid YAML: {str(e).splitlines()[0]}") from None
    except RecursionError:
        raise TaskError(file, field, "is nested too deeply") from None
    finally:
        loader.dispose()


def _depth(v: Any, limit: int) -> None:
    stack = [(v, 1)]
    while stack:
        x, d = stack.pop()
        if d > limit:
            raise ValueError(f"nested deeper than {limit}")
        if isinstance(x, dict):
            stack.extend((y, d + 1) for y in x.values())
        elif isinstance(x, list):
            stack.extend((y, d + 1) for y in x)


def load_json(text: str, file: str, field: str | None = None, limits: Limits | None = None) -> Any:
    """JSON text -> data, nesting bounded; TaskError naming file and field."""
    lim = limits or DEFAULT_LIMITS
    try:
        data = json.loads(text)
        _depth(data, lim.yaml_depth)
    except json.JSONDecodeError as e:
        raise TaskError(file, field, f"is not valid JSON: {e}") from None
    except (RecursionError, ValueError) as e:
        raise TaskError(file, field, f"is not valid JSON: {e if isinstance(e, ValueError) else 'nested too deeply'}") \
            from None
    return data


__all__ = ["Limits", "DEFAULT_LIMITS", "Budget", "suite_budget", "TaskDir", "read_single_file",
           "BoundedSafeLoader", "load_yaml", "load_json", "KiB", "MiB", "GiB"]
