"""Host-side pieces shared by the backends.

* `HostFS`: read/write/list/remove files of a sandbox from the host without ever following a
  symlink (every path component is opened with O_NOFOLLOW relative to its parent's fd) and without
  blocking on FIFOs (O_NONBLOCK + a regular-file check).
* `StateDir`: the per-sandbox writable state (HOME=/root, /tmp, the workspace) on a size-limited
  tmpfs mounted on the host (`mount -t tmpfs -o size=<disk_mb>m`), so a disk bomb fills the
  sandbox, not the host. Without root it falls back to a plain temp dir (no size limit).
* `run_capture`: run a host process with a deadline and capped output (used by bwrap and local).

Errors of host-side file access are OSError subclasses: FileNotFoundError (missing),
IsADirectoryError, NotADirectoryError, PermissionError (a symlink, a FIFO/device, a path outside
the workspace and /tmp).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import posixpath
import secrets
import selectors
import signal
import stat
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger(__name__)

PREFIX = "clawgym-sbx-"  # every temp dir / mount / cgroup / container name we create starts with this
SANDBOX_UID = 1000  # the unprivileged user commands run as (docker user, bwrap host uid)
SANDBOX_GID = 1000
HOME = "/root"  # $HOME inside the sandbox; the default workspace /root/.openclaw/workspace lies in it

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def tmp_base() -> str:
    return os.environ.get("CLAWGYM_SANDBOX_TMP") or tempfile.gettempdir()


def new_name() -> str:
    """A unique name carrying the owner pid: clawgym-sbx-<pid>-<hex>."""
    return f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"


def owner_pid(name: str) -> int | None:
    base = os.path.basename(name.rstrip("/"))
    if not base.startswith(PREFIX):
        return None
    try:
        return int(base[len(PREFIX):].split("-", 1)[0])
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# tmpfs mounts (ctypes: no `mount` process per sandbox)
_libc = None


def _lib():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


MS_NOSUID, MS_NODEV = 2, 4
MNT_DETACH = 2


def mount_tmpfs(target: str, size_mb: int, mode: int = 0o755) -> None:
    """A size-limited tmpfs; the inode count is limited too (256 per MB, at least 16384), so a
    sandbox cannot pin kernel memory with millions of empty files."""
    inodes = max(16384, int(size_mb) * 256)
    opts = f"size={int(size_mb)}m,nr_inodes={inodes},mode={mode:o}".encode()
    if _lib().mount(b"tmpfs", target.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount tmpfs on {target}: {os.strerror(e)}")


def umount(target: str) -> None:
    if _lib().umount2(target.encode(), MNT_DETACH) != 0:
        e = ctypes.get_errno()
        if e not in (errno.EINVAL, errno.ENOENT):  # EINVAL: not a mount point
            raise OSError(e, f"umount {target}: {os.strerror(e)}")


def our_mounts() -> list[str]:
    """Mount points (from /proc/mounts) whose last component starts with PREFIX."""
    out = []
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 1:
                    mp = parts[1].encode().decode("unicode_escape")
                    if os.path.basename(mp).startswith(PREFIX):
                        out.append(mp)
    except OSError:
        pass
    return out


def can_mount() -> bool:
    return os.geteuid() == 0 and os.environ.get("CLAWGYM_SANDBOX_NO_TMPFS") != "1"


# ---------------------------------------------------------------------------------------------
class StateDir:
    """The writable state of one sandbox: <dir>/root (HOME), <dir>/tmp, and the workspace
    (<dir>/root/<rel> when it lies under /root, else <dir>/ws)."""

    def __init__(self, workspace: str, disk_mb: int, uid: int | None, gid: int | None,
                 tmpfs: bool | None = None):
        self.name = new_name()
        self.path = os.path.join(tmp_base(), self.name)
        self.workspace = posixpath.normpath(workspace)
        self.uid, self.gid = uid, gid
        os.mkdir(self.path, 0o755)
        self.mounted = False
        try:
            if tmpfs if tmpfs is not None else can_mount():
                mount_tmpfs(self.path, disk_mb)
                self.mounted = True
            self.home = os.path.join(self.path, "root")
            self.tmp = os.path.join(self.path, "tmp")
            if self.workspace == HOME or self.workspace.startswith(HOME + "/"):
                self.ws = os.path.join(self.home, os.path.relpath(self.workspace, HOME))
                self.ws_separate = False
            else:
                self.ws = os.path.join(self.path, "ws")
                self.ws_separate = True
            for d in (self.home, self.tmp):
                os.mkdir(d, 0o755)
                self._own(d)
            os.chmod(self.tmp, 0o1777)
            # create the workspace and its parents, owned by the sandbox user
            rel = os.path.relpath(self.ws, self.path)
            cur = self.path
            for part in rel.split(os.sep):
                cur = os.path.join(cur, part)
                if not os.path.isdir(cur):
                    os.mkdir(cur, 0o755)
                    self._own(cur)
        except BaseException:
            self.remove()
            raise

    def reset(self, extra: tuple[tuple[str, int], ...] = ()) -> None:
        """Back to the state of a fresh StateDir: HOME, /tmp, the workspace and `extra` (dir, mode) emptied
        from the host without following symlinks, owners and modes restored, the workspace path made
        again; raises OSError when something is left. Nothing of the sandbox may run meanwhile."""
        own = self.uid is not None and os.geteuid() == 0
        dirs = ((self.home, 0o755), (self.tmp, 0o1777)) + (((self.ws, 0o755),) if self.ws_separate else ()) + extra
        for d, mode in dirs:
            empty_dir(d)
            if own:
                os.chown(d, self.uid, self.gid if self.gid is not None else self.uid, follow_symlinks=False)
            os.chmod(d, mode, follow_symlinks=False)
        if not self.ws_separate:
            cur = self.home
            for part in os.path.relpath(self.ws, self.home).split(os.sep):
                cur = os.path.join(cur, part)
                os.mkdir(cur, 0o755)
                self._own(cur)
        left = [d for d, _ in ((self.tmp, 0), (self.ws, 0)) + extra if os.listdir(d)]
        if left or (not self.ws_separate and len(os.listdir(self.home)) != 1):
            raise OSError(f"state dirs not empty after the reset: {left or [self.home]}")

    def _own(self, p: str) -> None:
        if self.uid is not None and os.geteuid() == 0:
            os.chown(p, self.uid, self.gid if self.gid is not None else self.uid, follow_symlinks=False)

    def remove(self) -> None:
        if self.mounted:
            try:
                umount(self.path)
            except OSError as e:  # pragma: no cover - logged, cleanup finds it later
                log.warning("could not unmount %s: %s", self.path, e)
            self.mounted = False
        if os.path.lexists(self.path):
            _rmtree(self.path)


def empty_dir(path: str) -> None:
    """Remove everything below `path` (not path itself) without following symlinks (iterative: any depth)."""
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        remove_contents(dfd)
    finally:
        os.close(dfd)


def _rmtree(path: str) -> None:
    """Best-effort removal of `path` and everything below it (never follows symlinks; any depth)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    try:
        dfd = os.open(path, _O_DIR)
    except OSError:
        try:
            os.chmod(path, 0o700)
            dfd = os.open(path, _O_DIR)
        except OSError:
            return
    try:
        try:
            os.fchmod(dfd, 0o700)
        except OSError:
            pass
        remove_contents(dfd, strict=False)
    finally:
        os.close(dfd)
    try:
        os.rmdir(path)
    except OSError as e:
        log.debug("could not remove %s: %s", path, e)


