"""Host side of the in-sandbox exec server (clawgym/sandbox/guest/execd.py), shared by the docker and bwrap
backends: request framing, the output pump (deadline, output cap, flood limit) and short requests.

The pump never kills anything itself: the backend kills host-side (a sweep of the sandbox's cgroup
that spares the server), through the `sweep` callback the pump calls when a command has exited but
something it started still holds its output open.
"""

from __future__ import annotations

import marshal
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from clawgym.sandbox.host.proc import cap_append

OUT, ERR, EXIT, ERROR, STARTED, NOT_STARTED = 1, 2, 3, 4, 5, 6

# the uid/gid of harness services inside a sandbox (`service_exec` of the docker and bwrap backends: e.g. the
# OpenClaw runtime's proxy forwarder): neither the sandbox user (1000) nor root, no capabilities, so the agent
# cannot signal, ptrace or replace them
SERVICE_UID = 1001
SERVICE_GID = 1001


def host_uid(pid: int | None, uid: int) -> int:
    """`uid` inside the user namespace of host process `pid`, as the host sees it (what SO_PEERCRED reports
    to a host socket): mapped through /proc/<pid>/uid_map; `uid` itself when the map cannot be read (no user
    namespace remapping, the default) or does not map it (-1)."""
    if not pid:
        return uid
    try:
        with open(f"/proc/{pid}/uid_map") as f:
            rows = [tuple(int(x) for x in ln.split()) for ln in f if ln.strip()]
    except (OSError, ValueError):
        return uid
    for inside, outside, count in rows:
        if inside <= uid < inside + count:
            return outside + uid - inside
    return -1


def encode(req: dict) -> bytes:
    """One request frame: 4-byte big-endian length + the request in `marshal` format 4."""
    body = marshal.dumps(req, 4)  # execd.py reads marshal (cheaper to import than json in each sandbox)
    return struct.pack(">I", len(body)) + body


