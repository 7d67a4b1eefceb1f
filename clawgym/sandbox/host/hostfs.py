"""Host-side file access to a sandbox, shared by the backends.

* `HostFS`: read/write/list/remove files of a sandbox from the host without ever following a
  symlink (every path component is opened with O_NOFOLLOW relative to its parent's fd) and without
  blocking on FIFOs (O_NONBLOCK + a regular-file check).
* `HostFileMixin` / `CountedHostFileMixin`: the Sandbox file methods on top of a HostFS.
The writable state itself: clawgym.sandbox.host.statedir; tree walks: clawgym.sandbox.host.fstree; host processes:
clawgym.sandbox.host.proc.

Errors of host-side file access are OSError subclasses: FileNotFoundError (missing),
IsADirectoryError, NotADirectoryError, PermissionError (a symlink, a FIFO/device, a path outside
the workspace and /tmp).
"""

from __future__ import annotations

import builtins
import errno
import logging
import os
import posixpath
import secrets
import stat
import time
from typing import TYPE_CHECKING

from clawgym.sandbox.host import cleanup
from clawgym.sandbox.host.fstree import (
    _O_DIR,
    FS_IMMUTABLE_FL,
    _remove_at,
    _seal_at,
    _seal_fd,
    _set_fs_flags,
    iter_tree,
)

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from clawgym.sandbox.host.export import WorkspaceExport

log = logging.getLogger(__name__)


