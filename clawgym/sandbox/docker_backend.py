"""Docker backend (docker SDK).

Each sandbox is one container of `clawgym-sandbox:latest` (scripts/build_sandbox_image.sh builds it
offline; clawgym/sandbox/Dockerfile is the online way) running `sleep infinity` under docker-init:
--network none, read-only root, cap_drop ALL, no-new-privileges, user 1000:1000, memory (no swap),
pids and CPU limits, labelled clawgym.sandbox=1. The writable state (HOME=/root with the workspace,
/tmp) is a size-limited host tmpfs bind-mounted in, so file access from the host needs no docker
call and never follows symlinks. A warm pool of idle containers per factory makes open() fast.

exec runs `docker exec` through the raw API socket (deadline + capped output). On timeout the
container is SIGKILLed (its pid namespace dies: every process the command started, setsid or not,
and any other process in that sandbox) and started again on the same state: rc=124, timed_out.
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

from clawgym.sandbox import cleanup
from clawgym.sandbox.base import ExecResult, Sandbox, SandboxConfig, SandboxError, SandboxFactory
from clawgym.sandbox.hostfs import HOME, SANDBOX_GID, SANDBOX_UID, HostFileMixin, HostFS, StateDir, flood_limit

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


class _Slot:
    """A started container + its host state dir, not yet handed out."""

    def __init__(self, container_id: str, state: StateDir):
        self.id = container_id
        self.state = state
        self.keep: set[int] = set()  # host pids of docker-init and its `sleep infinity`
        self.procs_file: str | None = None  # host path of the container's cgroup.procs

    def locate(self, api, timeout: float = 5.0) -> None:
        """Find (from the host) the container's cgroup and its init + sleep pids, so leftover
        processes can be killed without a docker call. Leaves procs_file None where the host's
        /proc or cgroups are not readable (then timeouts restart the container instead)."""
        self.procs_file, self.keep = None, set()
        try:
            init = int(api.inspect_container(self.id)["State"]["Pid"])
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
            if path and os.access(path, os.R_OK) and len(children) == 1:
                self.keep = {init, children[0]}
                self.procs_file = path
        except (OSError, ValueError, KeyError) as e:
            log.debug("cannot locate container %s processes from the host: %s", self.id[:12], e)

    def extra_pids(self) -> list[int]:
        with open(self.procs_file) as f:
            return [p for p in (int(x) for x in f.read().split()) if p not in self.keep]

    def sweep(self, timeout: float = 5.0) -> bool:
        """SIGKILL every container process except init + sleep, until none is left."""
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


class DockerSandbox(HostFileMixin, Sandbox):
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
        self._active = 0
        # kill what an exec left running (background jobs, fork bombs) when it ends, like bwrap
        self.kill_background = True
        cleanup.register(self)

    @property
    def host_workspace(self) -> str:
        return self._slot.state.ws

    def _env(self, env):
        e = {"PATH": SANDBOX_PATH, "HOME": HOME, "USER": "sandbox", "LOGNAME": "sandbox",
             "LANG": "C.UTF-8", "TMPDIR": "/tmp", "WORKSPACE": self.config.workspace, "TERM": "dumb"}
        e.update(self.config.env)
        if env:
            e.update(env)
        return [f"{k}={v}" for k, v in e.items()]

    def exec(self, cmd, timeout=None, workdir=None, env=None, stdin=None, max_output=1_000_000) -> ExecResult:
        self._check()
        argv = ["bash", "-lc", cmd] if isinstance(cmd, str) else [str(x) for x in cmd]
        if not argv:
            raise ValueError("empty command")
        if workdir:
            wd = workdir if workdir.startswith("/") else posixpath.join(self.config.workspace, workdir)
            argv = ["/bin/sh", "-c", 'cd -- "$1" || exit 126; shift; exec "$@"', "sh", wd] + argv
        timeout = float(timeout if timeout is not None else self.config.default_timeout_s)
        t0 = time.monotonic()
        deadline = t0 + timeout
        flood = flood_limit(max_output)
        with self._lock:
            self._active += 1
        try:
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
        finally:
            with self._lock:
                self._active -= 1
                last = self._active == 0
            if last and not self._closed and self.kill_background:
                self._slot.sweep()  # like bwrap: nothing an exec started outlives it
        if self._closed:
            raise SandboxError("sandbox was closed while a command ran")
        return ExecResult(rc=rc, stdout=out.decode("utf-8", errors="replace"),
                          stderr=err.decode("utf-8", errors="replace"), timed_out=timed_out,
                          duration_s=time.monotonic() - t0, truncated=truncated)

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
                def _feed():
                    try:
                        raw.sendall(stdin)
                        raw.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                writer = threading.Thread(target=_feed, daemon=True)
                writer.start()
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
                    buf = bufs.get(stream, bufs[2])
                    room = max_output - len(buf)
                    if room > 0:
                        buf += data[:room]
                    if len(data) > room:
                        truncated = True
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
        cgroup (init + sleep survive); where that is impossible, SIGKILL the container (its pid
        namespace dies) and start it again on the same state."""
        if self._closed or self._slot.sweep():
            return
        with self._restart_lock:
            try:
                self._api.kill(self.container_id)
            except Exception as e:
                log.debug("kill %s: %s", self.container_id[:12], e)
            self._api.wait(self.container_id, timeout=30)
            self._api.start(self.container_id)
            self._slot.locate(self._api)

    def _recover(self) -> bool:
        try:
            st = self._api.inspect_container(self.container_id)["State"]
            if not st.get("Running"):
                self._api.start(self.container_id)
                self._slot.locate(self._api)
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
            self._factory._destroy(self._slot)
        finally:
            cleanup.unregister(self)


