"""Start child processes from one long-lived thread.

PR_SET_PDEATHSIG (bwrap's --die-with-parent, `prctl` in a preexec_fn) fires when the *thread* that forked
the child exits, not the process: a child started from a short-lived worker thread (a Dagster step's thread
pool, a ThreadPoolExecutor, a sandbox pool's start thread) would be killed as soon as that thread finished.
So every such fork happens on one daemon thread that lives as long as the process.

    p = spawn(lambda: subprocess.Popen(argv, ...))     # any callable, run on the spawner thread
    p = popen_die_with_parent(argv, stdout=...)         # Popen whose child gets SIGTERM when this process dies
"""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")

_queue: queue.SimpleQueue | None = None
_lock = threading.Lock()


def _loop(q: queue.SimpleQueue) -> None:
    while True:
        fn, fut = q.get()
        if fut.set_running_or_notify_cancel():
            try:
                fut.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                fut.set_exception(e)


def spawn(fn: Callable[[], T]) -> T:
    """Run `fn` (which forks: Popen, …) on the process's one spawner thread and return its result (or raise
    its exception) here."""
    global _queue
    with _lock:
        if _queue is None:
            _queue = queue.SimpleQueue()
            threading.Thread(target=_loop, args=(_queue,), name="clawgym-spawner", daemon=True).start()
        q = _queue
    fut: Future = Future()
    q.put((fn, fut))
    return fut.result()


def die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM when the parent dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except Exception:  # pragma: no cover
        pass


def popen_die_with_parent(argv: list[str], **kwargs) -> subprocess.Popen:
    """`subprocess.Popen` whose child gets SIGTERM when this process dies (even by SIGKILL), forked on the
    spawner thread so the death signal is tied to the process, not to the calling thread."""
    return spawn(lambda: subprocess.Popen(argv, preexec_fn=die_with_parent, **kwargs))
