"""Docker backend (docker SDK).

Each sandbox is one container of `clawgym-sandbox:latest` (scripts/build_sandbox_image.sh builds it
offline; clawgym/sandbox/Dockerfile is the online way): --network none, read-only root,
no-new-privileges, cap_drop ALL + cap_add SETUID/SETGID, memory (no swap), pids and CPU limits,
labelled clawgym.sandbox=1. Its pid 1 is docker-init; its only child is the exec server
(clawgym/sandbox/execd.py, bind-mounted read-only at /opt/clawgym/execd.py) running as uid 0 and
listening on a unix socket in a per-sandbox control dir (<state>/ctl on the host, root 0700,
mounted at /run/clawgym), which the sandbox user (uid 1000) cannot enter. The writable state
(HOME=/root with the workspace, /tmp) is a size-limited host tmpfs bind-mounted in, so file access
from the host needs no docker call and never follows symlinks.

exec (fast path): connect to the server, which forks a handler that forks the command as
1000:1000 (no groups, own session, env exactly as given) and relays framed stdout/stderr and the
exit status. Deadline, output cap and flood limit are enforced host-side; every kill is host-side:
a sweep SIGKILLs every process of the container's cgroup except docker-init and the server (after
each exec, on timeout -> rc 124, on flood -> rc 137, on Ctrl-C/close). Where that is impossible
(host not root, cgroup not found, socket missing, or `use_execd=False`) exec falls back to
`docker exec` through the raw API socket, as before; a timeout there that cannot sweep SIGKILLs the
container and starts it again on the same state.

Recycling: close() returns at once; a reaper thread resets the container and puts it back into its
factory's idle pool (capped at `max_idle`, only this factory, i.e. the same config, reuses it).
Isolation argument - what is writable in a container, and how a reset restores it:
  * processes: the sweep kills everything in the container's cgroup except docker-init and the
    server (the sandbox user cannot signal or ptrace either: other uid, no capabilities, the server
    is not dumpable), repeated until cgroup.procs holds only those two;
  * HOME (/root, incl. the workspace) and /tmp: host tmpfs dirs; their contents are removed from the
    host with an fd-based walk that never follows symlinks, modes/owners are restored, the
    workspace path is created again (the same state as a fresh container) and checked empty;
  * /dev/shm, /dev/mqueue and SysV IPC (the container's own ipc namespace): first from the host
    (nsipc: a helper joins the container's ipc namespace and removes every object and message queue;
    /dev/shm emptied through /proc/<init>/root), which charges nothing to the container's memory (it
    may be full of shared memory), then a forked child of the server running as uid 1000 removes
    every SysV shm/sem/msg object and empties both dirs, then checks nothing is left (a non-empty
    result fails the reset);
  * nothing else is writable by uid 1000 (checked with `find / -writable`: besides HOME and /tmp
    only /dev/shm, /dev/mqueue and stateless device nodes such as /dev/null; the root is read-only,
    /dev, /run/clawgym, /proc/sys and the docker-managed /etc files are root-owned or read-only).
    No network-namespace state (sockets, abstract sockets) outlives the processes that hold it;
    kernel keyrings are out of reach (docker's default seccomp profile blocks keyctl/add_key).
    The server itself keeps no per-sandbox state: each command runs in a fresh forked handler.
The same steps minus the file reset are `DockerSandbox.quiesce()` (between the agent and the verifier).
docker-init and the exec server run with oom_score_adj -1000 where the host may set it (CAP_SYS_RESOURCE),
commands with 500 (always picked first), and kernel.shm_rmid_forced=1 (see bwrap_backend).
A container whose reset fails, that had to be restarted after a timeout, whose processes cannot
be swept from the host, that was used `max_uses` times, or whose sandbox still had a command
running `close_wait_s` after close is destroyed, not reused. factory.close() waits for the reaper,
so no container, mount or temp dir outlives it.
"""

from __future__ import annotations

import logging
import os
import posixpath
import signal
import socket
import struct
import threading
import time
import weakref
from typing import Iterable

from clawgym.sandbox import cleanup, execd_client, nsipc
from clawgym.sandbox.base import ExecResult, Sandbox, SandboxConfig, SandboxError, SandboxFactory
from clawgym.sandbox.hostfs import (HOME, SANDBOX_GID, SANDBOX_UID, CountedHostFileMixin, HostFS, StateDir,
                                    cap_append, empty_dir, flood_limit)

