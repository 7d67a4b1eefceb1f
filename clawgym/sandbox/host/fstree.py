"""Symlink-safe, iterative tree operations on host directories of a sandbox: walk (`iter_tree`), empty
(`empty_dir`, `remove_contents`), remove (`_rmtree`, `_remove_at`) and seal (`_seal_fd`, `_seal_at`, immutable
flags). Nothing here follows a symlink; a directory nested thousands deep neither hits Python's recursion
limit nor holds one fd per level.
"""

from __future__ import annotations

import errno
import logging
import os
import stat

log = logging.getLogger(__name__)

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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
        # (dev, ino) of the directory, its rel parts, its subdirectories not entered yet
        stack: list[tuple[tuple[int, int], tuple[str, ...], list[str]]] = [(_ident(os.fstat(cur)), (), dirs)]
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



def _sealed_mode(st) -> int:
    if stat.S_ISDIR(st.st_mode):
        return 0o755
    if st.st_mode & 0o111 and not st.st_mode & 0o444:
        return 0o111  # execute-only stays execute-only (a process exec'd from it is not dumpable)
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