# ---------------------------------------------------------------------------------------------
# iterative, symlink-safe tree walks (a directory nested thousands deep must not hit Python's recursion
# limit, nor hold one fd per level)
def _ident(st) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _scan(fd: int) -> tuple[list, list[str]]:
    """-> (non-directory DirEntry objects, names of subdirectories) of the directory open at fd."""
    files, dirs = [], []
    try:
        with os.scandir(fd) as it:
            for e in it:
                try:
                    if e.is_dir(follow_symlinks=False):
                        dirs.append(e.name)
                    else:
                        files.append(e)
                except OSError:
                    continue
    except OSError:
        pass
    return files, dirs


def _open_parent(cur: int, want: tuple[int, int], root_fd: int, rel: tuple[str, ...]) -> int:
    """The parent of the directory open at `cur`, checked to be the one the walk came from (`want`); when
    it is not (moved meanwhile) it is looked up again from the walk's root by name. Raises OSError."""
    try:
        fd = os.open("..", _O_DIR, dir_fd=cur)
        if _ident(os.fstat(fd)) == want:
            return fd
        os.close(fd)
    except OSError:
        pass
    fd = os.open(".", _O_DIR, dir_fd=root_fd)
    try:
        for part in rel:
            nfd = os.open(part, _O_DIR, dir_fd=fd)
            os.close(fd)
            fd = nfd
        if _ident(os.fstat(fd)) != want:
            raise OSError(errno.ESTALE, "directory moved during the walk")
        return fd
    except BaseException:
        os.close(fd)
        raise