log = logging.getLogger(__name__)

SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def docker_client(timeout: int = 60):
    """A docker SDK client for the engine (DOCKER_HOST or the default socket); raises SandboxError."""
    try:
        import docker
    except ImportError as e:  # pragma: no cover
        raise SandboxError("the docker package is not installed (pip install docker)") from e
    try:
        c = docker.from_env(timeout=timeout)
        c.ping()
        return c
    except Exception as e:
        raise SandboxError(f"no Docker engine answers ({e}); start one with scripts/start_dockerd.sh") from e


def available(image: str = "clawgym-sandbox:latest") -> tuple[bool, str]:
    """(True, "") when an engine answers and has `image`."""
    try:
        c = docker_client(timeout=5)
    except SandboxError as e:
        return False, str(e)
    try:
        c.images.get(image)
    except Exception:
        return False, f"docker image {image} is missing (run scripts/build_sandbox_image.sh)"
    finally:
        c.close()
    return True, ""


EXECD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "execd.py")
EXECD_IN = "/opt/clawgym/execd.py"
CTL_IN = "/run/clawgym"


class _Slot:
    """A started container + its host state dir (and control dir), not handed out."""

    def __init__(self, container_id: str, state: StateDir, ctl: str | None = None):
        self.id = container_id
        self.state = state
        self.ctl = ctl  # host dir of the server's socket
        self.keep: set[int] = set()  # host pids of docker-init and its one child (the exec server)
        self.init: int | None = None  # host pid of docker-init
        self.procs_file: str | None = None  # host path of the container's cgroup.procs
        self.uses = 0
        self.suspect = False  # restarted / reset failed: destroy instead of reuse
        self.base_env: dict[str, str] = {}
        self.shm_rmid_forced = True  # set kernel.shm_rmid_forced in the container's IPC namespace (locate())

    @property
    def sock(self) -> str | None:
        return os.path.join(self.ctl, "ctl.sock") if self.ctl else None

    def fast(self) -> bool:
        """The exec server can be used: the host can sweep and the socket exists."""
        return (self.procs_file is not None and os.geteuid() == 0 and self.sock is not None
                and os.path.exists(self.sock))

    def connect(self, timeout: float = 5.0) -> socket.socket:
        return execd_client.connect(self.sock, timeout)

    def wait_server(self, timeout: float = 10.0) -> bool:
        if not self.sock:
            return False
        end = time.monotonic() + timeout
        while not os.path.exists(self.sock):
            if time.monotonic() > end:
                return False
            time.sleep(0.005)
        return True

    def locate(self, api, timeout: float = 5.0) -> None:
        """Find (from the host) the container's cgroup and its init + server pids, so leftover
        processes can be killed without a docker call. Leaves procs_file None where the host's
        /proc or cgroups are not readable (then timeouts restart the container instead)."""
        self.procs_file, self.keep, self.init = None, set(), None
        try:
            info = api.inspect_container(self.id)
            # what `docker exec` puts under an exec's own environment: the container's + HOSTNAME
            base = {"HOSTNAME": (info.get("Config") or {}).get("Hostname") or ""}
            for kv in (info.get("Config") or {}).get("Env") or []:
                k, _, v = kv.partition("=")
                base[k] = v
            self.base_env = base
            init = int(info["State"]["Pid"])
            with open(f"/proc/{init}/cgroup") as f:
                lines = [ln.rstrip("\n").split(":", 2) for ln in f]
            path = None
            for _, ctrls, p in lines:
                if "pids" in ctrls.split(","):
                    path = os.path.join("/sys/fs/cgroup/pids", p.lstrip("/"), "cgroup.procs")
            if path is None:
                for hid, _, p in lines:
                    if hid == "0":
                        path = os.path.join("/sys/fs/cgroup", p.lstrip("/"), "cgroup.procs")
            end = time.monotonic() + timeout
            children: list[int] = []
            while time.monotonic() < end:
                with open(f"/proc/{init}/task/{init}/children") as f:
                    children = [int(x) for x in f.read().split()]
                if children:
                    break
                time.sleep(0.005)
            self.init = init
            if path and os.access(path, os.R_OK) and len(children) == 1:
                self.keep = {init, children[0]}
                self.procs_file = path
                # as in bwrap: the OOM killer picks commands (execd.py starts them at 500), never the server
                # where the host may lower it; SysV shm cannot outlive its processes
                for pid in self.keep:
                    nsipc.set_oom_score_adj(pid, -1000)
                if os.geteuid() == 0 and self.shm_rmid_forced:
                    nsipc.force_shm_rmid(init)
        except (OSError, ValueError, KeyError) as e:
            log.debug("cannot locate container %s processes from the host: %s", self.id[:12], e)

    def extra_pids(self) -> list[int]:
        with open(self.procs_file) as f:
            return [p for p in (int(x) for x in f.read().split()) if p not in self.keep]

    def sweep(self, timeout: float = 5.0) -> bool:
        """SIGKILL every container process except init + server, until none is left."""
        if self.procs_file is None or os.geteuid() != 0:
            return False
        end = time.monotonic() + timeout
        try:
            while True:
                pids = self.extra_pids()
                if not pids:
                    return True
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                if time.monotonic() > end:
                    return False
                time.sleep(0.002)
        except OSError:
            return False

    def request(self, req: dict, timeout: float = 10.0) -> tuple[int | None, bytes]:
        """A short request to the server (reset, ping): -> (rc or None, stderr)."""
        return execd_client.short_request(self.sock, req, timeout)

    def clear_host_side(self) -> str | None:
        """From the host (root), charging nothing to the container: every SysV IPC object and POSIX message
        queue of its IPC namespace removed, /dev/shm emptied (through /proc/<init>/root; the container's /dev
        is root-owned). -> None, or why it could not be done (the server's reset op still follows)."""
        if self.init is None or os.geteuid() != 0:
            return "no host access"
        ok, why = nsipc.clear_ipc(self.init)
        try:
            empty_dir(f"/proc/{self.init}/root/dev/shm")
        except OSError as e:
            why = f"{why}; /dev/shm: {e}" if why else f"/dev/shm: {e}"
            ok = False
        return None if ok else why

    def quiesce(self) -> str | None:
        """Fast path (server + host sweep): processes swept, IPC / /dev/shm / /dev/mqueue cleared from the
        host, then the server's reset op as the sandbox user, swept again. -> None or what failed."""
        if not self.sweep():
            return "processes could not be swept"
        why = self.clear_host_side()
        if why:
            log.info("host-side IPC cleanup of %s: %s", self.id[:12], why)
        rc, msg = self.request({"op": "reset", "uid": SANDBOX_UID, "gid": SANDBOX_GID}, timeout=10.0)
        if rc != 0:
            return f"ipc reset rc={rc}: {msg[:200]!r}"
        if not self.sweep():
            return "processes could not be swept"
        return None