def connect(path: str, timeout: float = 5.0) -> socket.socket:
    """A socket connected to the exec server at unix socket `path`."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect(path)
    except BaseException:
        s.close()
        raise
    return s


def feed_stdin(sock: socket.socket, data: bytes) -> threading.Thread:
    """Send `data` then half-close the socket, from a daemon thread (the reader runs meanwhile)."""
    def _feed():
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
    t = threading.Thread(target=_feed, daemon=True)
    t.start()
    return t


STRAGGLER_GRACE_S = 3.0  # how long an exited command's output may stay open before the relay gives up


def relay_budget(now: float, deadline: float, exited_at: float | None) -> tuple[float, str | None]:
    """Seconds left before `deadline`, and why an output relay loop must stop now: "timeout" once the
    deadline has passed, "stragglers" when the command exited (at `exited_at`) over STRAGGLER_GRACE_S ago
    and still no EOF came; None to keep reading."""
    left = deadline - now
    if left <= 0:
        return left, "timeout"
    if exited_at is not None and now - exited_at > STRAGGLER_GRACE_S:
        return left, "stragglers"  # exited and still no EOF: stop waiting for stragglers
    return left, None


@dataclass
class Pumped:
    """What :func:`pump` collected from one exec: output, exit status and how the relay ended."""

    out: bytes
    err: bytes
    truncated: bool
    timed_out: bool
    flooded: bool
    rc: int | None  # None: no exit frame (the handler died, the sandbox went away, or a timeout)
    started: bool  # the command's process existed
    error: str | None  # the server could not serve the request
    # why the server made no process for the command (its NOT_STARTED frame): nothing ran, a retry cannot repeat a
    # side effect. None otherwise; a connection that ended with neither frame may have run the command.
    not_started: str | None = None


def pump(sock: socket.socket, stdin: bytes | None, deadline: float, max_output: int, flood: int,
         sweep: Callable[[], None] | None = None) -> Pumped:
    """Relay one exec's frames until EOF, the deadline or the flood limit; closes `sock`.
    `sweep` is called (once) when the command exited but its output stays open (background jobs)."""
    bufs = {OUT: bytearray(), ERR: bytearray()}
    truncated = timed_out = flooded = started = False
    rc = error = not_started = None
    total = 0
    writer = None
    try:
        if stdin is not None:
            writer = feed_stdin(sock, stdin)
        pending = bytearray()
        exited_at = None
        swept = False
        while True:
            now = time.monotonic()
            left, stop = relay_budget(now, deadline, exited_at)
            if stop:
                timed_out = stop == "timeout"
                break
            if exited_at is not None:
                wait = 0.02 if not swept else 0.1
            else:
                wait = 5.0
            sock.settimeout(max(0.001, min(left, wait)))
            try:
                chunk = sock.recv(1 << 16)
            except TimeoutError:
                if exited_at is not None and not swept:
                    swept = True  # background processes keep the output open: kill them
                    if sweep is not None:
                        sweep()
                continue
            except OSError:
                break
            if not chunk:
                break
            pending += chunk
            pos = 0
            while len(pending) - pos >= 5:
                kind, n = struct.unpack_from(">BI", pending, pos)
                if len(pending) - pos - 5 < n:
                    break
                data = pending[pos + 5:pos + 5 + n]
                pos += 5 + n
                if kind in bufs:
                    total += n
                    if total > flood:
                        truncated = flooded = True
                        break
                    truncated |= cap_append(bufs[kind], data, max_output)
                elif kind == STARTED:
                    started = True
                elif kind == EXIT:
                    rc = struct.unpack(">i", bytes(data))[0]
                    exited_at = time.monotonic()
                elif kind == ERROR:
                    error = bytes(data).decode("utf-8", errors="replace")
                elif kind == NOT_STARTED:
                    not_started = bytes(data).decode("utf-8", errors="replace") or "not started"
            del pending[:pos]
            if flooded:
                break
    finally:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # also wakes a stdin writer blocked in sendall
        except OSError:
            pass
        sock.close()
        if writer is not None:
            writer.join(timeout=1)
    return Pumped(bytes(bufs[OUT]), bytes(bufs[ERR]), truncated, timed_out, flooded, rc, started, error,
                  not_started)


def reset_until_ok(path: str, req: dict, sweep, attempts: int = 3, timeout: float = 10.0) -> tuple[int | None, bytes]:
    """The server's reset op, retried after a sweep when it did not answer rc 0: a sweep that another thread
    runs when its exec ends can kill the reset's handler mid-request. -> (rc, stderr) of the last attempt."""
    rc, msg = None, b""
    for i in range(max(1, attempts)):
        rc, msg = short_request(path, req, timeout)
        if rc == 0:
            break
        if i + 1 < attempts:
            sweep()
    return rc, msg


def short_request(path: str, req: dict, timeout: float = 10.0) -> tuple[int | None, bytes]:
    """A short request to the server (reset, ping): -> (rc or None, stderr + error text)."""
    s = connect(path, timeout)
    try:
        s.sendall(encode(req))
        buf = bytearray()
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None, b"timeout"
            s.settimeout(left)
            b = s.recv(1 << 16)
            if not b:
                break
            buf += b
    except OSError as e:  # the handler was killed mid-request (e.g. by a concurrent sweep): caller may retry
        return None, f"{type(e).__name__}: {e}".encode()
    finally:
        s.close()
    rc, err, pos = None, bytearray(), 0
    while pos + 5 <= len(buf):
        kind, n = struct.unpack_from(">BI", buf, pos)
        data = bytes(buf[pos + 5:pos + 5 + n])
        pos += 5 + n
        if kind == EXIT and len(data) == 4:
            rc = struct.unpack(">i", data)[0]
        elif kind in (ERR, ERROR, OUT, NOT_STARTED):
            err += data
    return rc, bytes(err)