def iter_tree(root_fd: int, writable: bool = False):
    """Depth-first walk below the directory open at `root_fd`, never following symlinks; iterative, with
    one directory fd open at a time. Yields (event, fd, rel, x), fd valid only until the next step:
      ("enter", dir fd, rel parts of the dir, None)       a directory (the root first), just opened
      ("entry", dir fd, rel parts of the dir, DirEntry)   a non-directory entry of that directory
      ("leave", parent fd, rel parts of the parent, name) subdirectory `name` is done (post-order)
    writable: make every directory owner-rwx on the way (removal as a non-root host user)."""
    cur = os.open(".", _O_DIR, dir_fd=root_fd)
    try:
        if writable:
            _make_rwx(cur)
        files, dirs = _scan(cur)
        stack = [(_ident(os.fstat(cur)), (), dirs)]
        yield "enter", cur, (), None
        for e in files:
            yield "entry", cur, (), e
        while stack:
            ident, rel, pending = stack[-1]
            if pending:
                name = pending.pop()
                try:
                    nfd = os.open(name, _O_DIR, dir_fd=cur)
                except PermissionError:
                    if not writable:
                        continue
                    try:
                        _chmod_nofollow(cur, name, 0o700)
                        nfd = os.open(name, _O_DIR, dir_fd=cur)
                    except OSError:
                        continue
                except OSError:  # gone, replaced by a symlink or a file meanwhile
                    continue
                os.close(cur)
                cur = nfd
                if writable:
                    _make_rwx(cur)
                sub = rel + (name,)
                files, dirs = _scan(cur)
                stack.append((_ident(os.fstat(cur)), sub, dirs))
                yield "enter", cur, sub, None
                for e in files:
                    yield "entry", cur, sub, e
            else:
                stack.pop()
                if not stack:
                    break
                nfd = _open_parent(cur, stack[-1][0], root_fd, stack[-1][1])
                os.close(cur)
                cur = nfd
                yield "leave", cur, stack[-1][1], rel[-1]
    finally:
        os.close(cur)


def _make_rwx(fd: int) -> None:
    try:
        m = os.fstat(fd).st_mode
        if m & 0o700 != 0o700:
            os.fchmod(fd, (m & 0o7777) | 0o700)
    except OSError:
        pass


def _chmod_nofollow(dfd: int, name: str, mode: int) -> None:
    """chmod of `name` in dfd, never through a symlink (an O_PATH fd, then /proc/self/fd)."""
    pfd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    try:
        if stat.S_ISLNK(os.fstat(pfd).st_mode):
            raise PermissionError(errno.EPERM, "is a symlink (not followed)", name)
        os.chmod(f"/proc/self/fd/{pfd}", mode)
    finally:
        os.close(pfd)


_FS_IOC_GETFLAGS, _FS_IOC_SETFLAGS = 0x80086601, 0x40086602
FS_IMMUTABLE_FL = 0x10


