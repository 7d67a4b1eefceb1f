"""Host-side process probes shared by the sandbox tests (imported as a plain module: tests/ is on sys.path)."""

from __future__ import annotations

import os
import time


def host_procs_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker` (NUL separates argv items)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        out.append(int(d))
            except OSError:
                pass
    return out


def wait_gone(marker: str, timeout: float = 5.0) -> list[int]:
    """Wait up to `timeout` s for every process with `marker` to exit; returns those left."""
    end = time.monotonic() + timeout
    while True:
        left = host_procs_with(marker)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)
