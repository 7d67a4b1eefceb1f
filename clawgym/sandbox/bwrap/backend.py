"""bubblewrap backend.

Two ways to run commands, both in the same sandbox layout:

* server mode (default where the host is root and a cgroup is available): one `bwrap` per sandbox
  runs the exec server (clawgym/sandbox/guest/execd.py, bound read-only at /run/clawgym/execd.py) as pid 1
  of its pid namespace, as the sandbox user, on a listening unix socket the host made outside the
  sandbox (<state>/ctl.sock, root 0600) and handed in as an inherited fd: nothing inside can reach,
  replace or signal it (pid 1 ignores signals from its own namespace; not dumpable, so no ptrace or
  /proc/1/fd). Each exec forks a handler that forks the command (own session, env exactly as given)
  and relays framed output. Every kill is host-side: a sweep SIGKILLs every process of the sandbox's
  cgroup except bwrap and the server (after each exec, on timeout, flood, Ctrl-C). Joining the cgroup
  and starting bwrap happen once per sandbox, and the factory keeps `pool_size` sandboxes started
  ahead, so an exec costs a fork, not a bwrap start plus a cgroup join (on cgroup v1 each join waits
  for an RCU grace period, ~15-20 ms);
* per-exec mode (fallback, or `server=False`): a fresh `bwrap` per exec; when the command ends the pid
  namespace dies with it.

Common to both:

* system: the debootstrapped root (scripts/build_sandbox_image.sh, /var/lib/clawgym/rootfs, same
  environment as the docker image) bound read-only; without it the host's /usr, /etc, ... read-only
  (host /etc/shadow masked);
* writable state (HOME=/root with the workspace, /tmp) on a per-sandbox size-limited host tmpfs;
* --unshare-all (no network, new pid/ipc/uts/user namespaces), --die-with-parent, --new-session,
  uid/gid 1000; as root bwrap runs unprivileged as host uid 1000 (setpriv);
* memory + pids limits through a per-sandbox cgroup (v1 or v2), else prlimit per process;
* on timeout everything the command started is SIGKILLed; background processes never outlive an exec;
* the clean rooms (`factory.rooms()`, `keyrings=False`) run under a seccomp filter refusing add_key, request_key
  and keyctl (as docker's default profile does), so their reset needs no op inside the sandbox.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import posixpath
import select
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable

from clawgym.sandbox import guest, spawner
from clawgym.sandbox.base import ExecResult, Sandbox, SandboxConfig, SandboxError
from clawgym.sandbox.bwrap.args import (
    _supports,
    _system_args,
    available,
    bwrap_path,
    find_rootfs,
    no_keyrings_filter,
)
from clawgym.sandbox.host import cleanup, execd_client, nsipc
from clawgym.sandbox.host.cgroups import Cgroup
from clawgym.sandbox.host.execd_client import SERVICE_GID, SERVICE_UID
from clawgym.sandbox.host.fstree import empty_dir
from clawgym.sandbox.host.hostfs import CountedHostFileMixin, HostFS
from clawgym.sandbox.host.proc import flood_limit, run_capture
from clawgym.sandbox.host.statedir import (
    HOME,
    SANDBOX_GID,
    SANDBOX_PATH,
    SANDBOX_UID,
    StateDir,
    can_mount,
    sandbox_env,
)
from clawgym.sandbox.pool import PooledFactory, RecyclingPool
from clawgym.sandbox.registry import sandbox_backend

log = logging.getLogger(__name__)

EXECD = str(guest.EXECD)
EXECD_IN = "/run/clawgym/execd.py"
SERVER_START_TIMEOUT_S = 20.0
MAX_STARTING = 4  # pool starts in flight at once (a start is mostly waiting; more would only queue on the CPU)


def _spawn(argv: list[str], pass_fds: tuple[int, ...], log_path: str) -> subprocess.Popen:
    """Every server-mode bwrap is started from the process's one long-lived spawner thread: bwrap's
    --die-with-parent (PR_SET_PDEATHSIG) fires when the *thread* that forked it exits, so a sandbox opened from
    a short-lived worker thread must not be its child."""
    with open(log_path, "ab") as err:  # bwrap's and the server's own messages (host-only file)
        return spawner.spawn(lambda: subprocess.Popen(argv, pass_fds=pass_fds, cwd="/", stdin=subprocess.DEVNULL,
                                                      stdout=subprocess.DEVNULL, stderr=err,
                                                      env={"PATH": SANDBOX_PATH}))


class BwrapSandbox(CountedHostFileMixin, Sandbox):
    """A sandbox made with bubblewrap: its own namespaces, a cgroup where available and a private state dir."""

    backend = "bwrap"
    isolating = True

    def __init__(self, config: SandboxConfig, rootfs: str | None, server: bool = True, keyrings: bool = True):
        super().__init__(config)
        self.rootfs = rootfs
        # keyrings=False (the clean rooms): server mode starts the sandbox under a seccomp filter that refuses every
        # keyring call (args.no_keyrings_filter), so no process in it can ever hold a kernel key; `_no_keys` says
        # the filter is on (None where this architecture has none)
        self._seccomp = None if keyrings else no_keyrings_filter()
        self._no_keys = False
        self._closed = False
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._active = 0  # execs + host file operations in flight (server mode: sweep when the last exec ends)
        self._proc: subprocess.Popen | None = None  # server mode: the sandbox's bwrap
        self._keep: set[int] = set()  # server mode: host pids of bwrap and the server
        self._init: int | None = None  # server mode: host pid of the server (pid 1 inside)
        self._sock: str | None = None
        self._privileged = os.geteuid() == 0
        uid = SANDBOX_UID if self._privileged else None
        gid = SANDBOX_GID if self._privileged else None
        self._state = StateDir(config.workspace, config.disk_mb, uid, gid, tmpfs=can_mount(config.tmpfs),
                               root=config.state_root)
        self._shm = os.path.join(self._state.path, "shm")  # /dev/shm, on the sandbox's size-limited tmpfs
        # server mode from a factory: close() hands the sandbox back to be reset
        self._recycler: Callable[[BwrapSandbox], None] | None = None
        self._cg: Cgroup | None = None
        try:
            os.mkdir(self._shm, 0o1777)
            self._state._own(self._shm)
            os.chmod(self._shm, 0o1777)
            if config.cgroups:
                self._cg = Cgroup.create(self._state.name, config.memory_mb, config.pids, config.cpus)
            # host access: workspace + /tmp only
            roots = {self._state.workspace: self._state.ws, "/tmp": self._state.tmp}
            self.fs = HostFS(config.workspace, roots, uid, gid, max_read=max(1, int(config.disk_mb)) << 20)
            self._argv_static = self._build_static()
            if server and self._cg is not None and self._privileged:
                self._start_server()
        except BaseException:
            self._teardown()
            raise
        cleanup.register(self)

    @property
    def server_mode(self) -> bool:
        return self._proc is not None

    # -- server mode ---------------------------------------------------------------------------
    def _start_server(self) -> None:
        """Start this sandbox's bwrap with the exec server as pid 1; on failure log and stay per-exec."""
        sock_path = os.path.join(self._state.path, "ctl.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        r, w = os.pipe()
        seccomp: list[int] = []  # the read end of a pipe holding the seccomp program, which bwrap reads to its end
        try:
            if self._seccomp is not None:
                sr, sw = os.pipe()
                seccomp.append(sr)
                try:
                    os.write(sw, self._seccomp)  # a few hundred bytes: far below a pipe's buffer
                finally:
                    os.close(sw)
            srv.bind(sock_path)
            os.chmod(sock_path, 0o600)
            srv.listen(128)
            fd = srv.fileno()
            argv = self._prefix() + self._argv_static[:1] + ["--json-status-fd", str(w), "--as-pid-1"] + \
                self._argv_static[1:-2] + ["--ro-bind", EXECD, EXECD_IN] + self._argv_static[-2:] + \
                [a for sr in seccomp for a in ("--seccomp", str(sr))] + \
                ["--chdir", "/", "--", "python3", "-I", "-S", EXECD_IN, "--fd", str(fd)]
            self._proc = _spawn(argv, (fd, w, *seccomp), os.path.join(self._state.path, "server.log"))
        except BaseException:
            os.close(w)
            os.close(r)
            srv.close()
            raise
        finally:
            for sr in seccomp:
                os.close(sr)
        os.close(w)
        srv.close()  # the server holds it now
        try:
            child = _child_pid(r, self._proc, SERVER_START_TIMEOUT_S)
            rc, err = execd_client.short_request(sock_path, {"op": "ping"}, timeout=SERVER_START_TIMEOUT_S)
            if rc != 0 or child is None:
                raise SandboxError(f"exec server did not answer (rc={rc}): {err.decode(errors='replace')[:500]}")
        except (OSError, SandboxError) as e:
            self._stop_server()
            try:
                with open(os.path.join(self._state.path, "server.log"), "rb") as f:
                    msg = f.read(2000).decode(errors="replace").strip()
            except OSError:
                msg = ""
            log.warning("bwrap server mode unavailable, running a bwrap per exec: %s %s", e, msg)
            return
        finally:
            os.close(r)
        self._keep = {self._proc.pid, child}
        self._init = child
        self._sock = sock_path
        self._no_keys = bool(seccomp)
        # the agent's memory use must never kill the sandbox itself: bwrap and the server are never picked
        # by the OOM killer where the host may lower them (CAP_SYS_RESOURCE), and commands always outrank
        # them (execd.py starts each at oom_score_adj 500); SysV shared memory cannot outlive the processes
        # that use it (so killing them frees the cgroup); quiesce() frees the rest from the host
        for pid in self._keep:
            nsipc.set_oom_score_adj(pid, -1000)
        if self.config.shm_rmid_forced:
            nsipc.force_shm_rmid(child)

    def _stop_server(self) -> None:
        p, self._proc = self._proc, None
        self._sock = None
        if p is None:
            return
        if self._cg is not None:
            self._cg.kill_all()
        try:
            p.kill()
        except OSError:
            pass
        try:
            p.wait(timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            pass

    def _sweep(self) -> bool:
        """SIGKILL every process of the sandbox except bwrap and the server, until none is left."""
        cg = self._cg
        return cg is not None and cg.kill_all(keep=self._keep)

    def _sweep_if_alone(self) -> None:
        self._sweep_alone(self._sweep)

    def _server_alive(self) -> bool:
        p = self._proc
        return p is not None and p.poll() is None

    @contextlib.contextmanager
    def _counted_exec(self):
        """The span of one exec: counted (`_enter` raises on a closed handle; a reset waits for it), and when the
        sandbox's last exec ends, nothing an exec started outlives it; SandboxError when the sandbox was closed
        while it ran."""
        self._enter()
        try:
            yield
        finally:
            self._leave_swept(self._sweep)
        if self._closed:
            raise SandboxError("sandbox was closed while a command ran")

    def _server_sock(self) -> str:
        """The server's socket path; a SandboxError once the server was stopped (a close racing a command)."""
        sock = self._sock
        if sock is None:
            raise SandboxError("sandbox was closed while a command ran")
        return sock

    def _cgroup_kill(self, _proc: subprocess.Popen) -> None:
        """run_capture's on_timeout: every process of the sandbox's cgroup killed."""
        if self._cg is not None:
            self._cg.kill_all()

    def _exec_server(self, argv, chdir, env, stdin, timeout, max_output) -> ExecResult:
        t0 = time.monotonic()
        deadline = t0 + timeout
        flood = flood_limit(max_output)
        req = execd_client.encode({"op": "exec", "argv": argv, "env": self._env(env), "cwd": chdir,
                                   "stdin": stdin is not None, "uid": SANDBOX_UID, "gid": SANDBOX_GID})
        with self._counted_exec():
            for attempt in (1, 2, 3):
                if time.monotonic() >= deadline:  # its time went waiting (a sweep, a retry): never start it late
                    return ExecResult(rc=124, stdout="", stderr="", timed_out=True,
                                      duration_s=time.monotonic() - t0, truncated=False)
                try:
                    sock = execd_client.connect(self._server_sock(), timeout=5.0)
                    sock.sendall(req)
                except OSError as e:
                    if self._closed:
                        raise SandboxError("sandbox was closed while a command ran") from e
                    raise SandboxError(f"bwrap sandbox's exec server is gone: {e}") from e
                try:
                    r = execd_client.pump(sock, stdin, deadline, max_output, flood, self._sweep_if_alone)
                except BaseException:  # Ctrl-C / error while the command runs: kill what it started
                    self._sweep()
                    raise
                if r.not_started is None or r.timed_out or self._closed:
                    break  # started, or silence: a command that may have run is never run again
                # the server made no process for it (the pids limit): clear the sandbox and retry;
                # nothing ran, so a retry cannot repeat a side effect
                if attempt == 3 or not self._server_alive():
                    raise SandboxError(f"exec failed: {r.not_started}")
                self._sweep_if_alone()
                time.sleep(0.05 * attempt)
        timed_out, rc = r.timed_out, r.rc
        if r.flooded:
            rc = 137
        elif timed_out:
            rc = 124
        elif rc is None:
            if not self._server_alive():
                raise SandboxError("bwrap sandbox died while a command ran")
            if r.error is not None:
                raise SandboxError(f"exec failed: {r.error}")
            rc = 137  # its handler was killed from inside (e.g. `kill -9 -1`): the command was killed
        return ExecResult(rc=rc, stdout=r.out.decode("utf-8", errors="replace"),
                          stderr=r.err.decode("utf-8", errors="replace"), timed_out=timed_out,
                          duration_s=time.monotonic() - t0, truncated=r.truncated)

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
        # /dev read-only (bwrap makes it writable by the sandbox user) with /dev/shm from the sandbox's state
        # and its own /dev/mqueue: nothing there outlives a reset
        a += ["--proc", "/proc", "--dev", "/dev", "--bind", self._shm, "/dev/shm", "--mqueue", "/dev/mqueue",
              "--remount-ro", "/dev", "--dir", "/run", "--dir", "/home"]
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
        return sandbox_env(self.config, env)

    def exec(self, cmd, timeout=None, workdir=None, env=None, stdin=None, max_output=1_000_000) -> ExecResult:
        if self._closed:
            raise SandboxError("sandbox is closed")
        argv = ["bash", "-lc", cmd] if isinstance(cmd, str) else [str(x) for x in cmd]
        if not argv:
            raise ValueError("empty command")
        chdir = self.config.workspace
        if workdir:
            wd = posixpath.normpath(workdir if workdir.startswith("/")
                                    else posixpath.join(self.config.workspace, workdir))
            if self._plain_dir(wd):
                chdir = wd  # bwrap's --chdir: no extra shell in the way
            else:  # missing, or a symlink somewhere: let a shell inside resolve it (rc 126 if it fails)
                argv = ["/bin/sh", "-c", 'cd -- "$1" || exit 126; shift; exec "$@"', "sh", wd] + argv
        timeout = float(timeout if timeout is not None else self.config.default_timeout_s)
        if self._proc is not None:
            return self._exec_server(argv, chdir, env, stdin, timeout, max_output)
        r, w = os.pipe()
        try:
            full = self._prefix() + self._argv_static[:1] + ["--json-status-fd", str(w)] + \
                self._argv_static[1:] + ["--chdir", chdir, "--"] + self._inner_prefix() + argv
            on_timeout = self._cgroup_kill if self._cg is not None else None
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

    # -- harness services: another uid than the sandbox user's ---------------------------------------
    def service_uid(self) -> int | None:
        """The host uid (what SO_PEERCRED reports) of processes of :meth:`service_exec`; None where the
        sandbox cannot run them (per-exec mode: no long-lived namespaces to enter, or no root)."""
        return SERVICE_UID if self._proc is not None and self._init is not None and self._privileged else None

    def service_exec(self, argv, timeout=None, env=None, stdin=None, max_output=1_000_000) -> ExecResult:
        """Run `argv` (a list) in the sandbox's network and mount namespaces as host uid SERVICE_UID (not the
        sandbox user, not root, no capabilities; nsenter from the host: outside the sandbox's pid and user
        namespaces and its cgroup, so nothing inside can see, signal or ptrace it), cwd /, for the harness's own
        in-sandbox components (the agent's tools only ever call exec()). Server mode only: SandboxError
        otherwise. Counted as an exec; on timeout it is killed (rc 124)."""
        if self._closed:
            raise SandboxError("sandbox is closed")
        argv = [str(x) for x in argv]
        if not argv:
            raise ValueError("empty command")
        init = self._init
        if self.service_uid() is None or init is None:
            raise SandboxError("service execs need a server-mode bwrap sandbox (root + cgroups)")
        timeout = float(timeout if timeout is not None else self.config.default_timeout_s)
        full = ["nsenter", f"--target={init}", "--net", "--mount", f"--setuid={SERVICE_UID}",
                f"--setgid={SERVICE_GID}", "--"] + argv
        with self._counted_exec():
            cap = run_capture(full, env=self._env(env), cwd="/", timeout=timeout, stdin=stdin, max_output=max_output)
        return ExecResult(rc=124 if cap.timed_out else cap.rc, stdout=cap.stdout.decode("utf-8", errors="replace"),
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

    # -- recycling (server mode) ----------------------------------------------------------------
    def _handoff(self) -> BwrapSandbox:
        """A new handle on this sandbox's bwrap, server, cgroup and state, for the factory to reset and
        hand out again; this handle is closed."""
        new = object.__new__(BwrapSandbox)
        new.__dict__.update(self.__dict__)
        new._closed, new._active, new._lock, new._sweeping = False, 0, threading.Lock(), False
        new._idle = threading.Condition(new._lock)
        return new

    def quiesce(self) -> None:
        """Sandbox.quiesce. Server mode: `_quiesce`. Per-exec mode: a command's processes, SysV IPC, message
        queues and keyrings die with its bwrap (pid, ipc and user namespaces of its own), so what is left is
        the cgroup (execs still running in other threads) and /dev/shm (host dir), both cleared from the
        host; without a cgroup (non-root host) an exec running in another thread is not stopped."""
        self._enter()
        try:
            if self._proc is not None:
                self._sweep()  # the agent's commands die; execs running in other threads return now
                self.wait_alone(10.0)  # ... and finish their own end-of-exec sweeps before the reset below
                self._quiesce()
                return
            if self._cg is not None and not self._cg.kill_all():
                raise SandboxError("processes could not be swept")
            try:
                empty_dir(self._shm)
            except OSError as e:
                raise SandboxError(f"/dev/shm could not be emptied: {e}") from e
        finally:
            self._leave()

    def lock_workspace_path(self) -> None:
        """Sandbox.lock_workspace_path, on the sandbox's state dir."""
        self._enter()
        try:
            self._state.lock_workspace_path(*self._seal_owner())
        finally:
            self._leave()

    def scrub(self) -> list[list[str]]:
        """Sandbox.scrub, from the host on the sandbox's state dir (OSError -> SandboxError is not raised here:
        an unremovable entry or a replaced workspace path is the agent's doing and propagates as OSError)."""
        self._enter()
        try:
            return self._state.scrub()
        finally:
            self._leave()

    def _quiesce(self) -> None:
        """Server mode: 1. no process but bwrap and the server (host-side sweep of the cgroup);
        2. from the host, charging nothing to the sandbox (its memory may be full of shared memory): every
        SysV IPC object and POSIX message queue of its IPC namespace removed (nsipc), /dev/shm emptied, each
        checked empty;
        3. as the sandbox user, inside: user keyrings cleared, and checked that no IPC object is left -- skipped in
        a sandbox under the no-keyrings filter (the clean rooms) when step 2 cleared and checked everything: the
        op clears nothing else than step 2 does, and no process of such a sandbox could ever add a key (the kernel
        refuses every keyring call), so it would fork a handler inside (most of a room's reset) to clear nothing;
        4. swept again. Files of HOME, the workspace and /tmp are not touched. Raises SandboxError."""
        if not self._server_alive() or not self._sweep():
            raise SandboxError("processes could not be swept")
        ok, why = nsipc.clear_ipc(self._init) if self._init is not None else (False, "no server pid")
        if not ok:
            log.info("host-side IPC cleanup of %s: %s (the server's reset op follows)", self._state.name, why)
        try:
            empty_dir(self._shm)
            left = os.listdir(self._shm)
        except OSError as e:
            raise SandboxError(f"/dev/shm could not be emptied: {e}") from e
        if left:
            raise SandboxError(f"/dev/shm not empty after the reset: {left[:5]}")
        if not (ok and self._no_keys):
            rc, msg = execd_client.reset_until_ok(self._server_sock(), {"op": "reset", "uid": SANDBOX_UID,
                                                               "gid": SANDBOX_GID}, self._sweep)
            if rc != 0:
                raise SandboxError(f"ipc reset rc={rc}: {msg[:200]!r}")
        if not self._server_alive() or not self._sweep():
            raise SandboxError("processes could not be swept")

    def _reset(self) -> None:
        """Bring a used server-mode sandbox back to the state of a fresh one (raises SandboxError):
        1.-4. `_quiesce` (no process but bwrap and the server; SysV IPC objects, message queues, /dev/shm
        and user keyrings cleared); 5. from the host, never following symlinks: HOME (with the workspace),
        /tmp and /dev/shm emptied, owners and modes restored.
        Nothing else is writable inside (root and /dev read-only, /proc/sys not writable without
        capabilities); the user, pid, net, ipc, uts and mount namespaces stay, empty."""
        self._quiesce()
        try:
            self._state.reset(extra=((self._shm, 0o1777),))
        except OSError as e:
            raise SandboxError(f"state reset: {e}") from e

    # -- teardown ------------------------------------------------------------------------------
    def _teardown(self):
        self._stop_server()
        if self._cg is not None:
            self._cg.remove()
            self._cg = None
        self._state.remove()

    def _close(self):
        recycler = self._recycler
        if recycler is not None and self._proc is not None:
            recycler(self)  # reset in the background and reused (the factory tears it down otherwise)
        else:
            self._teardown()


def _child_pid(fd: int, proc: subprocess.Popen, timeout: float) -> int | None:
    """The sandbox's pid 1 (host pid) from bwrap's --json-status-fd; None if bwrap exits first."""
    buf = bytearray()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r, _, _ = select.select([fd], [], [], max(0.0, min(0.5, end - time.monotonic())))
        if r:
            b = os.read(fd, 4096)
            if not b:
                return None
            buf += b
            for line in bytes(buf).splitlines():
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if "child-pid" in d:
                    return int(d["child-pid"])
        elif proc.poll() is not None:
            return None
    return None


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


@sandbox_backend("bwrap", auto=20)
class BwrapFactory(PooledFactory):
    """Opens bwrap sandboxes. In server mode (root + cgroups; `server=False` or config.bwrap_server=False
    turns it off) a clawgym.sandbox.pool.RecyclingPool keeps sandboxes started ahead (bwrap + exec server up,
    workspace empty): one at first, doubling up to `pool_size` each time open() finds none ready (warm()
    fills it at once), never more than `pool_size` in all with those handed out. open() takes one and writes
    the task's files, or starts one itself when none is on its way. With `recycle` (default), close() returns
    at once and the pool's reaper resets the sandbox (BwrapSandbox._reset: processes, IPC, keyrings, HOME,
    /tmp, /dev/shm) and puts it back (at most `max_idle` kept, `max_uses` uses each); a sandbox whose reset
    fails is torn down. `recycle=False`: every open() gets a fresh one. `keyrings=False` (the factory's
    rooms(), the clean rooms): server-mode sandboxes start under a seccomp filter that refuses every keyring
    call, and their reset runs from the host alone (see BwrapSandbox._quiesce). factory.close() waits for the
    pool: no process, mount, cgroup or temp dir outlives it."""

    def __init__(self, config: SandboxConfig | None = None, pool_size: int = 4, server: bool = True, *,
                 recycle: bool = True, max_idle: int | None = None, max_uses: int = 200, close_wait_s: float = 10.0,
                 keyrings: bool = True):
        super().__init__(config)
        self._init_kwargs = {"pool_size": pool_size, "server": server, "recycle": recycle, "max_idle": max_idle,
                             "max_uses": max_uses, "close_wait_s": close_wait_s, "keyrings": keyrings}
        self.keyrings = bool(keyrings)
        if not bwrap_path():
            raise SandboxError("bwrap is not installed (apt-get install bubblewrap)")
        self.rootfs = find_rootfs(self.config)
        if self.rootfs is None:
            log.info("bwrap: no built rootfs, using the host's system dirs read-only")
        self.server = bool(server) and self.config.bwrap_server
        self.recycle = bool(recycle) and self.server
        self.pool = RecyclingPool(
            "bwrap", create=self._new, reset=_reset_pooled, destroy=_destroy_pooled, sweep=lambda sb: sb._sweep(),
            describe=lambda sb: (sb._state.name, sb._state.path), poolable=lambda sb: sb.server_mode,
            pool_size=pool_size if self.server else 0, max_idle=max_idle, max_uses=max_uses,
            max_starting=MAX_STARTING, close_wait_s=close_wait_s, grow=True)
        cleanup.register(self)

    @classmethod
    def available(cls, config: SandboxConfig) -> tuple[bool, str]:
        return available()

    def _make_rooms(self) -> BwrapFactory:
        """The clean rooms' factory: the same settings, its sandboxes under the no-keyrings seccomp filter. Nothing a
        verification runs (bash, python3, git, pytest, node) uses kernel keys, and without them a room's reset is
        done from the host alone (BwrapSandbox._quiesce), as docker's is."""
        return type(self)(self.config, **{**self._init_kwargs, "keyrings": False})

    def _new(self) -> BwrapSandbox:
        sb = BwrapSandbox(self.config, self.rootfs, server=self.server, keyrings=self.keyrings)
        if self.recycle and sb.server_mode:
            sb._recycler = self._recycle
        return sb

    def _handle(self, sb: BwrapSandbox) -> BwrapSandbox:
        if sb._recycler is None:  # torn down at close, never handed back (recycle=False, per-exec mode)
            self.pool.untrack()
        return sb  # a pooled sandbox is a fresh handle already (BwrapSandbox._handoff)

    def _recycle(self, old: BwrapSandbox) -> None:
        """old.close() of a server-mode sandbox: a new handle on the same bwrap goes to the pool's reaper."""
        new = old._handoff()
        cleanup.register(new)  # tracked until reused or torn down
        self.pool.give_back(new, old)


def _reset_pooled(sb: BwrapSandbox) -> str | None:
    try:
        sb._reset()
    except SandboxError as e:
        return str(e)
    return None


def _destroy_pooled(sb: BwrapSandbox) -> None:
    sb._recycler = None
    sb.close()  # tears it down and unregisters it