def _set_fs_flags(fd: int, on: int = 0, off: int = 0) -> bool:
    """Set/clear inode flags (chattr) on an open fd; False where the filesystem or caller cannot."""
    import array
    import fcntl

    try:
        buf = array.array("l", [0])
        fcntl.ioctl(fd, _FS_IOC_GETFLAGS, buf, True)
        new = (buf[0] | on) & ~off
        if new != buf[0]:
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, array.array("l", [new]), True)
        return True
    except OSError:
        return False


def _unpin(dfd: int, name: str) -> bool:
    """Clear the immutable flag of `name` (a sealed directory, see HostFS.seal) so it can be removed."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return False
    try:
        return _set_fs_flags(fd, off=FS_IMMUTABLE_FL)
    finally:
        os.close(fd)


def _retry_unpinned(op, dfd: int, name: str) -> None:
    """op(name, dir_fd=dfd) (unlink / rmdir); on EPERM the immutable flag of the entry and of its directory
    (a sealed tree's top, see HostFS.seal) is cleared and op tried again."""
    try:
        op(name, dir_fd=dfd)
    except PermissionError:
        a = _unpin(dfd, name)
        b = _set_fs_flags(dfd, off=FS_IMMUTABLE_FL)
        if not (a or b):
            raise
        op(name, dir_fd=dfd)


def remove_contents(dfd: int, strict: bool = True) -> None:
    """Remove everything below the directory open at dfd, never following symlinks, at any depth.
    strict: errors other than "already gone" are raised (else skipped)."""
    root = os.geteuid() == 0
    for ev, fd, _rel, x in iter_tree(dfd, writable=not root):
        try:
            if ev == "entry":
                _retry_unpinned(os.unlink, fd, x.name)
            elif ev == "leave":
                _retry_unpinned(os.rmdir, fd, x)
        except FileNotFoundError:
            continue
        except OSError:
            if strict:
                raise


# ---------------------------------------------------------------------------------------------
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
                            raise PermissionError(errno.EPERM, "path goes through a symlink (not followed)", path) from None
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

    def host_path(self, path: str) -> str:
        """The host path of a sandbox path (no symlink check: for display and bind mounts)."""
        _, host_root, parts = self.split(path)
        return os.path.join(host_root, *parts)

    # -- operations -----------------------------------------------------------------------
    def write(self, path: str, content: bytes, mode: int = 0o644) -> None:
        if isinstance(content, str):
            content = content.encode()
        _, host_root, parts = self.split(path)
        if not parts:
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        dfd = self._walk(path, parts[:-1], host_root, create=True)
        name = parts[-1]
        tmp = f".{name}.clawgym-{secrets.token_hex(4)}"
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


def _sealed_mode(st) -> int:
    if stat.S_ISDIR(st.st_mode):
        return 0o755
    return 0o555 if st.st_mode & 0o111 else 0o444


def _seal_fd(fd: int, uid: int, gid: int) -> None:
    st = os.fstat(fd)
    if os.geteuid() == 0:
        os.fchown(fd, uid, gid)
    os.fchmod(fd, _sealed_mode(st))  # after the chown (which may clear set-id bits anyway)


def _seal_at(dfd: int, name: str, uid: int, gid: int) -> None:
    """Seal one non-directory entry of dfd through an O_PATH fd of it; a symlink is only chowned (its
    target is not touched)."""
    try:
        pfd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        return
    try:
        st = os.fstat(pfd)
        if stat.S_ISLNK(st.st_mode):
            if os.geteuid() == 0:
                os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
            return
        if os.geteuid() == 0:
            os.chown(f"/proc/self/fd/{pfd}", uid, gid)  # the inode itself (a magic link, not a symlink)
        os.chmod(f"/proc/self/fd/{pfd}", _sealed_mode(st))
    finally:
        os.close(pfd)


def _remove_at(dfd: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        try:
            sub = os.open(name, _O_DIR, dir_fd=dfd)
        except FileNotFoundError:
            return
        try:
            remove_contents(sub)
        finally:
            os.close(sub)
        _retry_unpinned(os.rmdir, dfd, name)
    else:
        _retry_unpinned(os.unlink, dfd, name)


# ---------------------------------------------------------------------------------------------
class HostFileMixin:
    """read/write/list/remove/snapshot of a Sandbox through `self.fs` (a HostFS). Each call is bracketed by
    `_enter()` (raises SandboxError on a closed sandbox) and `_leave()`; backends that reuse a sandbox
    count activity there, so a late call on a closed handle can never touch the next task's files."""

    fs: HostFS
    _seal_pin = True  # seal(): make the top entry immutable where possible

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


class CountedHostFileMixin(HostFileMixin):
    """HostFileMixin for sandboxes that are reused: execs and host file operations in flight are counted
    (`_active`, under `_lock`; `_idle` is notified at zero), so a reset can wait until the old handle is
    quiet. The class sets `_lock`, `_idle = threading.Condition(_lock)`, `_active` and `_closed`."""

    def _enter(self) -> None:
        with self._lock:
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


# ---------------------------------------------------------------------------------------------
def cap_append(buf: bytearray, data, max_output: int) -> bool:
    """Append to `buf` what fits under `max_output` bytes; -> True when something was dropped."""
    room = max_output - len(buf)
    if room > 0:
        buf += data[:room]
    return len(data) > room


def flood_limit(max_output: int) -> int:
    """Total output after which a command is killed (its output beyond max_output is dropped
    anyway): max(64 MiB, 4 x max_output). Keeps `yes` or a 1 GB dump from running for minutes."""
    return max(64 << 20, 4 * int(max_output))


@dataclass
class Captured:
    rc: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    truncated: bool
    duration_s: float


def run_capture(argv: list[str], *, env: dict[str, str] | None, cwd: str | None, timeout: float,
                stdin: bytes | None, max_output: int,
                on_timeout: Callable[[subprocess.Popen], None] | None = None,
                pass_fds: tuple[int, ...] = ()) -> Captured:
    """Run argv in its own session; stdout/stderr each capped at max_output bytes (the rest is
    read and dropped, so a huge output never blows memory). On timeout the whole process group is
    SIGKILLed (plus `on_timeout`, e.g. a cgroup kill) and rc=124."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, start_new_session=True, pass_fds=pass_fds,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    writer = None
    if stdin is not None:
        def _feed():
            try:
                proc.stdin.write(stdin)
            except (BrokenPipeError, OSError, ValueError):
                pass
            finally:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        writer = threading.Thread(target=_feed, daemon=True)
        writer.start()
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    truncated = False
    timed_out = flooded = False
    total = 0
    flood = flood_limit(max_output)
    deadline = t0 + timeout
    sel = selectors.DefaultSelector()
    for f in (proc.stdout, proc.stderr):
        os.set_blocking(f.fileno(), False)
        sel.register(f.fileno(), selectors.EVENT_READ)
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if flooded:
                break
            for key, _ in sel.select(timeout=min(left, 1.0)):
                fd = key.fd
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(fd)
                    continue
                total += len(chunk)
                if total > flood:
                    truncated = flooded = True
                    break
                truncated |= cap_append(bufs[fd], chunk, max_output)
        if flooded:
            _kill(proc, on_timeout)
        elif not timed_out:
            left = deadline - time.monotonic()
            try:
                proc.wait(timeout=max(left, 0.001))
            except subprocess.TimeoutExpired:
                timed_out = True
    except BaseException:
        _kill(proc, on_timeout)
        raise
    finally:
        sel.close()
    if timed_out:
        _kill(proc, on_timeout)
    rc = proc.returncode if not timed_out else 124
    if rc is not None and rc < 0:
        rc = 128 - rc  # killed by a signal: report it the way a shell does
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    out, err = bytes(bufs[out_fd]), bytes(bufs[err_fd])
    for f in (proc.stdout, proc.stderr):
        f.close()
    if writer is not None:
        writer.join(timeout=1)
    return Captured(rc=rc, stdout=out, stderr=err, timed_out=timed_out, truncated=truncated,
                    duration_s=time.monotonic() - t0)


def _kill(proc: subprocess.Popen, extra: Callable[[subprocess.Popen], None] | None) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if extra is not None:
        try:
            extra(proc)
        except Exception as e:  # pragma: no cover
            log.warning("extra kill failed: %s", e)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        proc.kill()
        proc.wait()