class HostFS:
    """Symlink-safe file access to a sandbox's workspace (and /tmp) from the host.

    `roots` maps sandbox paths to host directories, e.g. {"/root/.openclaw/workspace": "/tmp/x/ws",
    "/tmp": "/tmp/x/tmp"}. Relative paths are relative to `workspace`.
    """

    def __init__(self, workspace: str, roots: dict[str, str], uid: int | None = None,
                 gid: int | None = None, max_read: int | None = None):
        self.workspace = posixpath.normpath(workspace)
        self.roots = {posixpath.normpath(k): v for k, v in roots.items()}
        self.uid, self.gid = uid, gid
        # a file bigger than the sandbox's disk can only be sparse (`truncate -s 100G`): reading it
        # whole would blow the host's memory, so read() refuses it (EFBIG) unless max_bytes is given
        self.max_read = max_read

    # -- path mapping ---------------------------------------------------------------------
    def split(self, path: str) -> tuple[str, str, list[str]]:
        """-> (sandbox root, host root dir, components below it)."""
        if not isinstance(path, str) or "\x00" in path:
            raise PermissionError(f"{path!r}: invalid path")
        if not path.startswith("/"):
            rel = posixpath.normpath(path)
            if rel == ".." or rel.startswith("../"):
                raise PermissionError(f"{path}: escapes the workspace")
        p = path if path.startswith("/") else posixpath.join(self.workspace, path)
        p = posixpath.normpath(p)
        if p.startswith("//"):
            p = p[1:]
        # longest matching root first (the workspace may lie inside another root)
        for root in sorted(self.roots, key=len, reverse=True):
            if p == root or p.startswith(root.rstrip("/") + "/"):
                rel = p[len(root):].strip("/")
                parts = [c for c in rel.split("/") if c and c != "."]
                if ".." in parts:
                    raise PermissionError(f"{path}: escapes the sandbox")
                return root, self.roots[root], parts
        raise PermissionError(f"{path}: outside the sandbox workspace and /tmp")

    def _open_root(self, host_root: str) -> int:
        return os.open(host_root, _O_DIR)

    def _walk(self, path: str, parts: list[str], host_root: str, create: bool) -> int:
        """Open the directory parts[...] below host_root, never following symlinks."""
        fd = self._open_root(host_root)
        try:
            for part in parts:
                try:
                    nfd = os.open(part, _O_DIR, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise FileNotFoundError(errno.ENOENT, "no such directory", path) from None
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                        self._chown(part, fd)
                    except FileExistsError:
                        pass
                    nfd = os.open(part, _O_DIR, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        st = os.stat(part, dir_fd=fd, follow_symlinks=False)
                        if stat.S_ISLNK(st.st_mode):
                            raise PermissionError(errno.EPERM, "path goes through a symlink (not followed)",
                                                  path) from None
                        raise NotADirectoryError(errno.ENOTDIR, "not a directory", path) from None
                    raise
                os.close(fd)
                fd = nfd
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _chown(self, name: str, dir_fd: int) -> None:
        if self.uid is not None and os.geteuid() == 0:
            os.chown(name, self.uid, self.gid if self.gid is not None else self.uid,
                     dir_fd=dir_fd, follow_symlinks=False)

    # -- operations -----------------------------------------------------------------------
    def write(self, path: str, content: bytes, mode: int = 0o644) -> None:
        if isinstance(content, str):
            content = content.encode()
        _, host_root, parts = self.split(path)
        if not parts:
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        dfd = self._walk(path, parts[:-1], host_root, create=True)
        name = parts[-1]
        # a fixed-length temporary name: any legal `name` (up to NAME_MAX bytes) can be written
        tmp = f".clawgym-{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=dfd)
            try:
                view = memoryview(content)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                os.fchmod(fd, mode & 0o7777)
                if self.uid is not None and os.geteuid() == 0:
                    os.fchown(fd, self.uid, self.gid if self.gid is not None else self.uid)
            finally:
                os.close(fd)
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            except FileNotFoundError:
                pass
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)  # replaces a symlink, never follows it
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
        finally:
            os.close(dfd)

    def mkdir(self, path: str) -> None:
        """Make the directory `path` and its parents (0755, owned like written files), never following links."""
        _, host_root, parts = self.split(path)
        os.close(self._walk(path, parts, host_root, create=True))

    def read(self, path: str, max_bytes: int | None = None) -> bytes:
        _, host_root, parts = self.split(path)
        if not parts:
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        dfd = self._walk(path, parts[:-1], host_root, create=False)
        try:
            try:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             dir_fd=dfd)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise PermissionError(errno.EPERM, "is a symlink (not followed)", path) from None
                if e.errno == errno.ENOENT:
                    raise FileNotFoundError(errno.ENOENT, "no such file", path) from None
                if e.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # socket, FIFO without writer
                    raise PermissionError(errno.EPERM, "not a regular file", path) from None
                raise
        finally:
            os.close(dfd)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            if not stat.S_ISREG(st.st_mode):
                raise PermissionError(errno.EPERM, "not a regular file", path)
            if max_bytes is None and self.max_read is not None and st.st_size > self.max_read:
                raise OSError(errno.EFBIG, f"file is larger than {self.max_read} bytes "
                                           f"({st.st_size}); read it with max_bytes", path)
            chunks, total = [], 0
            limit = max_bytes if max_bytes is not None else -1
            while True:
                want = 1 << 20 if limit < 0 else min(1 << 20, limit - total)
                if want <= 0:
                    break
                b = os.read(fd, want)
                if not b:
                    break
                chunks.append(b)
                total += len(b)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def list(self, path: str = ".") -> list[str]:
        root, host_root, parts = self.split(path)
        try:
            dfd = self._walk(path, parts, host_root, create=False)
        except FileNotFoundError:
            return []
        except NotADirectoryError:  # a regular file: itself
            try:
                self.read(path, max_bytes=0)
            except OSError:
                return []
            full = posixpath.join(root, *parts)
            ws = self.workspace.rstrip("/") + "/"
            return [full[len(ws):] if full.startswith(ws) else full]
        # report paths relative to the workspace when inside it, else absolute sandbox paths
        base = posixpath.join(root, *parts)
        ws = self.workspace
        out = []
        wsp = ws.rstrip("/") + "/"
        try:
            for ev, _fd, rel, e in iter_tree(dfd):
                if ev != "entry":
                    continue
                try:
                    if not e.is_file(follow_symlinks=False):  # symlinks, FIFOs, sockets, devices
                        continue
                except OSError:
                    continue
                full = posixpath.normpath(posixpath.join(base, *rel, e.name))
                out.append(full[len(wsp):] if full.startswith(wsp) else full)
        finally:
            os.close(dfd)
        return sorted(out)

    def export(self, max_file: int | None = None, max_entries: int = 50_000,
               max_bytes: int | None = None) -> WorkspaceExport:
        """The workspace as data (clawgym.sandbox.host.export): regular files with their bytes and clean modes,
        directories, symlinks resolved inside the workspace at this moment or dropped, everything else
        dropped. Never follows a link, never blocks on a FIFO; an entry that cannot be read is dropped and
        listed (the agent's doing), never an error. At most `max_entries` files, links and directories are
        exported (millions of empty files would make the verification the agent's to stretch); the rest are
        dropped and counted. At most `max_bytes` in all (default: 3/4 of the sandbox's disk, `max_read`), hard
        links and resolved symlinks counted at their full size (they become copies in the room): the room, of the
        same size, can always hold the export, and the host holds one copy of each inode."""
        from clawgym.sandbox.host.export import WorkspaceExport, resolve_links

        exp = WorkspaceExport()
        limit = max_file if max_file is not None else self.max_read
        budget = max_bytes if max_bytes is not None else (self.max_read * 3 // 4 if self.max_read else None)
        root, host_root, parts = self.split(".")
        dfd = self._open_export_root(parts, host_root, exp)
        if dfd is None:
            return exp
        run = _ExportRun(exp, limit, budget)
        try:
            run.walk(dfd, max_entries)
        finally:
            os.close(dfd)
        # the links are resolved against every path under which the sandbox sees this workspace
        aliases = [r for r, h in self.roots.items() if h == host_root] + [root, self.workspace]
        resolve_links(exp, tuple(dict.fromkeys(aliases)), None if budget is None else budget - run.total)
        return exp

    # builtins.list: in this class body `list` is the method HostFS.list
    def _open_export_root(self, parts: builtins.list[str], host_root: str, exp: WorkspaceExport) -> int | None:
        """The workspace directory opened for export, or None (listed in `exp.dropped`) when it is gone.

        The agent deleted the workspace folder or put a link or a file in its place: that is its outcome, and
        what is there is nothing a verifier may read (a link is never followed, a file is not a workspace), so
        the export is empty and the task scores what an empty workspace earns."""
        try:
            return self._walk(".", parts, host_root, create=False)
        except OSError as err:
            if isinstance(err, (FileNotFoundError, NotADirectoryError)) or err.errno in (errno.ELOOP, errno.EPERM):
                exp.dropped.append({"path": ".", "kind": "workspace",
                                    "why": f"the workspace is not a directory any more: {type(err).__name__}"})
                return None
            raise

    def seal(self, path: str, uid: int, gid: int, pin: bool = True) -> None:
        """Make the file or tree at `path` owned by uid:gid and read-only (directories 0755, files 0444, or
        0555 when any exec bit was set; set-id and sticky bits dropped; symlinks inside are only chowned),
        from the host, never following symlinks; where the filesystem allows it the top entry is also made
        immutable, so it cannot be renamed or deleted from its (sandbox-user-owned) parent. Raises
        ValueError when `path` or one of its parents is a symlink, FileNotFoundError when it is missing."""
        _, host_root, parts = self.split(path)
        try:
            dfd = self._walk(path, parts[:-1], host_root, create=False)
        except PermissionError as e:
            raise ValueError(f"{path}: a parent is a symlink (not followed); remove and rewrite it") from e
        except NotADirectoryError as e:
            raise ValueError(f"{path}: a parent is not a directory") from e
        try:
            if not parts:  # a whole root (the workspace itself)
                top = os.open(".", _O_DIR, dir_fd=dfd)
            else:
                st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)  # FileNotFoundError
                if stat.S_ISLNK(st.st_mode):
                    raise ValueError(f"{path}: is a symlink (not followed); remove and rewrite it")
                if stat.S_ISDIR(st.st_mode):
                    top = os.open(parts[-1], _O_DIR, dir_fd=dfd)
                else:
                    top = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                                  dir_fd=dfd)
        finally:
            os.close(dfd)
        try:
            st = os.fstat(top)
            if stat.S_ISDIR(st.st_mode):
                _seal_fd(top, uid, gid)  # the top first: from here on nothing can be added to it
                for ev, fd, _rel, x in iter_tree(top):
                    if ev == "enter":
                        _seal_fd(fd, uid, gid)
                    elif ev == "entry":
                        _seal_at(fd, x.name, uid, gid)
            elif stat.S_ISREG(st.st_mode):
                _seal_fd(top, uid, gid)
            else:
                raise ValueError(f"{path}: not a regular file or directory")
            if pin and os.geteuid() == 0:
                _set_fs_flags(top, on=FS_IMMUTABLE_FL)
        finally:
            os.close(top)

    def remove(self, path: str) -> None:
        _, host_root, parts = self.split(path)
        if not parts:
            # clearing a whole root: remove its contents
            dfd = self._open_root(host_root)
            try:
                for name in os.listdir(dfd):
                    _remove_at(dfd, name)
            finally:
                os.close(dfd)
            return
        try:
            dfd = self._walk(path, parts[:-1], host_root, create=False)
        except (FileNotFoundError, NotADirectoryError):
            return
        try:
            _remove_at(dfd, parts[-1])
        finally:
            os.close(dfd)


