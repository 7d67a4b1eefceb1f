"""When the host runs a command again, and when it must not (docker and bwrap exec servers).

The exec server says NOT_STARTED when it could make no process for a command (the pids limit): nothing ran, so the
host clears the sandbox and retries. A connection that ends with no STARTED and no NOT_STARTED may have run the
command (its handler was killed right after the start, which a command can do to its own handler on bwrap): the host
must not run it a second time. And a sweep (every process but the server killed) never hits a command another
thread has just started.

The lost race is played by a relay between the host and the real server that drops the server's reply (the command
ran, the host hears nothing); the pids limit and the sweeps are real.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import marshal
import socket
import struct
import threading
import time

import pytest

from clawgym.sandbox.base import SandboxError
from clawgym.sandbox.guest import execd
from clawgym.sandbox.host import execd_client

BACKENDS = ["docker_factory", "bwrap_factory"]


def _recv_all(sock: socket.socket) -> bytes:
    buf = bytearray()
    while True:
        b = sock.recv(1 << 16)
        if not b:
            return bytes(buf)
        buf += b


def _read_request(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    n = struct.unpack(">I", head)[0]
    body = b""
    while len(body) < n:
        body += sock.recv(n - len(body))
    return head + body


class Relay:
    """`execd_client.connect` in front of the real one: each exec request goes through a relay that plays the next
    of `plan` ("drop": the real server runs it and its whole reply is dropped; "not_started": the server's refusal,
    without reaching it), then passes the rest through unchanged. `execs` counts the exec requests seen."""

    def __init__(self, monkeypatch, plan: list[str]) -> None:
        self.real = execd_client.connect
        self.plan = list(plan)
        self.execs = 0
        self._lock = threading.Lock()
        monkeypatch.setattr(execd_client, "connect", self.connect)

    def connect(self, path: str, timeout: float = 5.0) -> socket.socket:
        host, peer = socket.socketpair()
        threading.Thread(target=self._serve, args=(peer, path, timeout), daemon=True).start()
        return host

    def _serve(self, peer: socket.socket, path: str, timeout: float) -> None:
        with peer:
            req = _read_request(peer)
            op = marshal.loads(req[4:]).get("op", "exec")
            with self._lock:
                act = self.plan.pop(0) if op == "exec" and self.plan else "pass"
                self.execs += op == "exec"
            if act == "not_started":
                peer.sendall(struct.pack(">BI", 6, 5) + b"fork!")
                return
            real = self.real(path, timeout)
            with real:
                real.sendall(req)
                real.settimeout(30)
                reply = _recv_all(real)  # the command has run to its end
            if act == "pass":
                peer.sendall(reply)
            # "drop": the host hears nothing at all, as when the handler dies before its STARTED frame


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_command_that_may_have_run_is_not_run_again(backend, request, monkeypatch):
    """The server ran the command and the host heard no frame: one run, reported as killed, not three runs and
    an infrastructure error (a side effect repeated, then the exec blamed on the sandbox)."""
    factory = request.getfixturevalue(backend)
    with factory.open() as s:
        relay = Relay(monkeypatch, ["drop"])
        r = s.exec("echo run >> count")
        monkeypatch.undo()
        assert relay.execs == 1
        assert s.read_file("count") == b"run\n"
        assert r.rc != 0 and r.stdout == ""
        assert s.exec("echo again").stdout == "again\n"  # the sandbox goes on


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_command_never_started_is_retried(backend, request, monkeypatch):
    factory = request.getfixturevalue(backend)
    with factory.open() as s:
        relay = Relay(monkeypatch, ["not_started", "not_started"])
        r = s.exec("echo run >> count; echo ok")
        assert (r.rc, r.stdout, relay.execs) == (0, "ok\n", 3)
        assert s.read_file("count") == b"run\n"
        relay.plan = ["not_started"] * 3
        with pytest.raises(SandboxError, match="exec failed: fork!"):
            s.exec("echo run >> count")
        monkeypatch.undo()
        assert s.read_file("count") == b"run\n"


def test_the_handler_says_not_started_when_it_cannot_fork(monkeypatch):
    """The server's side: no process for the command -> a NOT_STARTED frame with the reason, in the handler (the
    command's start) and in the server's loop (the handler's own fork)."""
    def no_fork(*_a, **_k):
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(execd, "_start", no_fork)
    a, b = socket.socketpair()
    with a, b:
        execd._run(a, {"op": "exec", "argv": ["true"]})
        a.shutdown(socket.SHUT_WR)
        assert _recv_all(b) == struct.pack(">BI", 6, 38) + b"fork: Resource temporarily unavailable"
    a, b = socket.socketpair()
    with b:
        b.sendall(execd_client.encode({"op": "exec", "argv": ["true"]}))  # read before the refusal
        execd._refuse(a, "fork: no")
        assert _recv_all(b) == struct.pack(">BI", 6, 8) + b"fork: no"
    assert a.fileno() == -1  # closed by _refuse


def test_pids_limit_names_its_reason(bwrap_factory):
    """A real pids limit: while another exec's processes hold every pid, an exec fails as "exec failed: fork: …"
    after its retries (nothing ran), and once they are gone the sandbox works again."""
    from clawgym.sandbox.bwrap.backend import BwrapFactory

    hog = ("import os, time\n"
           "kids = 0\n"
           "while True:\n"
           "    try:\n"
           "        pid = os.fork()\n"
           "    except OSError:\n"
           "        break\n"
           "    if pid == 0:\n"
           "        os.close(1); os.close(2); time.sleep(60); os._exit(0)\n"
           "    kids += 1\n"
           "open('full', 'w').write(str(kids))\n"
           "time.sleep(3)\n")
    cfg = dataclasses.replace(bwrap_factory.config, pids=32)
    f = BwrapFactory(cfg, pool_size=0)
    try:
        with f.open() as s:
            out: dict = {}
            t = threading.Thread(target=lambda: out.update(r=s.exec(["python3", "-c", hog], timeout=30)))
            t.start()
            end = time.monotonic() + 20
            while time.monotonic() < end and "full" not in s.list_files():
                time.sleep(0.05)
            assert "full" in s.list_files(), "the hog never filled the pids limit"
            with pytest.raises(SandboxError, match=r"exec failed: fork: "):
                s.exec("echo run >> count")
            t.join(30)
            assert out["r"].rc == 0, out["r"]
            assert "count" not in s.list_files()
            assert s.exec("echo ok").stdout == "ok\n"
    finally:
        f.close()


def _exec_into_a_slow_sweep(s, backend: str, monkeypatch) -> threading.Thread:
    """Start `true` in sandbox s from another thread, its end-of-exec sweep (the real one) made to start 0.5 s
    late; return once that sweep has begun."""
    owner, name = (s, "_sweep") if backend == "bwrap_factory" else (s._slot, "sweep")
    real = getattr(owner, name)
    sweeping = threading.Event()

    def slow_sweep(*a, **k):
        if not sweeping.is_set():
            sweeping.set()
            time.sleep(0.5)
        return real(*a, **k)

    monkeypatch.setattr(owner, name, slow_sweep)
    t = threading.Thread(target=s.exec, args=("true",))
    t.start()
    assert sweeping.wait(20)
    return t


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sweep_holds_off_a_new_command(backend, request, monkeypatch):
    """The sweep at the end of one exec (its background jobs killed) is slow; a command another thread starts
    meanwhile waits for it, and is not killed by it."""
    factory = request.getfixturevalue(backend)
    with factory.open() as s:
        t = _exec_into_a_slow_sweep(s, backend, monkeypatch)
        r = s.exec("sleep 1; echo ok", timeout=20)
        t.join(20)
        assert (r.rc, r.stdout) == (0, "ok\n"), r
        monkeypatch.undo()


def test_pump_reads_not_started():
    a, b = socket.socketpair()
    with b:
        b.sendall(struct.pack(">BI", 6, 4) + b"why!")
        b.shutdown(socket.SHUT_WR)
        r = execd_client.pump(a, None, time.monotonic() + 5, 1000, 10_000)
    assert (r.not_started, r.started, r.rc) == ("why!", False, None)


@contextlib.contextmanager
def _beside_another_command(s, seconds: float):
    """Around the block, `sleep <seconds>; echo ok` runs in sandbox s from another thread (started 0.3 s before);
    it must end untouched: rc 0, "ok"."""
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(r=s.exec(f"sleep {seconds}; echo ok", timeout=20)))
    t.start()
    time.sleep(0.3)
    yield
    t.join(20)
    assert (out["r"].rc, out["r"].stdout) == (0, "ok\n"), out["r"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_command_that_cannot_be_started_is_rc_126(backend, request):
    """A NUL byte in argv, env or cwd cannot reach execve: rc 126 with the reason, like a shell's, not a dead
    handler (which docker reported by killing every command of the container) or an infrastructure error; a command
    of another thread goes on untouched."""
    factory = request.getfixturevalue(backend)
    with factory.open() as s:
        with _beside_another_command(s, 1.0):
            for bad in (dict(cmd="echo a\x00b"), dict(cmd=["echo"], env={"X": "a\x00b"}),
                        dict(cmd=["echo"], env={"A=B": "c"})):
                r = s.exec(**bad, timeout=10)
                assert r.rc == 126 and not r.timed_out and "execd:" in r.stderr, (bad, r)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_command_whose_time_is_gone_is_not_started(backend, request):
    """A deadline already past when the command would be sent: rc 124 and the command never runs (it used to be
    sent anyway, reported timed out, and run afterwards)."""
    factory = request.getfixturevalue(backend)
    with factory.open() as s:
        for _ in range(5):
            r = s.exec("echo run >> count", timeout=1e-6)
            assert (r.rc, r.timed_out) == (124, True)
        time.sleep(0.5)
        assert "count" not in s.list_files()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_timeout_does_not_kill_another_threads_command(backend, request):
    factory = request.getfixturevalue(backend)
    with factory.open() as s:
        with _beside_another_command(s, 1.5):
            r = s.exec("sleep 30", timeout=0.5)
            assert (r.rc, r.timed_out) == (124, True)
        assert "sleep 30" not in s.exec("ps -eo args").stdout  # killed when the last exec ended


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_close_waits_for_the_end_of_exec_sweep(backend, request, monkeypatch):
    """The end-of-exec sweep counts as the exec's activity until it is done: a close (the pool's reset after it)
    cannot go ahead mid-sweep, when the sweep could still kill the next user's first command."""
    factory = request.getfixturevalue(backend)
    with factory.open() as s:
        t = _exec_into_a_slow_sweep(s, backend, monkeypatch)
        assert not s.wait_quiet(0.2)
        t.join(20)
        assert s.wait_quiet(5)
        monkeypatch.undo()
