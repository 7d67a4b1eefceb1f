"""One engine per model in a process: running ModelServers shared by everything that serves the same model folder
with the same settings, reference-counted, and started ahead of need.

    with hold("data/models/smollm2-135m-instruct", device="cpu") as srv:   # starts it, or joins the running one
        ...
    w = warm("data/models/smollm2-135m-instruct", device="cpu")           # start it now, in the background
    ...                                                                 # (synthesis, SFT: the engine compiles)
    with hold(...same...) as srv:                                       # joins it: no second start
        ...
    w.release()                                                         # the last holder out stops it

A vLLM start costs tens of seconds (more the first time, when it compiles the model graph), so a run that serves one
model in several steps (the bench of a checkpoint, the judge, the LLM route's roles) starts its engine once.
`warm` lets a run start the engine while it does other work, and keep it until it says so. The servers are looked up
as ``clawgym.serve.ModelServer`` at start, so a caller that swaps the class (a test) is honoured.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

STARTS: dict[str, int] = {}  # key -> how many times its engine was started in this process


class _Entry:
    def __init__(self) -> None:
        self.lock = threading.Lock()  # held while the server starts / stops
        self.refs = 0
        self.server: Any = None


_ENGINES: dict[str, _Entry] = {}
_LOCK = threading.Lock()


def engine_key(model_dir: str, **kwargs: Any) -> str:
    """The identity of an engine: the model folder and every server setting (two callers share an engine only when
    it would have been started the same way for both)."""
    from pathlib import Path

    return json.dumps([str(Path(model_dir).resolve()), kwargs], sort_keys=True, default=str)


@contextlib.contextmanager
def hold(model_dir: str, **kwargs: Any) -> Iterator[Any]:
    """A started ModelServer(model_dir, **kwargs) for the block: the running one of this key if there is one, else a
    new one; the last holder out stops it, also when the block raises. A failed start is raised to every holder that
    waited for it, and the next holder tries again."""
    from clawgym import serve

    key = engine_key(model_dir, **kwargs)
    with _LOCK:
        entry = _ENGINES.setdefault(key, _Entry())
        entry.refs += 1
    try:
        with entry.lock:
            if entry.server is None:
                srv = serve.ModelServer(model_dir, **kwargs)
                srv.start()  # stops itself when the start fails
                entry.server = srv
                STARTS[key] = STARTS.get(key, 0) + 1
        yield entry.server
    finally:
        with _LOCK:
            entry.refs -= 1
            last = entry.refs == 0
            if last and _ENGINES.get(key) is entry:
                del _ENGINES[key]
        if last:
            with entry.lock:
                srv, entry.server = entry.server, None
                if srv is not None:
                    srv.stop()


class Warm:
    """An engine started in the background (`warm`) and held until `release`. `wait()` blocks until it is up and
    returns the server (or raises what its start raised)."""

    def __init__(self, model_dir: str, **kwargs: Any) -> None:
        self.key = engine_key(model_dir, **kwargs)
        self._started = threading.Event()
        self._release = threading.Event()
        self.server: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(model_dir, kwargs), daemon=True,
                                        name="clawgym-engine-warm")
        self._thread.start()

    def _run(self, model_dir: str, kwargs: dict) -> None:
        try:
            with hold(model_dir, **kwargs) as srv:
                self.server = srv
                self._started.set()
                self._release.wait()
        except BaseException as e:  # the start failed: a later holder starts its own engine
            self.error = e
        finally:
            self._started.set()

    def wait(self, timeout: float | None = None) -> Any:
        if not self._started.wait(timeout):
            raise TimeoutError(f"engine not started after {timeout}s")
        if self.error is not None:
            raise self.error
        return self.server

    def release(self, timeout: float | None = 60.0) -> None:
        """Drop this hold (the engine stops unless another holder has it); waits for the stop."""
        self._release.set()
        self._thread.join(timeout)

    def __enter__(self) -> Warm:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def warm(model_dir: str, **kwargs: Any) -> Warm:
    """Start ModelServer(model_dir, **kwargs) now, in a background thread, and hold it until `.release()`: a later
    `hold` of the same key joins it (waiting for the start to finish) instead of starting another."""
    return Warm(model_dir, **kwargs)


def running() -> dict[str, int]:
    """The engines alive now: key -> holders."""
    with _LOCK:
        return {k: e.refs for k, e in _ENGINES.items() if e.server is not None}


__all__ = ["hold", "warm", "Warm", "running", "engine_key", "STARTS"]
