"""How a docker sandbox runs a command: the in-container exec server (fast path) or `docker exec` through the
raw API socket (fallback). A mixin of DockerSandbox (clawgym/sandbox/docker/backend.py), which provides
`config`, `_slot`, `_api`, `_enter()`/`_leave_swept()`/`_sweep_alone()` (CountedHostFileMixin), `use_execd`,
`kill_background`, `_recover()` and `_kill_all()`."""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clawgym.sandbox.base import ExecResult, SandboxConfig, SandboxError
from clawgym.sandbox.host import execd_client
from clawgym.sandbox.host.execd_client import SERVICE_GID, SERVICE_UID
from clawgym.sandbox.host.proc import cap_append, flood_limit
from clawgym.sandbox.host.statedir import SANDBOX_GID, SANDBOX_UID, sandbox_env

if TYPE_CHECKING:
    from clawgym.sandbox.docker.container import Slot

log = logging.getLogger(__name__)


class DockerExecMixin:
    """exec paths of a DockerSandbox; each returns (out, err, truncated, timed_out, rc)."""

    # what DockerSandbox (and its host-file mixin) provide; annotations only: no attribute or method of the mixin
    config: SandboxConfig
    _slot: Slot
    _api: Any
    _closed: bool
    use_execd: bool
    kill_background: bool
    _check: Callable[[], None]
    _enter: Callable[[], None]
    _leave_swept: Callable[[Callable[[], object] | None], bool]
    _sweep_alone: Callable[[Callable[[], object]], bool]
    _kill_all: Callable[[], None]

    def _envd(self, env) -> dict[str, str]:
        return sandbox_env(self.config, env)

    def _env(self, env):
        return [f"{k}={v}" for k, v in self._envd(env).items()]

    # -- fast path: the in-container exec server ----------------------------------------------
    def _exec_fast(self, argv, wd, env, stdin, deadline, max_output, flood, uid=SANDBOX_UID, gid=SANDBOX_GID):
        """-> (out, err, truncated, timed_out, rc), or None when the server cannot be reached
        (the caller falls back to docker exec)."""
        req = execd_client.encode({"op": "exec", "argv": argv, "env": {**self._slot.base_env, **self._envd(env)},
                        "cwd": wd or self.config.workspace, "stdin": stdin is not None,
                        "uid": uid, "gid": gid})
        for attempt in (1, 2, 3):
            if time.monotonic() >= deadline:  # its time went waiting (a sweep, a retry): never start it late
                return b"", b"", False, True, 124
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
                self._kill_interrupted()
                raise
            out, err, truncated, timed_out, flooded, rc = r.out, r.err, r.truncated, r.timed_out, r.flooded, r.rc
            if r.not_started is None or timed_out or self._closed:
                break  # started, or silence: a command that may have run is never run again
            # the server made no process for it (the pids limit): clear the sandbox and try again;
            # nothing ran, so a retry cannot repeat a side effect
            if attempt == 3:
                raise SandboxError(f"exec failed: {r.not_started}")
            self._sweep_if_alone()
            time.sleep(0.05 * attempt)
        if timed_out or flooded:
            self._kill_own()
        if not timed_out and not flooded and rc is None:
            if self._closed:
                raise SandboxError("sandbox was closed while a command ran")
            if r.error is not None:
                raise SandboxError(f"exec failed: {r.error}")
            # the handler died before the exit status (as on bwrap): the command counts as killed, and what it
            # may have left is killed now if no other exec runs, else when the sandbox's last exec ends
            self._kill_own()
            rc = 137
        rc = 124 if timed_out else 137 if flooded else rc
        return out, err, truncated, timed_out, rc

    def _kill_own(self) -> None:
        """Kill what a timed-out, flooding or orphaned command started: at once when no other exec of the sandbox
        runs (a kill is container-wide, so it would hit theirs too), else at the end of the sandbox's last exec; at
        once regardless where nothing sweeps at that end (`kill_background` off)."""
        if not self._sweep_alone(self._kill_all) and not self.kill_background:
            self._kill_all()

    # -- harness services: another uid than the sandbox user's ---------------------------------------
    def service_uid(self) -> int | None:
        """The uid the host sees (SO_PEERCRED) for processes of :meth:`service_exec`: SERVICE_UID mapped through
        the container's user namespace (docker's userns-remap), else SERVICE_UID."""
        return execd_client.host_uid(self._slot.init, SERVICE_UID)

    def service_exec(self, argv, timeout=None, env=None, stdin=None, max_output=1_000_000) -> ExecResult:
        """Run `argv` (a list) in the sandbox as SERVICE_UID:SERVICE_GID (not the sandbox user, not root, no
        capabilities: docker's exec server drops to it; `docker exec --user` in the fallback), cwd /, for the
        harness's own in-sandbox components (the agent's tools only ever call exec()). Like exec() otherwise:
        counted as an exec, capped by `timeout`, what it started is killed when the sandbox's last exec ends."""
        self._check()
        argv = [str(x) for x in argv]
        if not argv:
            raise ValueError("empty command")
        return self._exec_counted(
            timeout, max_output,
            lambda deadline, flood: self._exec_docker(argv, env, stdin, deadline, max_output, flood,
                                                      user=f"{SERVICE_UID}:{SERVICE_GID}", workdir="/"),
            lambda deadline, flood: self._exec_fast(argv, "/", env, stdin, deadline, max_output, flood,
                                                    SERVICE_UID, SERVICE_GID))

    def _exec_counted(self, timeout, max_output, docker, fast) -> ExecResult:
        """One command of exec() / service_exec(): `fast(deadline, flood)` on the exec server (None: unreachable),
        else `docker(deadline, flood)`, each giving (out, err, truncated, timed_out, rc); capped by `timeout`
        (None: the config's default) and `max_output`, counted as an exec, and what it started is killed when
        the sandbox's last exec ends (with `kill_background`, like bwrap)."""
        timeout = float(timeout if timeout is not None else self.config.default_timeout_s)
        t0 = time.monotonic()
        deadline = t0 + timeout
        flood = flood_limit(max_output)
        self._enter()
        try:
            res = fast(deadline, flood) if self.use_execd and self._slot.fast() else None
            if res is None:
                res = docker(deadline, flood)
            out, err, truncated, timed_out, rc = res
        finally:
            self._leave_swept(self._slot.sweep if self.kill_background else None)
        if self._closed:
            raise SandboxError("sandbox was closed while a command ran")
        return ExecResult(rc=rc, stdout=out.decode("utf-8", errors="replace"),
                          stderr=err.decode("utf-8", errors="replace"), timed_out=timed_out,
                          duration_s=time.monotonic() - t0, truncated=truncated)

    def _kill_interrupted(self) -> None:
        try:
            self._kill_all()
        except Exception as e:
            log.warning("could not stop the interrupted command: %s", e)

    def _sweep_if_alone(self) -> None:
        """The command exited but something it started holds its output: kill it (like bwrap), unless
        another exec of this sandbox runs at the same time."""
        if self.kill_background:
            self._sweep_alone(self._slot.sweep)

    # -- fallback: docker exec ----------------------------------------------------------------
    def _exec_docker(self, argv, env, stdin, deadline, max_output, flood, user=f"{SANDBOX_UID}:{SANDBOX_GID}",
                     workdir=None):
        for attempt in (1, 2):
            try:
                eid = self._api.exec_create(self.container_id, argv, stdout=True, stderr=True,
                                            stdin=stdin is not None, user=user,
                                            environment=self._env(env), workdir=workdir or self.config.workspace)["Id"]
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
            self._kill_interrupted()
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
                left, stop = execd_client.relay_budget(now, deadline, exited_at)
                if stop:
                    timed_out = stop == "timeout"
                    break
                raw.settimeout(max(0.001, min(left, next_poll - now, 5.0)))
                try:
                    chunk = raw.recv(1 << 16)
                except TimeoutError:
                    if exited_at is None and time.monotonic() >= next_poll:
                        if not self._api.exec_inspect(eid).get("Running"):
                            exited_at = time.monotonic()
                            self._sweep_if_alone()
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