class DockerFactory(SandboxFactory):
    """Opens docker sandboxes from a warm pool of `pool_size` idle containers."""

    name = "docker"
    _is_factory = True

    def __init__(self, config: SandboxConfig | None = None, pool_size: int = 2, client=None):
        super().__init__(config)
        self.client = client or docker_client()
        try:
            self.client.images.get(self.config.image)
        except Exception as e:
            raise SandboxError(f"docker image {self.config.image} is missing "
                               "(run scripts/build_sandbox_image.sh)") from e
        self.pool_size = max(0, int(pool_size))
        self._pool: list[_Slot] = []
        self._cv = threading.Condition()
        self._closed = False
        self._sandboxes: "weakref.WeakSet[DockerSandbox]" = weakref.WeakSet()
        self._filler = None
        cleanup.register(self)
        if self.pool_size:
            self._filler = threading.Thread(target=self._fill_loop, name="clawgym-docker-pool", daemon=True)
            self._filler.start()

    # -- containers ---------------------------------------------------------------------------
    def _create(self) -> _Slot:
        c = self.config
        state = StateDir(c.workspace, c.disk_mb, SANDBOX_UID, SANDBOX_GID)
        volumes = {state.home: {"bind": HOME, "mode": "rw"}, state.tmp: {"bind": "/tmp", "mode": "rw"}}
        if state.ws_separate:
            volumes[state.ws] = {"bind": state.workspace, "mode": "rw"}
        for host, inside in c.extra_ro_binds:
            volumes[host] = {"bind": inside, "mode": "ro"}
        mem = f"{int(c.memory_mb)}m"
        try:
            cont = self.client.containers.run(
                c.image, ["sleep", "infinity"], detach=True, name=state.name, hostname="clawgym",
                labels={cleanup.LABEL: "1", cleanup.LABEL_PID: str(os.getpid()),
                        cleanup.LABEL_HOST: os.uname().nodename},
                network_mode="bridge" if c.network else "none", read_only=True,
                cap_drop=["ALL"], security_opt=["no-new-privileges"], init=True,
                mem_limit=mem, memswap_limit=mem, pids_limit=int(c.pids),
                # pid 1 (docker-init + sleep) runs as uid 0 without capabilities, so the sandbox
                # user (1000, every exec) cannot signal it and stop the container
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
        slot = _Slot(cont.id, state)
        slot.locate(self.client.api)
        return slot

    def _destroy(self, slot: _Slot) -> None:
        try:
            self.client.api.remove_container(slot.id, force=True)
        except Exception as e:
            if "No such container" not in str(e):
                log.warning("could not remove container %s: %s", slot.id[:12], e)
        slot.state.remove()

    def _fill_loop(self) -> None:
        failures = 0
        while True:
            with self._cv:
                while not self._closed and len(self._pool) >= self.pool_size:
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
            if self._pool:
                slot = self._pool.pop(0)
                self._cv.notify_all()
        if slot is None:
            slot = self._create()
        sb = DockerSandbox(self.config, self, slot)
        try:
            sb.write_files(files)
        except BaseException:
            sb.close()
            raise
        self._sandboxes.add(sb)
        return sb

    def close(self) -> None:
        with self._cv:
            self._closed = True
            pool, self._pool = self._pool, []
            self._cv.notify_all()
        for sb in list(self._sandboxes):
            sb.close()
        if self._filler is not None and self._filler is not threading.current_thread():
            self._filler.join(timeout=60)  # a container being created is destroyed by the filler
        for slot in pool:
            self._destroy(slot)
        with self._cv:
            pool, self._pool = self._pool, []
        for slot in pool:
            self._destroy(slot)
        cleanup.unregister(self)
