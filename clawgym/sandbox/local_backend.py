"""local backend: a temp dir on the host, NO isolation. Explicit opt-in only (get_factory("local")),
for debugging and for machines with neither docker nor bwrap; it logs a warning.

The workspace is NOT at /root/.openclaw/workspace: commands run with cwd = a host temp dir
(`sandbox.workspace`), and the env vars WORKSPACE and HOME point at it / its parent. Paths given to
read/write/list under the configured workspace path (config.workspace) are mapped onto the temp dir.
Timeouts still kill what the command started (marked by an env var, setsid children included) and
processes do not outlive their exec; output is still capped.
"""

from __future__ import annotations

import itertools
import logging
import os
import posixpath
import signal
import threading
import time
from collections.abc import Iterable

from clawgym.sandbox.base import ExecResult, Sandbox, SandboxConfig, SandboxError, SandboxFactory
from clawgym.sandbox.host import cleanup
from clawgym.sandbox.host.hostfs import HostFileMixin, HostFS
from clawgym.sandbox.host.proc import run_capture
from clawgym.sandbox.host.statedir import StateDir
from clawgym.sandbox.registry import sandbox_backend

log = logging.getLogger(__name__)


MARK = "CLAWGYM_SANDBOX_EXEC"


def kill_marked(token: str, timeout: float = 5.0, prefix: bool = False) -> None:
    """SIGKILL every process whose environment carries MARK=token (MARK=token* with prefix; best
    effort: a process that rewrites its environment escapes; local is not an isolating backend)."""
    needle = f"{MARK}={token}".encode()
    end = time.monotonic() + timeout
    me = os.getpid()
    while True:
        found = []
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == me:
                continue
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                    if any(v.startswith(needle) for v in env) if prefix else needle in env:
                        found.append(int(d))
            except OSError:
                continue
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not found or time.monotonic() > end:
            return
        time.sleep(0.01)


class LocalSandbox(HostFileMixin, Sandbox):
    """A "sandbox" that runs commands directly on the host in a temp workspace (no isolation)."""

    backend = "local"
    _seal_pin = False

    def __init__(self, config: SandboxConfig):
        super().__init__(config)
        self._state = StateDir("/root/.openclaw/workspace", config.disk_mb, None, None, tmpfs=False,
                               root=config.state_root)
        self._ws = self._state.ws
        roots = {self._ws: self._ws, config.workspace: self._ws, "/tmp": self._state.tmp}  # /tmp = $TMPDIR
        self.fs = HostFS(self._ws, roots, max_read=max(1, int(config.disk_mb)) << 20)
        self._closed = False
        self._lock = threading.Lock()
        self._counter = itertools.count()
        cleanup.register(self)

    @property
    def workspace(self) -> str:  # the real (host) path: differs from config.workspace
        return self._ws

    host_workspace = workspace

    def exec(self, cmd, timeout=None, workdir=None, env=None, stdin=None, max_output=1_000_000) -> ExecResult:
        self._check()
        argv = ["bash", "-lc", cmd] if isinstance(cmd, str) else [str(x) for x in cmd]
        if workdir:
            wd = workdir
            if wd == self.config.workspace or wd.startswith(self.config.workspace.rstrip("/") + "/"):
                wd = self._ws + wd[len(self.config.workspace.rstrip("/")):]
            elif not wd.startswith("/"):
                wd = posixpath.join(self._ws, wd)
            argv = ["/bin/sh", "-c", 'cd -- "$1" || exit 126; shift; exec "$@"', "sh", wd] + argv
        # this read stays: the local backend runs commands in the host's own environment by design (no isolation),
        # so this process's environment passes through to them, plus HOME / WORKSPACE / TMPDIR and config.env
        e = dict(os.environ)
        e.update({"HOME": self._state.home, "WORKSPACE": self._ws, "TMPDIR": self._state.tmp})
        e.update(self.config.env)
        if env:
            e.update(env)
        token = f"{self._state.name}-{next(self._counter)}"
        e[MARK] = token
        try:
            cap = run_capture(argv, env=e, cwd=self._ws,
                              timeout=float(timeout if timeout is not None else self.config.default_timeout_s),
                              stdin=stdin, max_output=max_output, on_timeout=lambda _p: kill_marked(token))
        finally:
            kill_marked(token)  # like bwrap: nothing an exec started outlives it (setsid included)
        if self._closed:
            raise SandboxError("sandbox was closed while a command ran")
        return ExecResult(rc=cap.rc, stdout=cap.stdout.decode("utf-8", errors="replace"),
                          stderr=cap.stderr.decode("utf-8", errors="replace"), timed_out=cap.timed_out,
                          duration_s=cap.duration_s, truncated=cap.truncated)

    def quiesce(self) -> None:
        """Sandbox.quiesce, best effort (no isolation): SIGKILL every process an exec of this sandbox started
        that still carries its marker in the environment (execs still running included). IPC objects,
        /dev/shm and keyrings are the host's own here and are not touched."""
        self._check()
        kill_marked(self._state.name + "-", prefix=True)

    def _seal_owner(self) -> tuple[int, int]:
        return os.geteuid(), os.getegid()  # no other uid to give it to: chmod only, no protection

    def _close(self):
        kill_marked(self._state.name + "-", prefix=True)  # commands still running
        self._state.remove()


@sandbox_backend("local")  # never chosen by "auto": only by name
class LocalFactory(SandboxFactory):
    """Factory of LocalSandbox: only chosen by name, never by "auto"."""

    def __init__(self, config: SandboxConfig | None = None):
        super().__init__(config)
        log.warning("clawgym sandbox backend 'local': commands run on the host WITHOUT isolation "
                    "(no network/memory/pids limits; workspace is a temp dir, see $WORKSPACE)")
        self._closed = False
        cleanup.register(self)

    def open(self, files: Iterable = ()) -> LocalSandbox:
        if self._closed:
            raise SandboxError("factory is closed")
        return self._adopt(LocalSandbox(self.config), files)

    def close(self) -> None:
        self._closed = True
        self._close_rooms()
        self._close_adopted()
        cleanup.unregister(self)
