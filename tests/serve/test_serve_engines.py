"""One engine per model in a process (clawgym.serve.engines): holders of the same model folder and settings share
one started server, the last one out stops it, a warm engine is joined instead of started twice, a failed start
reaches every holder waiting for it and the next holder starts afresh; a kind "local" endpoint holds its engine.
The servers here are a stand-in with ModelServer's interface that counts its starts and stops (no engine)."""

from __future__ import annotations

import threading
import time

import pytest

from clawgym.serve import engines


class CountingServer:
    starts: list[str] = []
    stops: list[str] = []
    fail_next = 0
    start_s = 0.0

    def __init__(self, model_dir, **kwargs):
        self.model_dir, self.kwargs, self.up = str(model_dir), kwargs, False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:1/v1#{self.model_dir}"

    model_name = property(lambda self: self.model_dir)

    def start(self) -> str:
        time.sleep(self.start_s)
        if CountingServer.fail_next:
            CountingServer.fail_next -= 1
            raise RuntimeError("engine exited with 1")
        self.up = True
        self.starts.append(self.model_dir)
        return self.base_url

    def stop(self) -> None:
        if self.up:
            self.up = False
            self.stops.append(self.model_dir)


@pytest.fixture
def counting(monkeypatch, tmp_path):
    import clawgym.serve as serve

    CountingServer.starts, CountingServer.stops, CountingServer.fail_next, CountingServer.start_s = [], [], 0, 0.0
    monkeypatch.setattr(serve, "ModelServer", CountingServer)
    yield CountingServer
    assert engines.running() == {}


def test_holders_of_one_model_share_one_engine(counting, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    with engines.hold(a, device="cpu") as s1:
        with engines.hold(a, device="cpu") as s2, engines.hold(b, device="cpu") as s3:
            assert s1 is s2 and s3 is not s1
            with engines.hold(a, device="cpu", dtype="float32") as s4:  # other settings: another engine
                assert s4 is not s1
            assert counting.starts == [a, b, a]
        assert counting.stops == [a, b] and s1.up  # the float32 one and b; a still held
    assert counting.stops == [a, b, a] and not s1.up


def test_a_warm_engine_is_joined_not_started_again(counting, tmp_path):
    a = str(tmp_path / "a")
    counting.start_s = 0.3
    w = engines.warm(a, device="cpu")
    time.sleep(0.05)  # the warm start is under way: the holder below waits for it
    with engines.hold(a, device="cpu") as srv:
        assert srv is w.wait(5) and srv.up
    assert counting.starts == [a] and counting.stops == []  # the warm hold keeps it
    w.release()
    assert counting.stops == [a]


def test_a_failed_start_reaches_its_waiters_and_the_next_holder_retries(counting, tmp_path):
    a = str(tmp_path / "a")
    counting.start_s, counting.fail_next = 0.2, 1
    w = engines.warm(a)
    time.sleep(0.05)
    with engines.hold(a) as srv:  # the warm start fails; this holder, waiting, starts its own
        assert srv.up
    with pytest.raises(RuntimeError, match="exited with 1"):
        w.wait(5)
    w.release()
    assert counting.starts == [a] and counting.stops == [a]
    counting.fail_next = 1
    errors = []

    def holder():
        try:
            with engines.hold(a):
                pass
        except RuntimeError as e:
            errors.append(e)

    t = threading.Thread(target=holder)
    t.start()
    t.join(5)
    assert len(errors) == 1 and engines.running() == {}


def test_a_local_endpoint_holds_the_warm_engine(counting, tmp_path):
    """open_endpoint of a kind "local" spec joins the engine warm_engine started for the same spec."""
    from clawgym.agent.policies import PolicySpec, open_endpoint, warm_engine

    m = str(tmp_path / "m")
    spec = PolicySpec(name="base", kind="local", model=m, extra={"model_path": m, "device": "cpu"})
    w = warm_engine(spec)
    srv = w.wait(5)
    for _ in range(2):  # two benches in a row: no second start
        with open_endpoint(spec) as ep:
            assert ep.base_url == srv.base_url.rstrip("/") and ep.tokenizer == m
    assert counting.starts == [m] and counting.stops == []
    w.release()
    assert counting.stops == [m]
    with pytest.raises(ValueError, match="only kind 'local'"):
        warm_engine(PolicySpec(name="o", kind="oracle", model="oracle"))
