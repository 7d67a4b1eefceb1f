"""bubblewrap backend: a fresh `bwrap` per exec.

* system: the debootstrapped root (scripts/build_sandbox_image.sh, /var/lib/clawgym/rootfs, same
  environment as the docker image) bound read-only; without it the host's /usr, /etc, ... read-only
  (host /etc/shadow masked);
* writable state (HOME=/root with the workspace, /tmp) on a per-sandbox size-limited host tmpfs;
* --unshare-all (no network, new pid/ipc/uts/user namespaces), --die-with-parent, --new-session,
  uid/gid 1000; as root bwrap runs unprivileged as host uid 1000 (setpriv);
* memory + pids limits through a per-sandbox cgroup (v1 or v2), else prlimit per process;
* on timeout the process group and the whole cgroup are SIGKILLed; when the command ends the pid
  namespace dies with it, so background processes never outlive an exec.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import shutil
import stat
import subprocess
import threading
from typing import Iterable

from clawgym.sandbox import cleanup
from clawgym.sandbox.base import ExecResult, Sandbox, SandboxConfig, SandboxError, SandboxFactory
from clawgym.sandbox.cgroups import Cgroup
from clawgym.sandbox.hostfs import HOME, SANDBOX_GID, SANDBOX_UID, HostFileMixin, HostFS, StateDir, run_capture

log = logging.getLogger(__name__)

DEFAULT_ROOTFS = "/var/lib/clawgym/rootfs"
STAMP = ".clawgym-stamp"
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SKIP_TOP = {"proc", "dev", "sys", "tmp", "root", "home", "run", "boot", "media", "mnt", "srv",
             "lost+found"}
_HOST_TOP = ["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt"]


def find_rootfs(config: SandboxConfig) -> str | None:
    """The debootstrapped root to use, or None for the host's system dirs."""
    cand = config.rootfs or os.environ.get("CLAWGYM_ROOTFS") or DEFAULT_ROOTFS
    if cand == "host":
        return None
    if os.path.isfile(os.path.join(cand, STAMP)) and os.path.isdir(os.path.join(cand, "usr")):
        return cand
    if config.rootfs:
        raise SandboxError(f"rootfs {config.rootfs} is not built (run scripts/build_sandbox_image.sh)")
    return None


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


_features: dict[str, bool] = {}


def _supports(flag: str) -> bool:
    """Whether this bwrap knows `flag` (e.g. --disable-userns needs bubblewrap >= 0.8)."""
    if flag not in _features:
        try:
            h = subprocess.run([bwrap_path() or "bwrap", "--help"], capture_output=True, text=True, timeout=10)
            _features[flag] = flag in h.stdout + h.stderr
        except (OSError, subprocess.TimeoutExpired):
            _features[flag] = False
    return _features[flag]


