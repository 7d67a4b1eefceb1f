"""Docker backend: the in-container exec server (clawgym/sandbox/guest/execd.py) and container recycling.

Real Docker (tests/conftest.py starts an engine and builds the image, or skips with the reason).
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from proc_helpers import host_procs_with, wait_gone

from clawgym.sandbox.base import SandboxConfig, SandboxError
from clawgym.tasks.model import File

CFG = dict(memory_mb=256, pids=128, disk_mb=64, default_timeout_s=60.0)
WS = "/root/.openclaw/workspace"


@pytest.fixture(scope="module")
def dfactory(docker_factory):
    """A pool-less factory of our own: open() after a close gets the recycled container back."""
    from clawgym.sandbox.docker.backend import DockerFactory

    f = DockerFactory(SandboxConfig(**CFG), pool_size=0, max_idle=2, client=docker_factory.client)
    yield f
    f.close()


@pytest.fixture
def dfactory_keep_shm(docker_factory):
    """Like dfactory, with kernel.shm_rmid_forced off: SysV segments outlive their processes, so the reset
    (not the kernel) must be what removes them."""
    from clawgym.sandbox.docker.backend import DockerFactory

    f = DockerFactory(SandboxConfig(**CFG, shm_rmid_forced=False), pool_size=0, max_idle=2,
                      client=docker_factory.client)
    yield f
    f.close()


def _via(s) -> str:
    """How a command of sandbox s runs: "docker" (`docker exec`: parent pid 0 in the container's
    pid namespace) or "server" (a child of the exec server's handler)."""
    r = s.exec(["sh", "-c", 'echo $PPID; tr "\\0" " " < /proc/$PPID/cmdline'])
    ppid = r.stdout.split()[0]
    if ppid == "0":
        return "docker"
    assert "execd.py" in r.stdout, r.stdout
    return "server"


CASES = [
    dict(cmd="echo out; echo err >&2; exit 7"),
    dict(cmd=["python3", "-c", "import sys, os; print(sys.argv[1:], os.getcwd(), os.environ['X'], os.getuid(), "
                               "os.getgid(), os.getgroups())", "a b", "$HOME"], env={"X": "y z"}),
    dict(cmd="tee /tmp/in | wc -c; head -c 12 /tmp/in", stdin=b"line1\nline2\n" + b"x" * 300_000),
    dict(cmd="pwd; ls", workdir="sub"),
    dict(cmd="pwd", workdir="/tmp"),
    dict(cmd=["true"], workdir="missing"),
    dict(cmd="kill -TERM $$"),
    dict(cmd=["sh", "-c", "kill -KILL $$"]),
    dict(cmd="env | sort | grep -v '^_='", env={"EXTRA": "1"}),
    dict(cmd="head -c 50000 /dev/zero | tr '\\0' a; echo done >&2", max_output=1000),
    dict(cmd="trap '' PIPE; echo $(ulimit -n) "
             "$(cat /proc/self/status | grep -E '^(CapEff|NoNewPrivs|Seccomp):' | tr -s '\\t ' ' ')"),
]


def test_exec_server_matches_docker_exec(dfactory):
    """Every case gives the same ExecResult through the exec server and through `docker exec`."""
    with dfactory.open([File(path="sub/f.txt", content=b"x")]) as s:
        assert s._slot.fast()
        assert _via(s) == "server"
        fast = [s.exec(**c) for c in CASES]
        s.use_execd = False
        assert _via(s) == "docker"
        slow = [s.exec(**c) for c in CASES]
    for c, a, b in zip(CASES, fast, slow):
        got = (a.rc, a.stdout, a.truncated, a.timed_out)
        assert got == (b.rc, b.stdout, b.truncated, b.timed_out), (c, a, b)
        if c.get("workdir") != "missing":  # sh's and the server's message differ in wording only
            assert a.stderr == b.stderr, (c, a, b)
    assert fast[0].rc == 7 and fast[0].stderr == "err\n"
    assert fast[2].stdout == "300012\nline1\nline2\n"
    assert fast[5].rc == 126 and "missing" in fast[5].stderr
    assert fast[6].rc == 143 and fast[7].rc == 137
    assert fast[9].stdout == "a" * 1000 and fast[9].truncated
    assert "CapEff: 0000000000000000" in fast[10].stdout and "NoNewPrivs: 1" in fast[10].stdout


def test_timeout_kills_setsid_children_through_the_server(dfactory):
    marker = f"{6000 + uuid.uuid4().int % 3999}.{uuid.uuid4().int % 967}"
    with dfactory.open() as s:
        assert s._slot.fast()
        t0 = time.monotonic()
        r = s.exec(f"setsid sleep {marker} & (nohup sleep {marker} >/dev/null 2>&1 &); echo up; sleep {marker}",
                   timeout=1)
        assert r.timed_out and r.rc == 124 and r.stdout == "up\n"
        assert time.monotonic() - t0 < 10
        assert wait_gone(f"sleep\0{marker}") == []
        assert s.exec(["ps", "-u", "1000", "-o", "comm="]).stdout == "ps\n"  # nothing older
        assert not s._slot.suspect  # swept, not restarted: the container stays reusable


def test_sandbox_user_cannot_reach_or_signal_the_server(dfactory):
    with dfactory.open() as s:
        server = s.exec("ps -o pid= --ppid 1").stdout.split()
        assert len(server) == 1
        pid = server[0]
        probe = (
            "import socket\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "try:\n"
            "    s.connect('/run/clawgym/ctl.sock'); print('CONNECTED')\n"
            "except OSError as e:\n"
            "    print('refused', type(e).__name__)\n")
        r = s.exec(["python3", "-c", probe])
        assert r.stdout == "refused PermissionError\n", (r.stdout, r.stderr)
        r = s.exec(f"ls /run/clawgym 2>&1; kill -9 {pid} 2>&1; kill -STOP {pid} 2>&1; kill -9 1 2>&1; "
                   f"cat /proc/{pid}/environ 2>&1; ls /proc/{pid}/root/ 2>&1; ls /proc/{pid}/fd 2>&1; "
                   f"kill -9 -1; echo end")
        out = r.stdout
        assert "Permission denied" in out and "Operation not permitted" in out and "CONNECTED" not in out
        assert "ctl.sock" not in out and "HOME=" not in out
        assert s.exec("ps -o pid= --ppid 1").stdout.split() == [pid]  # the server lives on
        assert s.exec("ps -o stat= -p " + pid).stdout.strip()[0] in "SR"  # not stopped
        assert _via(s) == "server"


def test_reused_container_keeps_nothing_from_the_previous_sandbox(dfactory_keep_shm, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("host data")
    marker = f"{7000 + uuid.uuid4().int % 2999}.{uuid.uuid4().int % 961}"
    dfactory_keep_shm.settle()
    a = dfactory_keep_shm.open([File(path="task.txt", content=b"a")])
    cid = a.container_id
    a.kill_background = False  # leave the background process running until close
    r = a.exec(
        f"setsid nohup sleep {marker} >/dev/null 2>&1 & "
        "echo x > ws-marker; mkdir -p locked/deep && echo y > locked/deep/f && chmod 000 locked; "
        f"ln -s {victim} hostlink; ln -s {victim}/precious.txt ~/hostfile; echo z > ~/.bashrc; chmod 700 ~; "
        "echo t > /tmp/tmp-marker; mkdir /tmp/d && chmod 000 /tmp/d; "
        "echo s > /dev/shm/shm-marker; mkdir /dev/shm/d && echo q > /dev/shm/d/f && chmod 000 /dev/shm/d; "
        "python3 -c \"import os; os.close(os.open('/dev/mqueue/mq-marker', os.O_CREAT | os.O_RDWR, 0o600))\"; "
        "ipcmk -M 4096 && ipcmk -S 2 && ipcmk -Q >/dev/null && "
        "python3 -c \"import ctypes; l = ctypes.CDLL(None); print(l.shmget(0x1234, 8192, 0o1600))\"; "
        "cat /proc/sysvipc/shm /proc/sysvipc/sem /proc/sysvipc/msg | grep -c ' 1000 '")
    assert r.rc == 0, (r.stdout, r.stderr)
    assert r.stdout.split()[-1] == "4"  # two shm segments, a semaphore set, a message queue
    assert host_procs_with(f"sleep\0{marker}")
    a.close()
    assert dfactory_keep_shm.settle(30)
    assert cid in [c for c, _ in dfactory_keep_shm.idle()]
    assert wait_gone(f"sleep\0{marker}") == []
    assert (victim / "precious.txt").read_text() == "host data"  # symlinks were not followed

    b = dfactory_keep_shm.open([File(path="task.txt", content=b"b")])
    try:
        assert b.container_id == cid  # the same container, reset
        assert b.list_files() == ["task.txt"]
        r = b.exec("ls -A ~ ~/.openclaw /tmp /dev/shm /dev/mqueue; stat -c '%a %U' ~ /tmp .; "
                   "cat /proc/sysvipc/shm /proc/sysvipc/sem /proc/sysvipc/msg | grep -vc '^ *key'")
        assert r.stdout.split("\n") == [
            "/dev/mqueue:", "", "/dev/shm:", "", "/root:", ".openclaw", "", "/root/.openclaw:", "workspace", "",
            "/tmp:", "755 sandbox", "1777 sandbox", "755 sandbox", "0", ""], r.stdout
        assert b.exec(["ps", "-u", "1000", "-o", "comm="]).stdout == "ps\n"
        assert b.read_file("task.txt") == b"b"
    finally:
        b.close()
    assert dfactory_keep_shm.settle(30)


def test_suspect_containers_are_destroyed_not_reused(dfactory):
    api = dfactory.client.api
    # 1. restarted after a timeout it could not sweep
    with dfactory.open() as s:
        s._slot.procs_file = None  # as if the host could not reach the container's processes
        assert s.exec("sleep 30", timeout=0.5).timed_out
        assert s._slot.suspect
        restarted = s.container_id
    # 2. its exec server is gone
    with dfactory.open() as s:
        os.unlink(s._slot.sock)
        assert _via(s) == "docker"  # the fallback still works
        gone = s.container_id
    assert dfactory.settle(30)
    ids = {c["Id"] for c in api.containers(all=True)}
    assert restarted not in ids and gone not in ids
    assert all(c not in (restarted, gone) for c, _ in dfactory.idle())


def test_idle_cap_and_forced_fallback(docker_factory):
    from clawgym.sandbox.docker.backend import DockerFactory
    from clawgym.sandbox.host import cleanup

    f = DockerFactory(SandboxConfig(**CFG), pool_size=0, max_idle=1, use_execd=False, client=docker_factory.client)
    try:
        a, b = f.open(), f.open()
        for s in (a, b):
            r = s.exec("cat; echo $((6*7)) >&2; exit 3", stdin=b"in")
            assert (r.rc, r.stdout, r.stderr) == (3, "in", "42\n")
            assert _via(s) == "docker"
        ids = {a.container_id, b.container_id}
        a.close()
        b.close()
        assert f.settle(30)
        assert len(f.idle()) == 1 and f.stats["destroyed"] == 1
        c = f.open()
        assert c.container_id in ids and c.exec("ls -A /tmp; echo ok").stdout == "ok\n"
    finally:
        f.close()
    left = {x for x in cleanup.find_leftovers(pid=os.getpid()).containers}
    assert not (ids & left)
    assert not any(os.path.exists(d) for d in (a._slot.state.path, b._slot.state.path))
    with pytest.raises(SandboxError):
        f.open()


def test_pool_reuses_instead_of_creating(docker_factory):
    """Sequential sandboxes cycle through recycled containers: the filler makes no new ones."""
    from clawgym.sandbox.docker.backend import DockerFactory

    with DockerFactory(SandboxConfig(**CFG), pool_size=1, client=docker_factory.client) as f:
        assert f.warm(60)
        seen = set()
        for i in range(6):
            with f.open([File(path="n", content=str(i).encode())]) as s:
                assert s.exec("cat n; ls -A | wc -l").stdout == f"{i}1\n"
                seen.add(s.container_id)
            assert f.settle(30)
        assert f.stats["created"] <= 2 and f.stats["recycled"] >= 5, f.stats
        assert len(seen) <= 2