class _ExportRun:
    """One `HostFS.export` walk: the export being filled, its per-file `limit` and byte `budget` (None: no
    cap), the bytes taken so far and the files with several names read already. An entry that fails a check
    is dropped and listed, never an error: what the workspace holds is the agent's doing."""

    def __init__(self, exp: WorkspaceExport, limit: int | None, budget: int | None):
        self.exp, self.limit, self.budget = exp, limit, budget
        # bytes of the whole export so far: each name of a hard link counts in full (it becomes a copy in the room)
        self.total = 0
        # (st_dev, st_ino) -> bytes of a file with several names, so the host holds one copy of each inode
        self.inodes: dict[tuple[int, int], bytes] = {}

    def drop(self, path: str, kind: str, why: str) -> None:
        self.exp.dropped.append({"path": path, "kind": kind, "why": why})

    def walk(self, dfd: int, max_entries: int) -> None:
        """Export the tree below the directory open at `dfd`, never following a link. Once the export holds
        `max_entries` files, links and directories, every further entry is only counted (the workspace root
        itself is no entry)."""
        exp = self.exp
        over = 0
        for ev, fd, rel, e in iter_tree(dfd):
            if ev in ("enter", "entry") and (ev == "entry" or rel) and \
                    len(exp.files) + len(exp.links) + len(exp.dirs) >= max_entries:
                over += 1
                continue
            if ev == "enter":
                if rel:
                    exp.dirs.append("/".join(rel))
                continue
            if ev != "entry":
                continue
            self.entry(fd, e.name, "/".join(rel + (e.name,)))
        if over:
            self.drop("", "entries", f"{over} entries beyond the export's {max_entries}-entry cap")

    def entry(self, fd: int, name: str, p: str) -> None:
        """Export the non-directory entry `name` of the directory open at `fd` as path `p`: a symlink as its
        target (resolved after the walk), a regular file within the limits as its bytes; the rest is dropped."""
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError as err:
            self.drop(p, "unreadable", str(err)[:200])
            return
        if stat.S_ISLNK(st.st_mode):
            try:
                self.exp.links[p] = os.fsdecode(os.readlink(name, dir_fd=fd))
            except OSError as err:
                self.drop(p, "symlink", str(err)[:200])
            return
        if not stat.S_ISREG(st.st_mode):
            self.drop(p, "special", "not a regular file")
            return
        if not self.fits(p, st.st_size):
            return
        key = (st.st_dev, st.st_ino)
        if st.st_nlink > 1 and key in self.inodes:  # another name of a file read already: one copy on the host
            self.keep(p, self.inodes[key], st.st_mode)
            return
        self.read_file(fd, name, p)

    def fits(self, p: str, size: int) -> bool:
        """Whether a file of `size` bytes is within the per-file limit and what is left of the budget; if not,
        it is dropped."""
        if self.limit is not None and size > self.limit:
            self.drop(p, "file", f"larger than {self.limit} bytes")
            return False
        if self.budget is not None and self.total + size > self.budget:
            self.drop(p, "file", f"over the export's {self.budget}-byte budget")
            return False
        return True

    def read_file(self, fd: int, name: str, p: str) -> None:
        """Read the file `name` of the directory open at `fd`, stat'ed as a regular file within the limits. The
        agent may have replaced or grown it since, so the open never follows a link nor blocks on a FIFO, and
        what was opened is checked again: its type, and its size as it is read."""
        try:
            f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
        except OSError as err:
            self.drop(p, "file", str(err)[:200])
            return
        try:
            fst = os.fstat(f)
            if not stat.S_ISREG(fst.st_mode):
                self.drop(p, "special", "replaced while exported")
                return
            data = _read_capped(f, self.limit)
            if data is None:
                self.drop(p, "file", f"larger than {self.limit} bytes")
                return
            if not self.fits(p, len(data)):  # grew while read: over the budget
                return
            self.keep(p, data, fst.st_mode)
            if fst.st_nlink > 1:
                self.inodes[(fst.st_dev, fst.st_ino)] = data
        finally:
            os.close(f)

    def keep(self, p: str, data: bytes, st_mode: int) -> None:
        """Add the file `p` with its bytes and clean mode to the export."""
        from clawgym.sandbox.host.export import clean_mode

        self.exp.files[p] = data
        self.exp.modes[p] = clean_mode(st_mode)
        self.total += len(data)


