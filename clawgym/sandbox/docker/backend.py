"""Docker backend (docker SDK).

Each sandbox is one container of `clawgym-sandbox:latest` (scripts/build_sandbox_image.sh builds it
offline; clawgym/sandbox/docker/Dockerfile is the online way): --network none, read-only root,
no-new-privileges, cap_drop ALL + cap_add SETUID/SETGID, memory (no swap), pids and CPU limits,
labelled clawgym.sandbox=1. Its pid 1 is docker-init; its only child is the exec server
(clawgym/sandbox/guest/execd.py, bind-mounted read-only at /opt/clawgym/execd.py) running as uid 0 and
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

Recycling (clawgym.sandbox.pool.RecyclingPool): close() returns at once; the pool's reaper thread resets the
container and puts it back into its factory's idle pool (capped at `max_idle`, only this factory, i.e. the
same config, reuses it).
Isolation argument - what is writable in a container, and how a reset restores it:
  * processes: the sweep kills everything in the container's cgroup except docker-init and the
    server (the sandbox user cannot signal or ptrace either: other uid, no capabilities, the server
    is not dumpable), repeated until cgroup.procs holds only those two;
  * HOME (/root, incl. the workspace) and /tmp: host tmpfs dirs; their contents are removed from the
    host with an fd-based walk that never follows symlinks, modes/owners are restored and every
    extended attribute of the dirs kept is removed (a default ACL the agent set there would be
    inherited by the next task's files: statedir.strip_xattrs), the
    workspace path is created again (the same state as a fresh container) and checked empty;
  * /dev/shm, /dev/mqueue and SysV IPC (the container's own ipc namespace): first from the host
    (nsipc: a helper joins the container's ipc namespace and removes every object and message queue;
    /dev/shm emptied through /proc/<init>/root), which charges nothing to the container's memory (it
    may be full of shared memory), each checked empty; only where that could not be done does a forked
    child of the server running as uid 1000 remove every SysV shm/sem/msg object and empty both dirs,
    then check nothing is left (a non-empty result fails the reset; see Slot.quiesce);
  * nothing else is writable by uid 1000 (checked with `find / -writable`: besides HOME and /tmp
    only /dev/shm, /dev/mqueue and stateless device nodes such as /dev/null; the root is read-only,
    /dev, /run/clawgym, /proc/sys and the docker-managed /etc files are root-owned or read-only).
    No network-namespace state (sockets, abstract sockets) outlives the processes that hold it;
    kernel keyrings are out of reach (docker's default seccomp profile blocks keyctl/add_key).
    The server itself keeps no per-sandbox state: each command runs in a fresh forked handler.
The same steps minus the file reset are `DockerSandbox.quiesce()` (between the agent and the verifier).
docker-init and the exec server run with oom_score_adj -1000 where the host may set it (CAP_SYS_RESOURCE),
commands with 500 (always picked first), and kernel.shm_rmid_forced=1 (see clawgym.sandbox.bwrap.backend).
A container whose reset fails, that had to be restarted after a timeout, whose processes cannot
be swept from the host, that was used `max_uses` times, or whose sandbox still had a command
running `close_wait_s` after close is destroyed, not reused. factory.close() waits for the reaper,
so no container, mount or temp dir outlives it.
Containers and their host side: clawgym/sandbox/docker/container.py; exec paths: clawgym/sandbox/docker/exec.py.
"""

from __future__ import annotations

import logging
import posixpath
import threading
import time

from clawgym.sandbox.base import ExecResult, Sandbox, SandboxConfig, SandboxError
from clawgym.sandbox.docker.container import EXECD_IN, Slot, available, create_slot, destroy_slot, docker_client
from clawgym.sandbox.docker.exec import DockerExecMixin
from clawgym.sandbox.host import cleanup
from clawgym.sandbox.host.hostfs import CountedHostFileMixin, HostFS
from clawgym.sandbox.host.proc import flood_limit
from clawgym.sandbox.host.statedir import SANDBOX_GID, SANDBOX_UID
from clawgym.sandbox.pool import PooledFactory, RecyclingPool
from clawgym.sandbox.registry import sandbox_backend

log = logging.getLogger(__name__)