class DockerSandbox(CountedHostFileMixin, Sandbox):
    backend = "docker"

    def __init__(self, config: SandboxConfig, factory: "DockerFactory", slot: _Slot):
        super().__init__(config)
        self._factory = factory
        self._api = factory.client.api
        self._slot = slot
        self.container_id = slot.id
        st = slot.state
        roots = {st.workspace: st.ws, "/tmp": st.tmp}  # host access: workspace + /tmp only
        self.fs = HostFS(config.workspace, roots, SANDBOX_UID, SANDBOX_GID, max_read=max(1, int(config.disk_mb)) << 20)
        self._closed = False
        self._lock = threading.Lock()
        self._restart_lock = threading.Lock()
        self._active = 0  # execs and host file operations in flight
        self._idle = threading.Condition(self._lock)
        # kill what an exec left running (background jobs, fork bombs) when it ends, like bwrap
        self.kill_background = True
        self.use_execd = factory.use_execd
        cleanup.register(self)

    @property
    def host_workspace(self) -> str:
        return self._slot.state.ws

    # host file operations count as activity (HostFileMixin calls _enter/_leave), so a recycled container
    # never sees a late write

    def _envd(self, env) -> dict[str, str]:
        e = {"PATH": SANDBOX_PATH, "HOME": HOME, "USER": "sandbox", "LOGNAME": "sandbox",
             "LANG": "C.UTF-8", "TMPDIR": "/tmp", "WORKSPACE": self.config.workspace, "TERM": "dumb"}
        e.update(self.config.env)
        if env:
            e.update(env)
        return {str(k): str(v) for k, v in e.items()}

    def _env(self, env):
        return [f"{k}={v}" for k, v in self._envd(env).items()]

    def exec(self, cmd, timeout=None, workdir=None, env=None, stdin=None, max_output=1_000_000) -> ExecResult:
        self._check()
        argv = ["bash", "-lc", cmd] if isinstance(cmd, str) else [str(x) for x in cmd]
        if not argv:
            raise ValueError("empty command")
        wd = None
        if workdir:
            wd = workdir if workdir.startswith("/") else posixpath.join(self.config.workspace, workdir)
        timeout = float(timeout if timeout is not None else self.config.default_timeout_s)
        t0 = time.monotonic()
        deadline = t0 + timeout
        flood = flood_limit(max_output)
        self._enter()
        try:
            res = None
            if self.use_execd and self._slot.fast():
                res = self._exec_fast(argv, wd, env, stdin, deadline, max_output, flood)
            if res is None:  # fallback: docker exec
                if wd:
                    argv = ["/bin/sh", "-c", 'cd -- "$1" || exit 126; shift; exec "$@"', "sh", wd] + argv
                res = self._exec_docker(argv, env, stdin, deadline, max_output, flood)
            out, err, truncated, timed_out, rc = res
        finally:
            last = self._leave()
            if last and not self._closed and self.kill_background:
                self._slot.sweep()  # like bwrap: nothing an exec started outlives it
        if self._closed:
            raise SandboxError("sandbox was closed while a command ran")
        return ExecResult(rc=rc, stdout=out.decode("utf-8", errors="replace"),
                          stderr=err.decode("utf-8", errors="replace"), timed_out=timed_out,
                          duration_s=time.monotonic() - t0, truncated=truncated)

    # -- fast path: the in-container exec server ----------------------------------------------
    def _exec_fast(self, argv, wd, env, stdin, deadline, max_output, flood):
        """-> (out, err, truncated, timed_out, rc), or None when the server cannot be reached
        (the caller falls back to docker exec)."""
        req = execd_client.encode({"op": "exec", "argv": argv, "env": {**self._slot.base_env, **self._envd(env)},
                        "cwd": wd or self.config.workspace, "stdin": stdin is not None,
                        "uid": SANDBOX_UID, "gid": SANDBOX_GID})
        for attempt in (1, 2, 3):
            sock = None
            try:
                sock = self._slot.connect()
                sock.sendall(req)
            except OSError as e:
                if sock is not None:
                    sock.close()
                if attempt < 3 and self._recover():
                    continue
                log.debug("exec server of %s unreachable (%s): docker exec", self.container_id[:12], e)
                return None
            try:
                r = execd_client.pump(sock, stdin, deadline, max_output, flood, self._sweep_if_alone)
            except BaseException:  # Ctrl-C / error while the command runs: kill what it started
                try:
                    self._kill_all()
                except Exception as e:
                    log.warning("could not stop the interrupted command: %s", e)
                raise
            out, err, truncated, timed_out, flooded, rc, started, error = (
                r.out, r.err, r.truncated, r.timed_out, r.flooded, r.rc, r.started, r.error)
            if started or timed_out or self._closed:
                break
            # the command never started (the server could not fork: the pids limit): clear the
            # sandbox and try again; nothing ran, so a retry cannot repeat a side effect
            if attempt == 3:
                raise SandboxError(f"exec failed: {error or 'the command could not be started'}")
            with self._lock:
                alone = self._active == 1
            if alone and self.kill_background:
                self._slot.sweep()
            time.sleep(0.05 * attempt)
        if timed_out or flooded:
            self._kill_all()
        if not timed_out and not flooded and rc is None:
            if self._closed:
                raise SandboxError("sandbox was closed while a command ran")
            self._kill_all()  # the handler died (it never does on its own): report like a timeout
            timed_out = True
        rc = 124 if timed_out else 137 if flooded else rc
        return out, err, truncated, timed_out, rc

    def _sweep_if_alone(self) -> None:
        """The command exited but something it started holds its output: kill it (like bwrap), unless
        another exec of this sandbox runs at the same time."""
        with self._lock:
            alone = self._active == 1
        if alone and self.kill_background:
            self._slot.sweep()

    # -- fallback: docker exec ----------------------------------------------------------------
    def _exec_docker(self, argv, env, stdin, deadline, max_output, flood):
        for attempt in (1, 2):
            try:
                eid = self._api.exec_create(self.container_id, argv, stdout=True, stderr=True,
                                            stdin=stdin is not None, user=f"{SANDBOX_UID}:{SANDBOX_GID}",
                                            environment=self._env(env), workdir=self.config.workspace)["Id"]
                sock = self._api.exec_start(eid, socket=True)
                break
            except Exception as e:
                # the container stopped (e.g. its init died): start it again on the same state
                if attempt == 1 and self._recover():
                    continue
                raise SandboxError(f"docker exec failed: {e}") from e
        try:
            out, err, truncated, timed_out, flooded = self._pump(sock, eid, stdin, deadline, max_output, flood)
        except BaseException:  # Ctrl-C / error while the command runs: kill what it started
            try:
                self._kill_all()
            except Exception as e:
                log.warning("could not stop the interrupted command: %s", e)
            raise
        try:
            if timed_out or flooded:
                self._kill_all()
            rc = 124 if timed_out else 137 if flooded else self._exit_code(eid, time.monotonic() + 10)
            if rc is None:  # the stream ended but the exec never finished
                self._kill_all()
                rc, timed_out = 124, True
        except Exception as e:
            if self._closed:
                raise SandboxError("sandbox was closed while a command ran") from e
            raise SandboxError(f"docker exec failed: {e}") from e
        return out, err, truncated, timed_out, rc

    def _pump(self, sock, eid, stdin, deadline, max_output, flood):
        """Read the multiplexed exec stream until EOF. Background processes that keep stdout open
        would hold it for docker's 2 s grace after the command exits, so the exec is polled while
        the stream is idle and, once it has exited, what it left behind is killed."""
        raw = getattr(sock, "_sock", sock)
        bufs = {1: bytearray(), 2: bytearray()}
        truncated = timed_out = flooded = False
        total = 0
        writer = None
        try:
            if stdin is not None:
                writer = execd_client.feed_stdin(raw, stdin)
            pending = bytearray()
            want_hdr = True
            need, stream = 8, 1
            poll, next_poll, exited_at = 0.05, time.monotonic() + 0.05, None
            while True:
                now = time.monotonic()
                left = deadline - now
                if left <= 0:
                    timed_out = True
                    break
                if exited_at is not None and now - exited_at > 3.0:
                    break  # exited and still no EOF: stop waiting for stragglers
                raw.settimeout(max(0.001, min(left, next_poll - now, 5.0)))
                try:
                    chunk = raw.recv(1 << 16)
                except socket.timeout:
                    if exited_at is None and time.monotonic() >= next_poll:
                        if not self._api.exec_inspect(eid).get("Running"):
                            exited_at = time.monotonic()
                            with self._lock:
                                alone = self._active == 1
                            if alone and self.kill_background:
                                self._slot.sweep()
                        poll = min(poll * 2, 0.5)
                        next_poll = time.monotonic() + poll
                    elif exited_at is not None:
                        next_poll = time.monotonic() + 0.1
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                total += len(chunk)
                if total > flood:
                    truncated = flooded = True
                    break
                pending += chunk
                while len(pending) >= need:
                    if want_hdr:
                        stream = pending[0]
                        need = struct.unpack(">I", bytes(pending[4:8]))[0]
                        del pending[:8]
                        want_hdr = False
                        if need == 0:
                            want_hdr, need = True, 8
                        continue
                    data = pending[:need]
                    del pending[:need]
                    truncated |= cap_append(bufs.get(stream, bufs[2]), data, max_output)
                    want_hdr, need = True, 8
        finally:
            try:
                raw.shutdown(socket.SHUT_RDWR)  # also wakes a stdin writer blocked in sendall
            except OSError:
                pass
            for x in (sock, raw):
                try:
                    x.close()
                except Exception:
                    pass
            if writer is not None:
                writer.join(timeout=1)
        return bytes(bufs[1]), bytes(bufs[2]), truncated, timed_out, flooded

    def _exit_code(self, eid: str, deadline: float) -> int | None:
        delay = 0.002
        while True:
            info = self._api.exec_inspect(eid)
            if not info.get("Running"):
                code = info.get("ExitCode")
                return int(code) if code is not None else -1
            if time.monotonic() > deadline:
                return None
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _kill_all(self) -> None:
        """Kill every process the sandbox's commands started: a host-side sweep of the container's
        cgroup (init + server survive); where that is impossible, SIGKILL the container (its pid
        namespace dies) and start it again on the same state (the container is not reused later)."""
        if self._closed or self._slot.sweep():
            return
        with self._restart_lock:
            self._slot.suspect = True
            try:
                self._api.kill(self.container_id)
            except Exception as e:
                log.debug("kill %s: %s", self.container_id[:12], e)
            self._api.wait(self.container_id, timeout=30)
            self._factory._restart(self._slot)

    def quiesce(self) -> None:
        """Sandbox.quiesce. Fast path: `_Slot.quiesce`. Otherwise (no host sweep: non-root host, no cgroup)
        the container is killed and started again on the same state (its pid and IPC namespaces die; it is
        not reused later), then the reset runs inside through `docker exec` as the sandbox user."""
        self._enter()
        try:
            slot = self._slot
            if slot.fast():
                why = slot.quiesce()
                if why:
                    raise SandboxError(f"quiesce: {why}")
                return
            if not slot.sweep():
                self._kill_all()  # sweep impossible: kill + restart (slot.suspect)
            slot.clear_host_side()
            end = time.monotonic() + 30
            out, err, _t, timed_out, rc = self._exec_docker(
                ["python3", "-I", "-S", EXECD_IN, "--reset"], None, None, end, 10_000, flood_limit(10_000))
            if timed_out or rc != 0:
                raise SandboxError(f"quiesce: reset rc={rc}: {(out + err)[:200]!r}")
            slot.sweep()
        finally:
            self._leave()

    def _seal_owner(self) -> tuple[int, int]:
        return 0, 0

    def _recover(self) -> bool:
        try:
            st = self._api.inspect_container(self.container_id)["State"]
            if not st.get("Running"):
                self._slot.suspect = True
                self._factory._restart(self._slot)
                return True
        except Exception:
            pass
        return False

    def close(self):
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._factory._release(self)
        finally:
            cleanup.unregister(self)