def available() -> tuple[bool, str]:
    """(True, "") when bwrap can create a sandbox here, else (False, reason)."""
    b = bwrap_path()
    if not b:
        return False, "bwrap is not installed (apt-get install bubblewrap)"
    argv = [b, "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"]
    if os.geteuid() == 0:
        argv = ["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_GID}", "--clear-groups"] + argv
    try:
        p = subprocess.run(argv, capture_output=True, timeout=20, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"bwrap failed to start: {e}"
    if p.returncode != 0:
        return False, f"bwrap cannot create namespaces here: {p.stderr.decode(errors='replace').strip()}"
    return True, ""


def _system_args(rootfs: str | None) -> list[str]:
    args: list[str] = []
    if rootfs:
        for name in sorted(os.listdir(rootfs)):
            if name in _SKIP_TOP or name.startswith("."):
                continue
            src = os.path.join(rootfs, name)
            if os.path.islink(src):
                args += ["--symlink", os.readlink(src), "/" + name]
            elif os.path.isdir(src):
                args += ["--ro-bind", src, "/" + name]
    else:
        for name in _HOST_TOP:
            src = "/" + name
            if os.path.islink(src):
                args += ["--symlink", os.readlink(src), src]
            elif os.path.isdir(src):
                args += ["--ro-bind", src, src]
        for secret in ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-"):
            if os.path.exists(secret):
                args += ["--ro-bind", "/dev/null", secret]
    return args


class BwrapSandbox(HostFileMixin, Sandbox):
    backend = "bwrap"

    def __init__(self, config: SandboxConfig, rootfs: str | None):
        super().__init__(config)
        self.rootfs = rootfs
        self._closed = False
        self._lock = threading.Lock()
        self._privileged = os.geteuid() == 0
        uid = SANDBOX_UID if self._privileged else None
        gid = SANDBOX_GID if self._privileged else None
        self._state = StateDir(config.workspace, config.disk_mb, uid, gid)
        self._cg = None
        try:
            self._cg = Cgroup.create(self._state.name, config.memory_mb, config.pids, config.cpus)
            roots = {self._state.workspace: self._state.ws, "/tmp": self._state.tmp}  # host access: workspace + /tmp only
            self.fs = HostFS(config.workspace, roots, uid, gid, max_read=max(1, int(config.disk_mb)) << 20)
            self._argv_static = self._build_static()
        except BaseException:
            self._teardown()
            raise
        cleanup.register(self)

    @property
    def host_workspace(self) -> str:
        """The workspace directory as seen from the host (for debugging / copying out)."""
        return self._state.ws

    def _build_static(self) -> list[str]:
        c = self.config
        a = [bwrap_path() or "bwrap", "--unshare-all", "--unshare-user"]
        if c.network:
            a.append("--share-net")
        if _supports("--disable-userns"):
            a.append("--disable-userns")  # no nested user namespaces inside the sandbox
        a += ["--die-with-parent", "--new-session",
              "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID), "--hostname", "clawgym"]
        a += _system_args(self.rootfs)
        a += ["--proc", "/proc", "--dev", "/dev", "--dir", "/run", "--dir", "/home"]
        a += ["--bind", self._state.home, HOME, "--bind", self._state.tmp, "/tmp"]
        if self._state.ws_separate:
            a += ["--bind", self._state.ws, self._state.workspace]
        for host, inside in c.extra_ro_binds:
            a += ["--ro-bind", host, inside]
        a += ["--remount-ro", "/"]
        return a

    def _inner_prefix(self) -> list[str]:
        """Without a cgroup: per-process rlimits, set inside the sandbox (RLIMIT_NPROC then counts
        only this sandbox's user namespace, not every uid-1000 process on the host)."""
        if self._cg is not None:
            return []
        c = self.config
        return ["prlimit", f"--as={int(c.memory_mb) * 1024 * 1024 * 4}", f"--nproc={int(c.pids)}",
                f"--fsize={int(c.disk_mb) * 1024 * 1024}", "--"]

    def _prefix(self) -> list[str]:
        p: list[str] = []
        if self._cg is not None:
            p += self._cg.shell_join_prefix()
        if self._privileged:
            p += ["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_GID}", "--clear-groups"]
        return p

    def _env(self, env: dict[str, str] | None) -> dict[str, str]:
        e = {"PATH": SANDBOX_PATH, "HOME": HOME, "USER": "sandbox", "LOGNAME": "sandbox",
             "LANG": "C.UTF-8", "TMPDIR": "/tmp", "WORKSPACE": self.config.workspace, "TERM": "dumb"}
        e.update(self.config.env)
        if env:
            e.update(env)
        return {k: str(v) for k, v in e.items()}

    def exec(self, cmd, timeout=None, workdir=None, env=None, stdin=None, max_output=1_000_000) -> ExecResult:
        if self._closed:
            raise SandboxError("sandbox is closed")
        argv = ["bash", "-lc", cmd] if isinstance(cmd, str) else [str(x) for x in cmd]
        if not argv:
            raise ValueError("empty command")
        chdir = self.config.workspace
        if workdir:
            wd = posixpath.normpath(workdir if workdir.startswith("/") else posixpath.join(self.config.workspace, workdir))
            if self._plain_dir(wd):
                chdir = wd  # bwrap's --chdir: no extra shell in the way
            else:  # missing, or a symlink somewhere: let a shell inside resolve it (rc 126 if it fails)
                argv = ["/bin/sh", "-c", 'cd -- "$1" || exit 126; shift; exec "$@"', "sh", wd] + argv
        timeout = float(timeout if timeout is not None else self.config.default_timeout_s)
        r, w = os.pipe()
        try:
            full = self._prefix() + self._argv_static[:1] + ["--json-status-fd", str(w)] + \
                self._argv_static[1:] + ["--chdir", chdir, "--"] + self._inner_prefix() + argv
            cg = self._cg
            on_timeout = (lambda _p: cg.kill_all()) if cg is not None else None
            cap = run_capture(full, env=self._env(env), cwd="/", timeout=timeout, stdin=stdin,
                              max_output=max_output, on_timeout=on_timeout, pass_fds=(w,))
            os.close(w)
            w = -1
            status = _read_all(r)
        finally:
            if w >= 0:
                os.close(w)
            os.close(r)
        if self._closed:
            raise SandboxError("sandbox was closed while a command ran")
        cg = self._cg
        if cg is not None and not cap.timed_out:
            cg.kill_all()  # nothing should be left (pid namespace died); be sure
        if not cap.timed_out and b"child-pid" not in status:
            raise SandboxError(f"bwrap failed to start the sandbox (rc={cap.rc}): "
                               f"{cap.stderr.decode(errors='replace').strip()[:2000]}")
        rc = cap.rc
        if not cap.timed_out:
            for line in status.splitlines():
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if "exit-code" in d:
                    rc = int(d["exit-code"])
        return ExecResult(rc=rc, stdout=cap.stdout.decode("utf-8", errors="replace"),
                          stderr=cap.stderr.decode("utf-8", errors="replace"), timed_out=cap.timed_out,
                          duration_s=cap.duration_s, truncated=cap.truncated)

    def _plain_dir(self, path: str) -> bool:
        """Whether `path` (normalised, inside the sandbox) is a directory of the sandbox's writable state
        reached without any symlink, checked from the host."""
        st = self._state
        bases = [(st.workspace, st.ws)] if st.ws_separate else []
        bases += [(HOME, st.home), ("/tmp", st.tmp)]
        for inside, host in bases:
            if path == inside or path.startswith(inside + "/"):
                cur = host
                for part in [x for x in path[len(inside):].split("/") if x]:
                    cur = os.path.join(cur, part)
                    try:
                        if not stat.S_ISDIR(os.lstat(cur).st_mode):
                            return False
                    except OSError:
                        return False
                return os.path.isdir(host) and not os.path.islink(host)
        return False

    def memory_failcnt(self) -> int:
        """How often the sandbox hit its memory limit (cgroup), 0 without a cgroup."""
        return self._cg.memory_failcnt() if self._cg is not None else 0

    # -- teardown ------------------------------------------------------------------------------
    def _teardown(self):
        if self._cg is not None:
            self._cg.remove()
            self._cg = None
        self._state.remove()

    def close(self):
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._teardown()
        finally:
            cleanup.unregister(self)


def _read_all(fd: int) -> bytes:
    out = bytearray()
    os.set_blocking(fd, False)
    while True:
        try:
            b = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not b:
            break
        out += b
    return bytes(out)


class BwrapFactory(SandboxFactory):
    name = "bwrap"
    _is_factory = True

    def __init__(self, config: SandboxConfig | None = None):
        super().__init__(config)
        if not bwrap_path():
            raise SandboxError("bwrap is not installed (apt-get install bubblewrap)")
        self.rootfs = find_rootfs(self.config)
        if self.rootfs is None:
            log.info("bwrap: no built rootfs, using the host's system dirs read-only")
        self._closed = False
        cleanup.register(self)

    def open(self, files: Iterable = ()) -> BwrapSandbox:
        if self._closed:
            raise SandboxError("factory is closed")
        return self._adopt(BwrapSandbox(self.config, self.rootfs), files)

    def close(self) -> None:
        self._closed = True
        self._close_adopted()
        cleanup.unregister(self)