def _read_capped(f: int, limit: int | None) -> bytes | None:
    """The bytes of the file open at `f`, or None as soon as more than `limit` were read: reading stops there,
    so a file that grows while it is read cannot fill the host's memory."""
    chunks: list[bytes] = []
    n = 0  # this file's bytes (the export's total is counted by the caller)
    while True:
        b = os.read(f, 1 << 20)
        if not b:
            break
        chunks.append(b)
        n += len(b)
        if limit is not None and n > limit:
            return None
    return b"".join(chunks)


# ---------------------------------------------------------------------------------------------
class HostFileMixin:
    """read/write/list/remove/snapshot of a Sandbox through `self.fs` (a HostFS). Each call is bracketed by
    `_enter()` (raises SandboxError on a closed sandbox) and `_leave()`; backends that reuse a sandbox
    count activity there, so a late call on a closed handle can never touch the next task's files."""

    fs: HostFS
    _seal_pin = True  # seal(): make the top entry immutable where possible
    # set by the sandbox class (declared here for the type checker only: no value, no attribute)
    _lock: threading.Lock
    _closed: bool

    def _check(self) -> None:
        if getattr(self, "_closed", False):
            from clawgym.sandbox.base import SandboxError

            raise SandboxError("sandbox is closed")

    def _enter(self) -> None:
        self._check()

    def _leave(self) -> bool:
        return True

    def write_file(self, path: str, content: bytes, mode: int = 0o644) -> None:
        self._enter()
        try:
            self.fs.write(path, content, mode)
        finally:
            self._leave()

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """The file's bytes (never through a symlink); max_bytes: at most that many."""
        self._enter()
        try:
            return self.fs.read(path, max_bytes)
        finally:
            self._leave()

    def list_files(self, path: str = ".") -> list[str]:
        self._enter()
        try:
            return self.fs.list(path)
        finally:
            self._leave()

    def remove(self, path: str) -> None:
        self._enter()
        try:
            self.fs.remove(path)
        finally:
            self._leave()

    def snapshot(self) -> dict[str, bytes]:
        """All regular files of the workspace; files too big to be real (sparse, larger than the
        sandbox's disk) are left out with a warning."""
        self._enter()
        try:
            return self._snapshot()
        finally:
            self._leave()

    def export_workspace(self) -> WorkspaceExport:
        """See Sandbox.export_workspace (HostFS.export)."""
        self._enter()
        try:
            return self.fs.export()
        finally:
            self._leave()

    def make_dirs(self, paths) -> None:
        """See Sandbox.make_dirs."""
        self._enter()
        try:
            for p in paths:
                self.fs.mkdir(p)
        finally:
            self._leave()

    def _snapshot(self) -> dict[str, bytes]:
        out = {}
        for p in self.fs.list("."):
            try:
                out[p] = self.fs.read(p)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):  # changed meanwhile
                continue
            except OSError as e:
                if e.errno not in (errno.EFBIG, errno.EPERM, errno.EACCES, errno.ELOOP, errno.ENXIO):
                    raise
                log.warning("snapshot: %s", e)
        return out

    def seal(self, path: str) -> None:
        """See Sandbox.seal (owner: `_seal_owner()`)."""
        uid, gid = self._seal_owner()
        self._enter()
        try:
            self.fs.seal(path, uid, gid, pin=self._seal_pin)
        finally:
            self._leave()

    def _seal_owner(self) -> tuple[int, int]:
        return 0, 0

    def close(self) -> None:
        """Idempotent: the first call marks the handle closed (`_closed` under `_lock`) and runs `_close()`
        (tear down, or hand back to the pool); the handle is no longer tracked for exit-time cleanup."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._close()
        finally:
            cleanup.unregister(self)

    def _close(self) -> None:
        raise NotImplementedError


class CountedHostFileMixin(HostFileMixin):
    """HostFileMixin for sandboxes that are reused: execs and host file operations in flight are counted
    (`_active`, under `_lock`; `_idle` is notified at zero), so a reset can wait until the old handle is
    quiet. The class sets `_lock`, `_idle = threading.Condition(_lock)`, `_active` and `_closed`.

    A sweep (every process of the sandbox but its exec server killed) runs alone: it starts only when one
    activity or none is left, and no new one enters until it is done, so a sweep never kills a command another
    thread has just started (which would then end as killed, for no fault of its own)."""

    _idle: threading.Condition
    _active: int
    _sweeping: bool = False

    def _enter(self) -> None:
        with self._lock:
            while self._sweeping and not self._closed:
                self._idle.wait(0.05)
            if self._closed:
                from clawgym.sandbox.base import SandboxError

                raise SandboxError("sandbox is closed")
            self._active += 1

    def _leave(self) -> bool:
        """-> whether this was the last activity."""
        with self._lock:
            self._active -= 1
            if self._active == 0:
                self._idle.notify_all()
            return self._active == 0

    def _sweep_alone(self, sweep: Callable[[], object]) -> bool:
        """Run `sweep` when the caller's own activity is the only one (an exec whose command exited but left
        something holding its output), with new activities held off until it returns. -> whether it ran."""
        mine = False
        try:
            with self._lock:
                if self._active != 1 or self._sweeping:
                    return False
                mine = self._sweeping = True
            sweep()
            return True
        finally:
            if mine:
                with self._lock:
                    self._sweeping = False
                    self._idle.notify_all()

    def _leave_swept(self, sweep: Callable[[], object] | None) -> bool:
        """`_leave`; when it is the last activity of an open sandbox, `sweep` (None: no sweep) runs first, while
        the activity still counts (a close waits for it) and no new one may enter. -> whether it was the last."""
        mine = False
        try:
            with self._lock:
                if self._active == 1 and sweep is not None and not self._closed and not self._sweeping:
                    mine = self._sweeping = True
            if mine:
                assert sweep is not None
                sweep()
        finally:
            with self._lock:
                if mine:
                    self._sweeping = False
                self._active -= 1
                last = self._active == 0
                self._idle.notify_all()
        return last

    def wait_alone(self, timeout: float) -> bool:
        """Wait until the caller's own activity is the only one left (quiesce: the execs whose commands it
        just killed have returned, including what they do when their command dies, before it goes on)."""
        end = time.monotonic() + timeout
        while True:
            with self._lock:
                if self._active <= 1:
                    return True
            if time.monotonic() > end:
                return False
            time.sleep(0.005)

    def wait_quiet(self, timeout: float) -> bool:
        """Wait until nothing of this handle runs (after close: a reset may start)."""
        end = time.monotonic() + timeout
        with self._lock:
            while self._active:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.01))
        return True