class DockerFactory(SandboxFactory):
    """Opens docker sandboxes from a warm pool of idle containers: at least `pool_size` are kept
    ready (fresh ones are made only when recycled ones do not suffice), at most `max_idle` are kept.

    use_execd: run commands through the in-container exec server (False: always `docker exec`).
    recycle: reset closed sandboxes' containers and reuse them (False: destroy each one).
    """

    name = "docker"
    _is_factory = True

    def __init__(self, config: SandboxConfig | None = None, pool_size: int = 2, client=None, *,
                 max_idle: int | None = None, use_execd: bool = True, recycle: bool = True,
                 max_uses: int = 200, close_wait_s: float = 10.0):
        super().__init__(config)
        self.client = client or docker_client()
        try:
            self.client.images.get(self.config.image)
        except Exception as e:
            raise SandboxError(f"docker image {self.config.image} is missing "
                               "(run scripts/build_sandbox_image.sh)") from e
        self.pool_size = max(0, int(pool_size))
        self.max_idle = max(self.pool_size, int(max_idle if max_idle is not None else max(8, self.pool_size)))
        self.use_execd = bool(use_execd)
        self.recycle = bool(recycle)
        self.max_uses = int(max_uses)
        self.close_wait_s = float(close_wait_s)
        self.stats = {"created": 0, "recycled": 0, "destroyed": 0, "reset_failed": 0}
        self._pool: list[_Slot] = []
        self._cv = threading.Condition()
        self._closed = False
        self._sandboxes: "weakref.WeakSet[DockerSandbox]" = weakref.WeakSet()
        self._queue: list[tuple[_Slot, DockerSandbox | None, bool]] = []  # (slot, sandbox, reusable?)
        self._busy = 0  # slots the reaper holds right now
        self._coming = 0  # of those in the queue + held: how many may come back to the pool
        self._reaper: threading.Thread | None = None
        self._filler = None
        cleanup.register(self)
        if self.pool_size:
            self._filler = threading.Thread(target=self._fill_loop, name="clawgym-docker-pool", daemon=True)
            self._filler.start()

    # -- containers ---------------------------------------------------------------------------
    def _create(self) -> _Slot:
        c = self.config
        state = StateDir(c.workspace, c.disk_mb, SANDBOX_UID, SANDBOX_GID)
        ctl = os.path.join(state.path, "ctl")
        try:
            os.mkdir(ctl, 0o700)  # root-owned 0700: the sandbox user cannot reach the socket
        except BaseException:
            state.remove()
            raise
        volumes = {state.home: {"bind": HOME, "mode": "rw"}, state.tmp: {"bind": "/tmp", "mode": "rw"},
                   ctl: {"bind": CTL_IN, "mode": "rw"}, EXECD: {"bind": EXECD_IN, "mode": "ro"}}
        if state.ws_separate:
            volumes[state.ws] = {"bind": state.workspace, "mode": "rw"}
        for host, inside in c.extra_ro_binds:
            volumes[host] = {"bind": inside, "mode": "ro"}
        mem = f"{int(c.memory_mb)}m"
        try:
            cont = self.client.containers.run(
                c.image, ["python3", "-I", "-S", EXECD_IN, CTL_IN + "/ctl.sock"], detach=True,
                name=state.name, hostname="clawgym",
                labels={cleanup.LABEL: "1", cleanup.LABEL_PID: str(os.getpid()),
                        cleanup.LABEL_HOST: os.uname().nodename},
                network_mode="bridge" if c.network else "none", read_only=True,
                # the server (uid 0) may only switch to the sandbox user; no other capability
                cap_drop=["ALL"], cap_add=["SETUID", "SETGID"], security_opt=["no-new-privileges"], init=True,
                mem_limit=mem, memswap_limit=mem, pids_limit=int(c.pids),
                # pid 1 (docker-init + the server) runs as uid 0, so the sandbox user (1000, every
                # command) cannot signal it and stop the container
                nano_cpus=int(float(c.cpus) * 1e9), user="0:0",
                volumes=volumes, working_dir=c.workspace, environment={"HOME": HOME},
                shm_size="64m",
            )
        except BaseException as e:
            try:
                self.client.api.remove_container(state.name, force=True)
            except Exception:
                pass
            state.remove()
            if isinstance(e, Exception):
                raise SandboxError(f"could not start a sandbox container: {e}") from e
            raise
        slot = _Slot(cont.id, state, ctl)
        slot.shm_rmid_forced = bool(c.shm_rmid_forced)
        try:
            # without root on the host the fast path is off anyway (no sweep): do not wait for it
            if os.geteuid() == 0 and self.use_execd and not slot.wait_server(10.0):
                log.warning("exec server of %s did not start: docker exec is used", cont.id[:12])
            slot.locate(self.client.api)
        except BaseException:
            self._destroy(slot)
            raise
        with self._cv:
            self.stats["created"] += 1
        return slot

    def _restart(self, slot: _Slot) -> None:
        """Start a stopped container again on the same state."""
        if slot.sock:
            try:
                os.unlink(slot.sock)
            except OSError:
                pass
        self.client.api.start(slot.id)
        slot.wait_server(10.0)
        slot.locate(self.client.api)

    def _destroy(self, slot: _Slot) -> None:
        try:
            self.client.api.remove_container(slot.id, force=True)
        except Exception as e:
            if "No such container" not in str(e):
                log.warning("could not remove container %s: %s", slot.id[:12], e)
        slot.state.remove()
        with self._cv:
            self.stats["destroyed"] += 1

    # -- recycling ----------------------------------------------------------------------------
    def _reusable(self, slot: _Slot) -> bool:
        return (self.recycle and not self._closed and not slot.suspect and slot.uses + 1 < self.max_uses
                and slot.fast())

    def _release(self, sb: "DockerSandbox") -> None:
        """A sandbox closed: its container goes to the reaper (reset + back to the pool, or destroy)."""
        with self._cv:
            self._sandboxes.discard(sb)
            ok = self._reusable(sb._slot)
            self._queue.append((sb._slot, sb, ok))
            self._coming += ok
            if self._reaper is None or not self._reaper.is_alive():
                self._reaper = threading.Thread(target=self._reap_loop, name="clawgym-docker-reaper",
                                                daemon=True)
                try:
                    self._reaper.start()
                except RuntimeError:  # no new threads at interpreter exit: factory.close() destroys it
                    self._reaper = None
            self._cv.notify_all()

    def _reap_loop(self) -> None:
        while True:
            with self._cv:
                while not self._queue:
                    if self._closed:
                        return
                    self._cv.wait(1.0)
                    if not self._queue and self._closed:
                        return
                slot, sb, ok = self._queue.pop(0)
                self._busy += 1
            back = False
            try:
                back = ok and not self._closed and self._reset(slot, sb)
            except Exception as e:
                log.warning("reset of container %s failed: %s", slot.id[:12], e)
            if back:
                with self._cv:
                    if not self._closed and len(self._pool) < self.max_idle:
                        self._pool.append(slot)
                        self.stats["recycled"] += 1
                    else:
                        back = False
            if not back:
                try:
                    self._destroy(slot)
                except Exception as e:  # pragma: no cover
                    log.warning("could not destroy container %s: %s", slot.id[:12], e)
            with self._cv:
                self._busy -= 1
                self._coming -= ok
                self._cv.notify_all()

    def _reset(self, slot: _Slot, sb: "DockerSandbox | None") -> bool:
        """Bring a used container back to the state of a fresh one (see the module docstring)."""
        # 1. nothing of the old sandbox runs, and its exec calls have all returned
        end = time.monotonic() + self.close_wait_s
        while True:
            if not slot.sweep():
                return self._failed(slot, "processes could not be swept")
            if sb is None:
                break
            with sb._lock:
                if sb._active == 0:
                    break
                sb._idle.wait(0.01)
            if time.monotonic() > end:
                return self._failed(slot, "a command was still running")
        # 2. SysV IPC, /dev/shm, /dev/mqueue (from the host, then inside the container as the sandbox user)
        why = slot.quiesce()
        if why:
            return self._failed(slot, why)
        # 3. HOME (with the workspace) and /tmp, from the host, never following symlinks
        try:
            slot.state.reset()
        except OSError as e:
            return self._failed(slot, f"state reset: {e}")
        slot.uses += 1
        return True

    def _failed(self, slot: _Slot, why: str) -> bool:
        log.info("container %s is not reused: %s", slot.id[:12], why)
        slot.suspect = True
        with self._cv:
            self.stats["reset_failed"] += 1
        return False

    def settle(self, timeout: float = 60.0) -> bool:
        """Wait until every closed sandbox's container has been reset or destroyed."""
        end = time.monotonic() + timeout
        with self._cv:
            while self._queue or self._busy:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(min(left, 0.5))
        return True

    def idle(self) -> list[tuple[str, str]]:
        """(container id, host state dir) of the idle containers in the pool."""
        with self._cv:
            return [(s.id, s.state.path) for s in self._pool]

    # -- warm pool ----------------------------------------------------------------------------
    def _fill_loop(self) -> None:
        failures = 0
        while True:
            with self._cv:
                # recycled containers on their way back count: no CPU spent creating spares
                while not self._closed and len(self._pool) + self._coming >= self.pool_size:
                    self._cv.wait()
                if self._closed:
                    return
            try:
                slot = self._create()
                failures = 0
            except Exception as e:
                failures += 1
                log.warning("warm pool: %s", e)
                time.sleep(min(30, 0.5 * 2 ** failures))
                continue
            with self._cv:
                if self._closed:
                    self._destroy(slot)
                    return
                self._pool.append(slot)
                self._cv.notify_all()

    def warm(self, timeout: float = 60.0) -> bool:
        """Wait until the pool is full (for benchmarks/tests)."""
        end = time.monotonic() + timeout
        with self._cv:
            while len(self._pool) < self.pool_size and not self._closed:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    # -- API ----------------------------------------------------------------------------------
    def open(self, files: Iterable = ()) -> DockerSandbox:
        if self._closed:
            raise SandboxError("factory is closed")
        slot = None
        with self._cv:
            # a container being reset is back in milliseconds; a new one takes far longer
            end = time.monotonic() + 5.0
            while not self._pool and self._coming > 0 and not self._closed and time.monotonic() < end:
                self._cv.wait(0.05)
            if self._pool:
                slot = self._pool.pop()  # the most recently used: warm caches
                self._cv.notify_all()
        if slot is None:
            slot = self._create()
        sb = DockerSandbox(self.config, self, slot)
        with self._cv:
            self._sandboxes.add(sb)
        try:
            sb.write_files(files)
        except BaseException:
            sb.close()
            raise
        return sb

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for sb in list(self._sandboxes):
            sb.close()
        reaper = self._reaper
        if reaper is not None and reaper is not threading.current_thread():
            reaper.join(timeout=120)
        if self._filler is not None and self._filler is not threading.current_thread():
            self._filler.join(timeout=60)  # a container being created is destroyed by the filler
        with self._cv:
            pool, self._pool = self._pool, []
            queue, self._queue = self._queue, []
        slots = pool + [q[0] for q in queue]
        # a few at a time (plain threads: this also runs at interpreter exit, where an executor
        # cannot be made)
        while slots:
            batch, slots = slots[:4], slots[4:]
            ts = []
            for slot in batch[1:]:
                t = threading.Thread(target=self._destroy, args=(slot,), daemon=True)
                try:
                    t.start()
                    ts.append(t)
                except RuntimeError:
                    self._destroy(slot)
            self._destroy(batch[0])
            for t in ts:
                t.join()
        cleanup.unregister(self)