class DockerSandbox(DockerExecMixin, CountedHostFileMixin, Sandbox):
    """A sandbox backed by one docker container of the factory's pool."""

    backend = "docker"
    isolating = True

    def __init__(self, config: SandboxConfig, factory: DockerFactory, slot: Slot):
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

    def exec(self, cmd, timeout=None, workdir=None, env=None, stdin=None, max_output=1_000_000) -> ExecResult:
        self._check()
        argv = ["bash", "-lc", cmd] if isinstance(cmd, str) else [str(x) for x in cmd]
        if not argv:
            raise ValueError("empty command")
        wd = None
        if workdir:
            wd = workdir if workdir.startswith("/") else posixpath.join(self.config.workspace, workdir)

        def docker(deadline, flood):  # fallback: docker exec
            a = ["/bin/sh", "-c", 'cd -- "$1" || exit 126; shift; exec "$@"', "sh", wd] + argv if wd else argv
            return self._exec_docker(a, env, stdin, deadline, max_output, flood)

        return self._exec_counted(timeout, max_output, docker, lambda deadline, flood: self._exec_fast(
            argv, wd, env, stdin, deadline, max_output, flood))

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
            self._slot.restart(self._api)

    def quiesce(self) -> None:
        """Sandbox.quiesce. Fast path: `Slot.quiesce`. Otherwise (no host sweep: non-root host, no cgroup)
        the container is killed and started again on the same state (its pid and IPC namespaces die; it is
        not reused later), then the reset runs inside through `docker exec` as the sandbox user."""
        self._enter()
        try:
            slot = self._slot
            if slot.fast():
                slot.sweep()  # the agent's commands die; execs running in other threads return now
                self.wait_alone(10.0)  # ... after their own end-of-exec kills, which would hit the reset below
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

    def lock_workspace_path(self) -> None:
        """Sandbox.lock_workspace_path, on the container's state dir."""
        self._enter()
        try:
            self._slot.state.lock_workspace_path(*self._seal_owner())
        finally:
            self._leave()

    def scrub(self) -> list[list[str]]:
        """Sandbox.scrub, from the host on the container's state dir (see BwrapSandbox.scrub)."""
        self._enter()
        try:
            return self._slot.state.scrub()
        finally:
            self._leave()

    def _recover(self) -> bool:
        try:
            st = self._api.inspect_container(self.container_id)["State"]
            if not st.get("Running"):
                self._slot.suspect = True
                self._slot.restart(self._api)
                return True
        except Exception:
            pass
        return False

    def _close(self):
        self._factory._release(self)


@sandbox_backend("docker", auto=10)
class DockerFactory(PooledFactory):
    """Opens docker sandboxes from a warm pool of idle containers (clawgym.sandbox.pool.RecyclingPool): at
    least `pool_size` are kept ready from the start (fresh ones are made only when recycled ones do not
    suffice), at most `max_idle` are kept.

    use_execd: run commands through the in-container exec server (False: always `docker exec`).
    recycle: reset closed sandboxes' containers and reuse them (False: destroy each one).
    """

    def __init__(self, config: SandboxConfig | None = None, pool_size: int = 2, client=None, *,
                 max_idle: int | None = None, use_execd: bool = True, recycle: bool = True,
                 max_uses: int = 200, close_wait_s: float = 10.0):
        super().__init__(config)
        self.client = client or docker_client()
        self._init_kwargs = {"pool_size": pool_size, "client": self.client, "max_idle": max_idle,
                             "use_execd": use_execd, "recycle": recycle, "max_uses": max_uses,
                             "close_wait_s": close_wait_s}
        try:
            self.client.images.get(self.config.image)
        except Exception as e:
            raise SandboxError(f"docker image {self.config.image} is missing "
                               "(run scripts/build_sandbox_image.sh)") from e
        self.use_execd = bool(use_execd)
        self.recycle = bool(recycle)
        self.pool = RecyclingPool(
            "docker", create=lambda: create_slot(self.client, self.config, self.use_execd), reset=_reset_slot,
            destroy=lambda slot: destroy_slot(self.client.api, slot), sweep=lambda slot: slot.sweep(),
            describe=lambda slot: (slot.id, slot.state.path), pool_size=pool_size, max_idle=max_idle,
            max_uses=max_uses, max_starting=1, close_wait_s=close_wait_s)
        cleanup.register(self)
        self.pool.start()

    @classmethod
    def available(cls, config: SandboxConfig) -> tuple[bool, str]:
        return available(config.image)

    def _handle(self, slot: Slot) -> DockerSandbox:
        return DockerSandbox(self.config, self, slot)

    def _release(self, sb: DockerSandbox) -> None:
        """A sandbox closed: its container goes to the pool's reaper (reset + back to the pool, or destroy)."""
        slot = sb._slot
        self.pool.give_back(slot, sb, reusable=self.recycle and not slot.suspect and slot.fast())


def _reset_slot(slot: Slot) -> str | None:
    """Bring a used container (nothing of its sandbox running any more) back to the state of a fresh one (see
    the module docstring): SysV IPC, /dev/shm, /dev/mqueue from the host, then inside as the sandbox user;
    HOME (with the workspace) and /tmp from the host, never following symlinks. -> None, or why not."""
    why = slot.quiesce()
    if why:
        return why
    try:
        slot.state.reset()
    except OSError as e:
        return f"state reset: {e}"
    return None
