"""Docker containers of the docker backend: the engine (`docker_client`, `available`), starting and removing a
sandbox container (`create_slot`, `destroy_slot`) and `Slot`, a started container with its host state, which
the host drives without docker calls (cgroup sweeps, the exec server's socket, IPC cleanup). See
clawgym/sandbox/docker/backend.py for the isolation argument."""

from __future__ import annotations

import logging
import os
import signal
import socket
import time

from clawgym.sandbox import guest
from clawgym.sandbox.base import SandboxConfig, SandboxError
from clawgym.sandbox.host import cleanup, execd_client, nsipc
from clawgym.sandbox.host.fstree import empty_dir
from clawgym.sandbox.host.statedir import HOME, SANDBOX_GID, SANDBOX_UID, StateDir, can_mount, tmp_base

log = logging.getLogger(__name__)


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


EXECD = str(guest.EXECD)
EXECD_IN = "/opt/clawgym/execd.py"
CTL_IN = "/run/clawgym"


def execd_host_path(stage: bool = False, root: str = "") -> str:
    """The execd.py the engine binds into sandboxes: the guest side's file (clawgym/sandbox/guest/execd.py),
    or, with `stage` (SandboxConfig.stage_execd: a caller that is itself a container, e.g. a run launched by
    deploy/'s DockerRunLauncher, whose package path the engine's host does not have), a content-addressed copy in
    tmp_base(root) (SandboxConfig.state_root), a directory the caller shares with the engine's host at the same
    path."""
    if not stage:
        return EXECD
    import hashlib

    with open(EXECD, "rb") as f:
        data = f.read()
    dst = os.path.join(tmp_base(root), f"clawgym-execd-{hashlib.sha256(data).hexdigest()[:16]}.py")
    if not os.path.exists(dst):
        tmp = f"{dst}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dst)
    return dst


class Slot:
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

    def server_sock(self) -> str:
        """The exec server's socket path; OSError (as a failed connect) for a container started without one."""
        sock = self.sock
        if sock is None:
            raise OSError(f"container {self.id[:12]} has no exec server socket")
        return sock

    def fast(self) -> bool:
        """The exec server can be used: the host can sweep and the socket exists."""
        return (self.procs_file is not None and os.geteuid() == 0 and self.sock is not None
                and os.path.exists(self.sock))

    def connect(self, timeout: float = 5.0) -> socket.socket:
        return execd_client.connect(self.server_sock(), timeout)

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
        if self.procs_file is None:
            raise OSError(f"container {self.id[:12]}: its cgroup was not located")
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
        return execd_client.short_request(self.server_sock(), req, timeout)

    def clear_host_side(self) -> str | None:
        """From the host (root), charging nothing to the container: every SysV IPC object and POSIX message
        queue of its IPC namespace removed, /dev/shm emptied (through /proc/<init>/root; the container's /dev
        is root-owned), each checked empty afterwards. -> None, or why it could not be done (then the server's
        reset op follows)."""
        if self.init is None or os.geteuid() != 0:
            return "no host access"
        ok, why = nsipc.clear_ipc(self.init)  # checks no SysV object and no message queue is left
        try:
            shm = f"/proc/{self.init}/root/dev/shm"
            empty_dir(shm)
            if os.listdir(shm):
                raise OSError(f"not empty: {os.listdir(shm)[:5]}")
        except OSError as e:
            why = f"{why}; /dev/shm: {e}" if why else f"/dev/shm: {e}"
            ok = False
        return None if ok else why

    def quiesce(self) -> str | None:
        """Fast path (server + host sweep): processes swept, IPC / /dev/shm / /dev/mqueue cleared from the
        host and checked empty, swept again. -> None or what failed.

        Only where the host side could not do (or check) all of it does the server's reset op follow, as the
        sandbox user inside (~40 ms of a forked interpreter: it was most of a reset's CPU, paid twice per rollout
        once the clean room added a verification pool). Skipping it is safe because it clears nothing the host
        side does not: SysV shm/sem/msg and POSIX message queues of the container's IPC namespace, /dev/shm; the
        one thing only it touches, the user's kernel keyrings, cannot hold anything in a container (docker's
        default seccomp profile refuses add_key/keyctl: tests/test_sandbox_quiesce.py checks it)."""
        if not self.sweep():
            return "processes could not be swept"
        why = self.clear_host_side()
        if why:
            log.info("host-side IPC cleanup of %s: %s", self.id[:12], why)
            rc, msg = execd_client.reset_until_ok(
                self.server_sock(), {"op": "reset", "uid": SANDBOX_UID, "gid": SANDBOX_GID}, self.sweep)
            if rc != 0:
                return f"ipc reset rc={rc}: {msg[:200]!r}"
        if not self.sweep():
            return "processes could not be swept"
        return None


    def restart(self, api) -> None:
        """Start the stopped container again on the same state."""
        if self.sock:
            try:
                os.unlink(self.sock)
            except OSError:
                pass
        api.start(self.id)
        self.wait_server(10.0)
        self.locate(api)


def create_slot(client, c: SandboxConfig, use_execd: bool = True) -> Slot:
    """Start one sandbox container (see clawgym.sandbox.docker.backend) on a fresh StateDir; raises SandboxError."""
    state = StateDir(c.workspace, c.disk_mb, SANDBOX_UID, SANDBOX_GID, tmpfs=can_mount(c.tmpfs), root=c.state_root)
    ctl = os.path.join(state.path, "ctl")
    try:
        os.mkdir(ctl, 0o700)  # root-owned 0700: the sandbox user cannot reach the socket
    except BaseException:
        state.remove()
        raise
    volumes = {state.home: {"bind": HOME, "mode": "rw"}, state.tmp: {"bind": "/tmp", "mode": "rw"},
               ctl: {"bind": CTL_IN, "mode": "rw"},
               execd_host_path(c.stage_execd, c.state_root): {"bind": EXECD_IN, "mode": "ro"}}
    if state.ws_separate:
        volumes[state.ws] = {"bind": state.workspace, "mode": "rw"}
    for host, inside in c.extra_ro_binds:
        volumes[host] = {"bind": inside, "mode": "ro"}
    mem = f"{int(c.memory_mb)}m"
    try:
        cont = client.containers.run(
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
            client.api.remove_container(state.name, force=True)
        except Exception:
            pass
        state.remove()
        if isinstance(e, Exception):
            raise SandboxError(f"could not start a sandbox container: {e}") from e
        raise
    slot = Slot(cont.id, state, ctl)
    slot.shm_rmid_forced = bool(c.shm_rmid_forced)
    try:
        # without root on the host the fast path is off anyway (no sweep): do not wait for it
        if os.geteuid() == 0 and use_execd and not slot.wait_server(10.0):
            log.warning("exec server of %s did not start: docker exec is used", cont.id[:12])
        slot.locate(client.api)
    except BaseException:
        destroy_slot(client.api, slot)
        raise
    return slot


def destroy_slot(api, slot: Slot) -> None:
    """Remove the container (force) and its state dir; an already gone container is fine."""
    try:
        api.remove_container(slot.id, force=True)
    except Exception as e:
        if "No such container" not in str(e):
            log.warning("could not remove container %s: %s", slot.id[:12], e)
    slot.state.remove()
