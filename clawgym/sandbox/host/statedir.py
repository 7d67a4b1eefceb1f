"""The per-sandbox writable state on the host, and the names every sandbox resource carries.

* `StateDir`: HOME=/root, /tmp and the workspace of one sandbox on a size-limited tmpfs mounted on the host
  (`mount -t tmpfs -o size=<disk_mb>m`), so a disk bomb fills the sandbox, not the host. Without root it
  falls back to a plain temp dir (no size limit).
* names: clawgym-sbx-<pid>-<hex> (`new_name`, `owner_pid`), so leftovers of dead processes can be found
  (clawgym.sandbox.host.cleanup); tmpfs mounts through ctypes (no `mount` process per sandbox).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import posixpath
import secrets
import stat
import tempfile

from clawgym.sandbox.host.fstree import _O_DIR, _remove_at, _rmtree, empty_dir, iter_tree

log = logging.getLogger(__name__)

PREFIX = "clawgym-sbx-"  # every temp dir / mount / cgroup / container name we create starts with this
SANDBOX_UID = 1000  # the unprivileged user commands run as (docker user, bwrap host uid)
SANDBOX_GID = 1000
HOME = "/root"  # $HOME inside the sandbox; the default workspace /root/.openclaw/workspace lies in it
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def sandbox_env(config, env: dict | None = None) -> dict[str, str]:
    """The environment a command gets inside an isolating sandbox (docker, bwrap): PATH, HOME, USER, LANG,
    TMPDIR, WORKSPACE, TERM, then config.env, then `env`; nothing of the host's."""
    e = {"PATH": SANDBOX_PATH, "HOME": HOME, "USER": "sandbox", "LOGNAME": "sandbox",
         "LANG": "C.UTF-8", "TMPDIR": "/tmp", "WORKSPACE": config.workspace, "TERM": "dumb"}
    e.update(config.env)
    if env:
        e.update(env)
    return {str(k): str(v) for k, v in e.items()}


def strip_xattrs(path: str | int) -> None:
    """Remove every extended attribute of `path` itself (a path, never followed if a symlink, or an open fd),
    default and access ACLs included, then check none is left (raises OSError). A directory a reset keeps (HOME,
    /tmp, the workspace) belongs to the sandbox user, who may set a default ACL on it: chmod leaves that in place
    and every entry made there later (the next task's workspace, its files) would inherit it (e.g. mode 0500 ->
    EACCES), so a reset must clear metadata, not only contents, modes and owners."""
    kw = {} if isinstance(path, int) else {"follow_symlinks": False}
    try:
        names = os.listxattr(path, **kw)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return
        raise
    for n in names:
        os.removexattr(path, n, **kw)
    left = os.listxattr(path, **kw)
    if left:
        raise OSError(f"extended attributes left on {path}: {left}")


def tmp_base(root: str = "") -> str:
    """Where sandbox state directories go: `root` (SandboxConfig.state_root), else the system temp dir."""
    return root or tempfile.gettempdir()


def new_name() -> str:
    """A unique name carrying the owner pid: clawgym-sbx-<pid>-<hex>."""
    return f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"


def owner_pid(name: str) -> int | None:
    """The pid in a name made by :func:`new_name`, or None when it is not such a name."""
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
    """Lazily detach the mount at `target`; not being a mount point (or missing) is no error."""
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


def can_mount(tmpfs: bool = True) -> bool:
    """Whether state directories can be tmpfs mounts: `tmpfs` allows them (SandboxConfig.tmpfs) and this process is
    root."""
    return bool(tmpfs) and os.geteuid() == 0


# ---------------------------------------------------------------------------------------------
class StateDir:
    """The writable state of one sandbox: <dir>/root (HOME), <dir>/tmp, and the workspace
    (<dir>/root/<rel> when it lies under /root, else <dir>/ws). <dir> is in `root` (tmp_base); `tmpfs`: a tmpfs
    mount or a plain dir (None: a mount where this process may make one, can_mount())."""

    def __init__(self, workspace: str, disk_mb: int, uid: int | None, gid: int | None,
                 tmpfs: bool | None = None, root: str = ""):
        self.name = new_name()
        self.path = os.path.join(tmp_base(root), self.name)
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
        dirs = ((self.home, 0o755), (self.tmp, 0o1777)) + (((self.ws, 0o755),) if self.ws_separate else ()) + extra
        for d, mode in dirs:
            empty_dir(d)
            strip_xattrs(d)
            self._own(d)
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

    def lock_workspace_path(self, uid: int, gid: int) -> None:
        """The directories from HOME down to the workspace's parent owned by uid:gid (another owner than the
        sandbox user: root) and mode 0755, from the host, never following a symlink: the sandbox user can then
        rename neither the workspace nor a directory above it (HOME's own parent, /, is not its). For the clean room
        before a check runs; `reset` gives them back. A workspace outside HOME is its own mount: nothing to do."""
        if self.ws_separate:
            return
        chain = os.path.relpath(os.path.dirname(self.ws), self.home).split(os.sep)
        fd = os.open(self.home, _O_DIR | os.O_NOFOLLOW)
        try:
            for part in ["."] + [c for c in chain if c and c != "."]:
                nfd = os.open(part, _O_DIR | os.O_NOFOLLOW, dir_fd=fd)  # a symlink raises: never followed
                os.close(fd)
                fd = nfd
                os.fchown(fd, uid, gid)
                os.fchmod(fd, 0o755)
        finally:
            os.close(fd)

    def scrub(self) -> list[list[str]]:
        """Between the agent and the verifier (nothing of the sandbox may run): /tmp and HOME emptied from the
        host, except the directories on the way down to the workspace, never following symlinks, any depth.
        Returns the workspace entries that are neither regular files nor directories, as [rel, kind, target]
        (kind "symlink" with its target, or "special"). Raises OSError when a directory on the way down to the
        workspace is no longer a plain directory (replaced by the agent)."""
        empty_dir(self.tmp)
        for d in (self.tmp, self.home, self.ws):  # what the verifier writes there must not inherit the agent's ACLs
            strip_xattrs(d)
        if self.ws_separate:
            empty_dir(self.home)
        else:
            chain = os.path.relpath(self.ws, self.home).split(os.sep)
            fd = os.open(self.home, _O_DIR)
            try:
                for part in chain:
                    for name in os.listdir(fd):
                        if name != part:
                            _remove_at(fd, name)
                    nfd = os.open(part, _O_DIR, dir_fd=fd)
                    os.close(fd)
                    fd = nfd
                    strip_xattrs(fd)
            finally:
                os.close(fd)
        odd: list[list[str]] = []
        wfd = os.open(self.ws, _O_DIR)
        try:
            for ev, dfd, rel, e in iter_tree(wfd):
                if ev != "entry" or len(odd) >= 10000:
                    continue
                path = "/".join(rel + (e.name,))
                try:
                    st = os.stat(e.name, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISLNK(st.st_mode):
                    try:
                        target = os.readlink(e.name, dir_fd=dfd)
                    except OSError:
                        target = ""
                    odd.append([path, "symlink", target])
                elif not stat.S_ISREG(st.st_mode):
                    odd.append([path, "special", ""])
        finally:
            os.close(wfd)
        return odd

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
