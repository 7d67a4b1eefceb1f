"""clawgym.sandbox.pool.RecyclingPool on its own (hooks that record what they are asked to do; no sandbox is
started): filling, recycling, the caps, failure back-off, settle/idle/stats, close."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from clawgym.sandbox import registry
from clawgym.sandbox.base import SandboxConfig, SandboxError, SandboxFactory
from clawgym.sandbox.local_backend import LocalFactory
from clawgym.sandbox.pool import STATS_KEYS, RecyclingPool


class Item:
    def __init__(self, n: int):
        self.n = n
        self.alive = True
        self.dirty = False


class Handle:
    """A closed sandbox: quiet once `busy` is cleared."""

    def __init__(self):
        self.busy = threading.Event()

    def wait_quiet(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while self.busy.is_set() and time.monotonic() < end:
            time.sleep(0.002)
        return not self.busy.is_set()


class Hooks:
    def __init__(self, fail_creates: int = 0, reset_result=None, sweep_ok: bool = True):
        self.counter = itertools.count()
        self.fail_creates = fail_creates
        self.reset_result = reset_result
        self.sweep_ok = sweep_ok
        self.created, self.destroyed, self.resets, self.create_times = [], [], [], []

    def create(self) -> Item:
        self.create_times.append(time.monotonic())
        if self.fail_creates:
            self.fail_creates -= 1
            raise SandboxError("no start")
        it = Item(next(self.counter))
        self.created.append(it)
        return it

    def reset(self, it: Item):
        self.resets.append(it)
        if isinstance(self.reset_result, Exception):
            raise self.reset_result
        if self.reset_result is None:
            it.dirty = False
        return self.reset_result

    def destroy(self, it: Item) -> None:
        it.alive = False
        self.destroyed.append(it)

    def pool(self, **kw) -> RecyclingPool:
        return RecyclingPool("test", create=self.create, reset=self.reset, destroy=self.destroy,
                             sweep=lambda _it: self.sweep_ok, describe=lambda it: (f"item-{it.n}", f"/x/{it.n}"),
                             **kw)


def test_fills_hands_out_and_recycles():
    h = Hooks()
    p = h.pool(pool_size=2)
    try:
        assert p.warm(10) and len(p.idle()) == 2 and p.stats["created"] == 2
        it = p.get()
        assert it.alive and not it.dirty
        it.dirty = True
        p.give_back(it, Handle())
        assert p.settle(10)
        assert it in h.resets and not it.dirty and ("item-%d" % it.n, "/x/%d" % it.n) in p.idle()
        out = p.get()
        assert out is it  # the most recently returned first
        st = p.stats
        assert set(st) == set(STATS_KEYS) and st["recycled"] == 1 and st["reset_failed"] == 0
    finally:
        p.close()
    # close destroys what is ready; handed-out items are the factory's (its close() closes their sandboxes)
    assert all(not i.alive for i in h.created if i is not out) and out.alive


def test_give_back_waits_for_the_old_handle():
    h = Hooks()
    p = h.pool(pool_size=0, close_wait_s=5)
    try:
        it = p.get()  # no pool: created on demand
        handle = Handle()
        handle.busy.set()
        p.give_back(it, handle)
        time.sleep(0.2)
        assert h.resets == [] and not p.settle(0.05)  # still running: no reset yet
        handle.busy.clear()
        assert p.settle(5) and h.resets == [it]
    finally:
        p.close()


def test_caps_and_failures_destroy_instead_of_pooling():
    h = Hooks()
    p = h.pool(pool_size=0, max_idle=1, max_uses=2, close_wait_s=0.2)
    try:
        a, b = p.get(), p.get()
        p.give_back(a, Handle())
        p.give_back(b, Handle())
        assert p.settle(5) and len(p.idle()) == 1 and p.stats["destroyed"] == 1  # max_idle
        c = p.get()
        p.give_back(c, Handle())  # second use: max_uses reached
        assert p.settle(5) and not c.alive and p.idle() == []
        d = p.get()
        p.give_back(d, Handle(), reusable=False)
        assert p.settle(5) and not d.alive
        h.reset_result = "IPC left"
        e = p.get()
        p.give_back(e, Handle())
        assert p.settle(5) and not e.alive and p.stats["reset_failed"] == 1
        h.reset_result = SandboxError("boom")
        g = p.get()
        p.give_back(g, Handle())
        assert p.settle(5) and not g.alive and p.stats["reset_failed"] == 2
        h.reset_result, h.sweep_ok = None, False
        k = p.get()
        p.give_back(k, Handle())
        assert p.settle(5) and not k.alive and p.stats["reset_failed"] == 3
        busy = Handle()
        busy.busy.set()
        h.sweep_ok = True
        m = p.get()
        p.give_back(m, busy)  # still running after close_wait_s
        assert p.settle(5) and not m.alive and p.stats["reset_failed"] == 4
    finally:
        p.close()


def test_failed_starts_back_off_and_recover():
    h = Hooks(fail_creates=3)
    p = h.pool(pool_size=1, max_starting=1)
    try:
        assert p.warm(10)
        gaps = [b - a for a, b in zip(h.create_times, h.create_times[1:])]
        assert len(gaps) == 3 and gaps[0] >= 0.45 and gaps[1] >= 0.95 and gaps[2] >= 1.9  # 0.5 s, 1 s, 2 s
        assert p.stats["created"] == 1
    finally:
        p.close()


def test_close_stops_the_back_off_and_destroys_late_give_backs():
    h = Hooks(fail_creates=100)
    p = h.pool(pool_size=1)
    p.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    p.close()
    assert time.monotonic() - t0 < 5  # the back-off wait ends with close
    it = Item(99)
    p.give_back(it, Handle())
    assert not it.alive  # a closed pool destroys at once


def test_grow_starts_one_and_doubles_on_demand():
    h = Hooks()
    p = h.pool(pool_size=4, grow=True)
    try:
        p.start()
        time.sleep(0.3)
        assert len(h.created) == 1  # one kept ready at first
        p.get()
        p.get()  # the pool is empty: the target doubles
        end = time.monotonic() + 5
        while len(p.idle()) < 2 and time.monotonic() < end:
            time.sleep(0.01)
        assert len(p.idle()) == 2  # target doubled to 2
    finally:
        p.close()


def test_unpoolable_items_stop_the_filler():
    h = Hooks()
    p = RecyclingPool("test", create=h.create, reset=h.reset, destroy=h.destroy, sweep=lambda _i: True,
                      describe=lambda it: (str(it.n), ""), poolable=lambda _i: False, pool_size=2)
    try:
        p.start()
        end = time.monotonic() + 5
        while p.pool_size and time.monotonic() < end:
            time.sleep(0.01)
        assert p.pool_size == 0 and p.idle() == [] and all(not i.alive for i in h.created)
    finally:
        p.close()


def test_registry_decorator_and_pool_defaults():
    @registry.sandbox_backend("test-local")
    class TestFactory(LocalFactory):
        pass

    try:
        assert "test-local" in registry.backends() and TestFactory.name == "test-local"
        with registry.get_factory("test-local", SandboxConfig(disk_mb=16)) as f:
            assert isinstance(f, TestFactory) and isinstance(f, SandboxFactory)
            assert f.warm(1) and f.settle(1) and f.idle() == [] and f.stats == {}  # no pool: defaults
            with f.open() as s:
                assert s.exec("echo ok").stdout == "ok\n"
        assert registry.resolve_auto() != "test-local"  # not registered for auto
        with pytest.raises(TypeError):
            registry.sandbox_backend("not-a-factory")(object)
    finally:
        registry._registry.pop("test-local", None)
