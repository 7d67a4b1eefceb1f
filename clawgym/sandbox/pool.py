"""The recycling pool behind the isolating backends (docker, bwrap): one implementation, parameterised by what
a backend does to create, reset and destroy one started sandbox ("item": a docker container slot, a bwrap
server-mode sandbox).

* ready items wait in the pool (at most `max_idle`); `get()` takes the most recently returned one (warm
  caches), waits up to 5 s for one on its way (being started, or closed and being reset: sooner than a
  fresh start), else creates one itself;
* a filler thread keeps `pool + starting + coming back >= target` with at most `max_starting` starts in
  flight (a start is mostly waiting, so starts overlap well even on 2 cores), and never starts one while the
  pool's items -- those handed out included -- number `pool_size` already: a handed-out item comes back
  reset in milliseconds, a start costs a whole sandbox (bwrap ~80 ms of CPU, docker a container through the
  engine), so starting ahead of items that are only out for one rollout made W workers on a pool of W start
  W more sandboxes and destroy the surplus when they came back (at pool 8 on 2 cores that churn ate more CPU
  than the rollouts: docker's throughput fell below pool 1's). `target` begins at `pool_size`
  (`grow=False`) or at 1 and doubles up to `pool_size` each time get() finds the pool empty (`grow=True`: a
  one-off open() wastes at most one start); `warm()` sets it to `pool_size` and waits. More callers at once
  than `pool_size` still get sandboxes: get() makes one itself when none is ready or on its way. A failed
  start backs off (0.5 s, 1 s, 2 s, ... up to 30 s, interrupted by close) and get() reports its own error;
* `give_back(item, handle, reusable)`: a closed sandbox's item goes to the reaper thread, which waits until
  the old handle is quiet (sweeping its processes meanwhile, up to `close_wait_s`), resets it and puts it
  back (or destroys it: not reusable, used `max_uses` times, reset failed, pool full, factory closed);
* `settle()`, `idle()`, `stats`, `close()`: see each. Stats keys (STATS_KEYS): created, recycled, destroyed,
  reset_failed.

Items carry an int attribute `uses` (how often they were handed out and closed); the pool counts it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from clawgym.sandbox.base import Sandbox, SandboxError, SandboxFactory
from clawgym.sandbox.host import cleanup

log = logging.getLogger(__name__)

T = TypeVar("T")

STATS_KEYS = ("created", "recycled", "destroyed", "reset_failed")
MAX_BACKOFF_S = 30.0


class RecyclingPool(Generic[T]):
    """Hooks (called without the pool's lock held):
      create() -> item                  start a fresh one (raises on failure)
      reset(item) -> None | str         back to the state of a fresh one; a string (or an exception) says why
                                        it cannot be reused
      destroy(item)                     tear it down (never raises for an item that is already gone)
      sweep(item) -> bool               kill what the old handle's commands left running (False: impossible)
      describe(item) -> (key, host dir) for idle()
      poolable(item) -> bool            a fresh item the filler made may be pooled (False: the filler stops and
                                        destroys it, e.g. bwrap without server mode)
    Handles (the sandboxes handed out) need `wait_quiet(timeout) -> bool` (CountedHostFileMixin)."""

    def __init__(self, name: str, *, create: Callable[[], T], reset: Callable[[T], str | None],
                 destroy: Callable[[T], None], sweep: Callable[[T], bool],
                 describe: Callable[[T], tuple[str, str]], poolable: Callable[[T], bool] = lambda _i: True,
                 pool_size: int = 2, max_idle: int | None = None, max_uses: int = 200, max_starting: int = 4,
                 close_wait_s: float = 10.0, grow: bool = False):
        self.name = name
        self._create, self._reset_hook, self._destroy_hook = create, reset, destroy
        self._sweep, self._describe, self._poolable = sweep, describe, poolable
        self.pool_size = max(0, int(pool_size))
        self.max_idle = max(self.pool_size, int(max_idle if max_idle is not None else max(8, self.pool_size)))
        self.max_uses = int(max_uses)
        self.max_starting = max(1, int(max_starting))
        self.close_wait_s = float(close_wait_s)
        self._cv = threading.Condition()
        self._closed = False
        self._ready: list[T] = []
        self._target = 1 if grow else self.pool_size
        self._starting = 0  # starts in flight for the pool
        self._failures = 0  # pool starts that failed in a row (back-off)
        self._queue: list[tuple[T, object, bool]] = []  # (item, closed handle, reusable?)
        self._busy = 0  # items the reaper holds right now
        self._coming = 0  # reusable items queued or being reset: may come back to the pool
        self._out = 0  # items handed out by get() and not given back yet
        self._stats = dict.fromkeys(STATS_KEYS, 0)
        self._filler: threading.Thread | None = None
        self._reaper: threading.Thread | None = None

    # -- counting wrappers -----------------------------------------------------------------------
    def create(self) -> T:
        """A fresh item (counted in stats["created"]); not pooled."""
        item = self._create()
        with self._cv:
            self._stats["created"] += 1
        return item

    def destroy(self, item: T) -> None:
        try:
            self._destroy_hook(item)
        except Exception as e:  # pragma: no cover - logged; cleanup finds leftovers later
            log.warning("%s pool: destroy failed: %s", self.name, e)
        with self._cv:
            self._stats["destroyed"] += 1

    @property
    def stats(self) -> dict[str, int]:
        with self._cv:
            return dict(self._stats)

    @property
    def closed(self) -> bool:
        return self._closed

    # -- handing out -------------------------------------------------------------------------------
    def get(self) -> T:
        """A ready item, one on its way (waited for up to 5 s), or a fresh one."""
        self.start()
        item = None
        with self._cv:
            if not self._ready:  # demand outruns the pool: keep more ready
                self._target = min(max(1, self.pool_size), self._target * 2)
                self._cv.notify_all()
            end = time.monotonic() + 5.0
            while not self._ready and self._ready_soon() and not self._closed and time.monotonic() < end:
                self._cv.wait(0.05)
            if self._ready:
                item = self._ready.pop()  # the most recently returned: warm caches
                self._cv.notify_all()
            self._out += 1
        if item is not None:
            return item
        try:
            return self.create()
        except BaseException:
            with self._cv:
                self._out -= 1
                self._cv.notify_all()
            raise

    def untrack(self) -> None:
        """The item get() just handed out will never be given back (its factory tears it down itself): not counted
        among the pool's items any more, so the filler may start another."""
        with self._cv:
            self._out = max(0, self._out - 1)
            self._cv.notify_all()

    def _ready_soon(self) -> int:
        """Items ready or on their way (being started, or closed and being reset). Under self._cv."""
        return len(self._ready) + self._starting + self._coming

    # -- recycling ---------------------------------------------------------------------------------
    def give_back(self, item: T, handle, reusable: bool = True) -> None:
        """`handle` (the sandbox that held `item`) was closed: reset and pool the item in the background, or
        destroy it. Once the pool is closed it is destroyed here, before this returns."""
        counted: Any = item  # items carry an int `uses` (set here on their first return)
        counted.uses = uses = getattr(counted, "uses", 0) + 1
        with self._cv:
            self._out = max(0, self._out - 1)
            closed = self._closed
            if not closed:
                ok = bool(reusable) and uses < self.max_uses
                self._queue.append((item, handle, ok))
                self._coming += ok
                if self._reaper is None or not self._reaper.is_alive():
                    self._reaper = threading.Thread(target=self._reap_loop, name=f"clawgym-{self.name}-reaper",
                                                    daemon=True)
                    try:
                        self._reaper.start()
                    except RuntimeError:  # no new threads at interpreter exit: close() destroys it
                        self._reaper = None
                self._cv.notify_all()
        if closed:
            self.destroy(item)

    def _reap_loop(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait(1.0)
                if not self._queue:
                    return
                item, handle, ok = self._queue.pop(0)
                self._busy += 1
            back = False
            try:
                back = ok and not self._closed and self._recycle(item, handle)
            except Exception as e:  # noqa: BLE001
                self._failed(item, f"{type(e).__name__}: {e}")
            if back:
                with self._cv:
                    back = not self._closed and len(self._ready) < self.max_idle
                    if back:
                        self._ready.append(item)
                        self._stats["recycled"] += 1
            if not back:
                self.destroy(item)
            with self._cv:
                self._busy -= 1
                self._coming -= ok
                self._cv.notify_all()

    def _recycle(self, item: T, handle) -> bool:
        end = time.monotonic() + self.close_wait_s
        while True:  # nothing of the old handle runs, and its calls have all returned
            if not self._sweep(item):
                return self._failed(item, "processes could not be swept")
            if handle is None or handle.wait_quiet(0.01):
                break
            if time.monotonic() > end:
                return self._failed(item, "a command was still running")
        why = self._reset_hook(item)
        return self._failed(item, why) if why else True

    def _failed(self, item: T, why: str) -> bool:
        log.info("%s sandbox %s is not reused: %s", self.name, self._describe(item)[0], why)
        with self._cv:
            self._stats["reset_failed"] += 1
        return False

    # -- filling -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the filler thread (once; nothing to do with pool_size 0)."""
        with self._cv:
            if self._filler is None and self.pool_size and not self._closed:
                self._filler = threading.Thread(target=self._fill_loop, name=f"clawgym-{self.name}-pool",
                                                daemon=True)
                self._filler.start()

    def _fill_loop(self) -> None:
        while True:
            with self._cv:
                while not self._closed and self.pool_size and (self._ready_soon() >= self._target
                                                               or self._starting >= self.max_starting
                                                               or self._ready_soon() + self._out >= self.pool_size):
                    self._cv.wait()
                if self._closed or not self.pool_size:
                    return
                self._starting += 1
            threading.Thread(target=self._start_one, name=f"clawgym-{self.name}-start", daemon=True).start()

    def _start_one(self) -> None:
        item = None
        try:
            item = self.create()
        except Exception as e:  # noqa: BLE001 - get() starts its own and reports the error
            with self._cv:
                self._failures += 1
                delay = min(MAX_BACKOFF_S, 0.5 * 2 ** (self._failures - 1))
            log.warning("%s pool: %s (next start in %.1f s)", self.name, e, delay)
            with self._cv:
                self._cv.wait_for(lambda: self._closed, timeout=delay)
        poolable = False
        if item is not None:
            try:
                poolable = self._poolable(item)
            except Exception as e:  # noqa: BLE001
                log.warning("%s pool: %s", self.name, e)
        with self._cv:
            if item is not None and not poolable:  # e.g. no server mode here: a pool would hold idle dirs
                self.pool_size = 0
            keep = poolable and not self._closed
            if keep and item is not None:  # (poolable: there is an item)
                self._ready.append(item)
                self._failures = 0
        if item is not None and not keep:
            self.destroy(item)  # still counted as starting: close() waits for it
        with self._cv:
            self._starting -= 1
            self._cv.notify_all()

    # -- pool operations (SandboxFactory.warm/settle/idle) -----------------------------------------
    def warm(self, timeout: float = 60.0) -> bool:
        """Wait until `pool_size` items are ready, less those handed out (the filler makes no more)."""
        with self._cv:
            self._target = self.pool_size
        self.start()
        end = time.monotonic() + timeout
        with self._cv:
            while len(self._ready) + self._out < self.pool_size and not self._closed:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(min(left, 0.05))
            return len(self._ready) + self._out >= self.pool_size

    def settle(self, timeout: float = 60.0) -> bool:
        """Wait until every item given back has been reset or destroyed."""
        end = time.monotonic() + timeout
        with self._cv:
            while self._queue or self._busy:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(min(left, 0.05))
        return True

    def idle(self) -> list[tuple[str, str]]:
        with self._cv:
            return [self._describe(i) for i in self._ready]

    def close(self, before_join: Callable[[], None] | None = None) -> None:
        """Stop filling and recycling; `before_join` (closing the handed-out sandboxes: their items are
        destroyed at once) runs after the pool is marked closed. Waits for the threads; every item ready,
        queued or being started is destroyed before this returns."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if before_join is not None:
            before_join()
        me = threading.current_thread()
        for t, wait_s in ((self._reaper, 120), (self._filler, 60)):
            if t is not None and t is not me:
                t.join(timeout=wait_s)
        with self._cv:  # starts still running destroy what they made (pool closed)
            end = time.monotonic() + 30
            while self._starting and time.monotonic() < end:
                self._cv.wait(0.05)
            items = self._ready + [q[0] for q in self._queue]
            self._ready, self._queue = [], []
        # a few at a time (plain threads: this also runs at interpreter exit, where an executor cannot be made)
        while items:
            batch, items = items[:4], items[4:]
            ts = []
            for item in batch[1:]:
                t = threading.Thread(target=self.destroy, args=(item,), daemon=True)
                try:
                    t.start()
                    ts.append(t)
                except RuntimeError:
                    self.destroy(item)
            self.destroy(batch[0])
            for t in ts:
                t.join()


class PooledFactory(SandboxFactory):
    """A SandboxFactory whose sandboxes come from a RecyclingPool (`self.pool`, made by the subclass's
    __init__). Subclasses implement `_handle(item)`: a new sandbox around a pooled item (its close() calls
    `self.pool.give_back(item, sandbox, reusable)`)."""

    pool: RecyclingPool

    def _handle(self, item) -> Sandbox:
        raise NotImplementedError

    def open(self, files: Iterable = ()) -> Sandbox:
        if self.pool.closed:
            raise SandboxError("factory is closed")
        return self._adopt(self._handle(self.pool.get()), files)

    def close(self) -> None:
        """Handed-out sandboxes are torn down at once; waits for the pool's threads: no process, container,
        mount, cgroup or temp dir outlives it."""
        self._close_rooms()
        self.pool.close(before_join=self._close_adopted)
        cleanup.unregister(self)

    def warm(self, timeout: float = 60.0) -> bool:
        return self.pool.warm(timeout)

    def settle(self, timeout: float = 60.0) -> bool:
        return self.pool.settle(timeout)

    def idle(self) -> list[tuple[str, str]]:
        return self.pool.idle()

    @property
    def stats(self) -> dict[str, int]:
        return self.pool.stats
