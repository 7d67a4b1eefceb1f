"""Host processes with a deadline and capped output (bwrap's per-exec mode, the local backend), and the output
caps shared by every exec path.

* `run_capture`: run argv in its own session; stdout/stderr capped, the rest read and dropped; on timeout the
  whole process group is SIGKILLed (plus an extra kill, e.g. a cgroup sweep) and rc=124.
* `cap_append`, `flood_limit`: how much output is kept, and after how much a command is killed.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


def cap_append(buf: bytearray, data, max_output: int) -> bool:
    """Append to `buf` what fits under `max_output` bytes; -> True when something was dropped."""
    space = max_output - len(buf)
    if space > 0:
        buf += data[:space]
    return len(data) > space


def flood_limit(max_output: int) -> int:
    """Total output after which a command is killed (its output beyond max_output is dropped
    anyway): max(64 MiB, 4 x max_output). Keeps `yes` or a 1 GB dump from running for minutes."""
    return max(64 << 20, 4 * int(max_output))


@dataclass
class Captured:
    """Result of :func:`run_capture`: exit status, capped raw output, timeout/truncation flags, duration."""

    rc: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    truncated: bool
    duration_s: float


def run_capture(argv: list[str], *, env: dict[str, str] | None, cwd: str | None, timeout: float,
                stdin: bytes | None, max_output: int,
                on_timeout: Callable[[subprocess.Popen], None] | None = None,
                pass_fds: tuple[int, ...] = ()) -> Captured:
    """Run argv in its own session; stdout/stderr each capped at max_output bytes (the rest is
    read and dropped, so a huge output never blows memory). On timeout the whole process group is
    SIGKILLed (plus `on_timeout`, e.g. a cgroup kill) and rc=124."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, start_new_session=True, pass_fds=pass_fds,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None  # both are pipes (stdout=PIPE, stderr=PIPE)
    writer = _start_feeder(proc, stdin) if stdin is not None else None
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    flood = flood_limit(max_output)
    deadline = t0 + timeout
    sel = selectors.DefaultSelector()
    for f in (proc.stdout, proc.stderr):
        os.set_blocking(f.fileno(), False)
        sel.register(f.fileno(), selectors.EVENT_READ)
    try:
        timed_out, flooded, truncated = _drain(sel, bufs, deadline, flood, max_output)
        if flooded:
            _kill(proc, on_timeout)
        elif not timed_out:
            # both pipes are closed, yet the command may still run (it can close its output and go on)
            left = deadline - time.monotonic()
            try:
                proc.wait(timeout=max(left, 0.001))
            except subprocess.TimeoutExpired:
                timed_out = True
    except BaseException:
        _kill(proc, on_timeout)  # an error or an interrupt here must not leave the command running
        raise
    finally:
        sel.close()
    if timed_out:
        _kill(proc, on_timeout)
    rc = proc.returncode if not timed_out else 124
    if rc is not None and rc < 0:
        rc = 128 - rc  # killed by a signal: report it the way a shell does
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    out, err = bytes(bufs[out_fd]), bytes(bufs[err_fd])
    for f in (proc.stdout, proc.stderr):
        f.close()
    if writer is not None:
        writer.join(timeout=1)
    return Captured(rc=rc, stdout=out, stderr=err, timed_out=timed_out, truncated=truncated,
                    duration_s=time.monotonic() - t0)


def _start_feeder(proc: subprocess.Popen, stdin: bytes) -> threading.Thread:
    """Write `stdin` to the command and close its stdin, from a daemon thread: a command that does not read
    its input must not block the reading of its output (a full pipe both ways would deadlock)."""
    def _feed():
        try:
            proc.stdin.write(stdin)
        except (BrokenPipeError, OSError, ValueError):
            pass
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass
    writer = threading.Thread(target=_feed, daemon=True)
    writer.start()
    return writer


def _drain(sel: selectors.BaseSelector, bufs: dict[int, bytearray], deadline: float, flood: int,
           max_output: int) -> tuple[bool, bool, bool]:
    """Read the pipes registered in `sel` until all are closed, keeping at most max_output bytes of each in
    `bufs` (the rest is read and dropped). Stops early at the deadline, or once more than `flood` bytes came
    in all. -> (timed_out, flooded, truncated)."""
    truncated = False
    timed_out = flooded = False
    total = 0
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if flooded:
            break
        for key, _ in sel.select(timeout=min(left, 1.0)):
            fd = key.fd
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                sel.unregister(fd)
                continue
            total += len(chunk)
            if total > flood:
                truncated = flooded = True
                break
            truncated |= cap_append(bufs[fd], chunk, max_output)
    return timed_out, flooded, truncated


def _kill(proc: subprocess.Popen, extra: Callable[[subprocess.Popen], None] | None) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if extra is not None:
        try:
            extra(proc)
        except Exception as e:  # pragma: no cover
            log.warning("extra kill failed: %s", e)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        proc.kill()
        proc.wait()
