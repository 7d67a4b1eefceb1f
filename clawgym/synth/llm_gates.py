"""The verifier gates of LLM-route candidates, batched: candidates are generated in many threads, but their
gates run through the same batched in-sandbox drivers as the procedural tasks (clawgym.synth.gates.validate_many:
one sandbox and two fork-server driver runs per batch, not one sandbox per variant).

`GateBatcher.check(task)` blocks the calling candidate thread until its TaskValidation is ready; whenever one of
the `gate_workers` is free, a dispatcher takes every submission queued by then (waiting `wait_s` for more, at most
`max_batch`) into one `validate_many` call — so batches grow with the load. Every LLM task meets the same gates
as a procedural one: compile, no-op 0,
scaffold 0, oracle 1.0 twice (when the spec has reference outputs), mutations lose score, same sub-score keys,
and the hacker gate (clawgym.synth.exploits: no cheap exploit may score above the untouched workspace, i.e. above
0; a candidate one beats goes back for repair).

With a `cache_dir` each non-infra result is stored content-addressed (clawgym.synth.gates.GateCache): a resumed
run re-gates nothing it has gated before, and neither does the `verifiers` asset given the same cache.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from clawgym.synth.exploits import HACK_BOUND
from clawgym.synth.gates import GateCache, TaskValidation, validate_many
from clawgym.tasks.model import Task


def llm_gate_of(v: TaskValidation, has_reference: bool = True) -> str:
    """The first gate a failed validation did not pass (the names of clawgym.synth.pipeline.LLM_GATES)."""
    if v.reason.startswith("infra"):
        return "infra"
    if not v.compiles:
        return "compile"
    if v.noop_score is None or v.noop_score != 0.0:
        return "noop"
    if v.scaffold_score is None or v.scaffold_score != 0.0:
        return "scaffold"
    if has_reference:
        if v.oracle_score is None or abs(v.oracle_score - 1.0) > 1e-9:
            return "oracle"
        if v.oracle_score_2 != v.oracle_score:
            return "determinism"
        if "mutation" in v.reason:
            return "mutation"
    if not v.same_keys:
        return "keys"
    if v.hackable:
        return "hacker"
    return "gates"


class GateBatcher:
    """Batches gate runs of concurrently generated candidates (module docstring). Use as a context manager."""

    def __init__(self, factory: Any, *, hacker: str = "reject", bound: float | None = HACK_BOUND, max_batch: int = 64,
                 wait_s: float = 0.05, gate_workers: int = 2, cache_dir: str | None = None,
                 timeout: float = 600.0, forkserver: bool = True):
        self.factory, self.hacker, self.bound = factory, hacker, bound
        self.max_batch, self.wait_s, self.timeout, self.forkserver = max(1, max_batch), wait_s, timeout, forkserver
        self.cache = GateCache(cache_dir) if cache_dir else None
        self.stats = {"gated": 0, "batches": 0, "cache_hits": 0}
        self._lock = threading.Lock()
        self._q: queue.Queue = queue.Queue()
        self._pool = ThreadPoolExecutor(max(1, gate_workers), thread_name_prefix="llm-gates")
        self._slots = threading.Semaphore(max(1, gate_workers))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._dispatch, name="llm-gate-dispatch", daemon=True)
        self._thread.start()

    def __enter__(self) -> GateBatcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the dispatcher after the queued work is done."""
        self._stop.set()
        self._q.put(None)
        self._thread.join()
        self._pool.shutdown(wait=True)

    def check(self, task: Task) -> TaskValidation:
        """The gate verdict of `task` (from the cache, or from the next batch)."""
        if self.cache is not None:
            hit = self.cache.get(task, self.hacker, self.bound)
            if hit is not None:
                with self._lock:
                    self.stats["cache_hits"] += 1
                return hit
        fut: Future = Future()
        self._q.put((task, fut))
        return fut.result()

    def _dispatch(self) -> None:
        # a batch is formed only when a gate worker is free, from everything queued by then (up to max_batch):
        # batches grow with the load instead of queueing up small, each paying its own sandbox and driver start
        while True:
            self._slots.acquire()
            item = self._q.get()
            if item is None:
                self._slots.release()
                return
            batch = [item]
            deadline = time.monotonic() + self.wait_s
            while len(batch) < self.max_batch:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        nxt = self._q.get(timeout=left)
                    except queue.Empty:
                        break
                if nxt is None:
                    self._q.put(None)  # seen again by the outer loop after this batch
                    break
                batch.append(nxt)
            self._pool.submit(self._run, batch)

    def _run(self, batch: list[tuple[Task, Future]]) -> None:
        try:
            self._gate(batch)
        finally:
            self._slots.release()

    def _gate(self, batch: list[tuple[Task, Future]]) -> None:
        tasks = [t for t, _ in batch]
        try:
            vals = validate_many(tasks, self.factory, workers=1, chunk=len(tasks), timeout=self.timeout,
                                 forkserver=self.forkserver, hacker=self.hacker, bound=self.bound)
        except BaseException as e:  # validate_many records per-task infra itself; this is a last resort
            for _, fut in batch:
                fut.set_exception(e)
            return
        with self._lock:
            self.stats["gated"] += len(tasks)
            self.stats["batches"] += 1
        for (task, fut), v in zip(batch, vals):
            if self.cache is not None:
                self.cache.put(task, v, self.hacker)
            fut.set_result(v)


__all__ = ["GateBatcher", "llm_gate_of"]
