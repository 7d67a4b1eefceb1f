"""One conformance suite for every sandbox backend (docker, bwrap; local for the non-isolation parts),
plus a hostile suite for the isolating ones and teardown checks (success, exception, timeout,
Ctrl-C, SIGTERM). Fixtures: tests/conftest.py."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
from proc_helpers import host_procs_with, wait_gone

from clawgym.sandbox.base import SandboxError
from clawgym.sandbox.host import cleanup
from clawgym.tasks.model import File

WS = "/root/.openclaw/workspace"
ALL = ["docker", "bwrap", "bwrap_perexec", "local"]
ISOLATING = ["docker", "bwrap", "bwrap_perexec"]


@pytest.fixture(params=ALL)
def factory(request):
    return request.getfixturevalue(f"{request.param}_factory")


@pytest.fixture(params=ISOLATING)
def ifactory(request):
    return request.getfixturevalue(f"{request.param}_factory")


@pytest.fixture
def sb(factory):
    with factory.open([File(path="hello.txt", content=b"hi\n"),
                       File(path="bin/run.sh", content=b"#!/bin/sh\necho ran $1\n", mode=0o755)]) as s:
        yield s


@pytest.fixture
def isb(ifactory):
    with ifactory.open() as s:
        yield s




# ---------------------------------------------------------------------------------------------
# conformance: every backend
def test_exec_rc_stdout_stderr(sb):
    r = sb.exec("echo out; echo err >&2; exit 7")
    assert (r.rc, r.stdout, r.stderr, r.timed_out, r.ok) == (7, "out\n", "err\n", False, False)
    r = sb.exec(["python3", "-c", "import sys; print(sys.argv[1:])", "a b", "$HOME"])
    assert r.ok and r.stdout == "['a b', '$HOME']\n"
    assert sb.exec(["cat"], stdin=b"from stdin").stdout == "from stdin"
    assert sb.exec("echo $FOO", env={"FOO": "bar"}).stdout == "bar\n"
    assert sb.exec("true").ok and sb.exec("true").duration_s >= 0


def test_workspace_files_and_cwd(sb):
    r = sb.exec('pwd; echo "$WORKSPACE"; cat hello.txt; ./bin/run.sh x')
    pwd, wsenv, hello, ran = r.stdout.splitlines()
    assert pwd == wsenv == sb.workspace and hello == "hi" and ran == "ran x"
    if sb.backend != "local":
        assert sb.workspace == WS
    sb.exec("mkdir -p sub/deeper && pwd > sub/deeper/where")
    assert sb.exec("pwd", workdir="sub").stdout.strip() == sb.workspace + "/sub"
    assert sb.exec("true", workdir="nope").rc == 126
    assert sb.exec("true", workdir="hello.txt").rc == 126  # a file, not a directory
    # a symlinked directory and an absolute /tmp path resolve inside the sandbox, as `cd` would
    sb.exec("mkdir -p /tmp/wd && ln -s sub/deeper linked")
    assert sb.exec("pwd -P; cat where", workdir="linked").stdout.split() == [sb.workspace + "/sub/deeper", sb.workspace]
    assert sb.exec("pwd", workdir="/tmp/wd").stdout.strip() == "/tmp/wd"
    assert sb.exec("pwd", workdir="sub/../sub/deeper").stdout.strip() == sb.workspace + "/sub/deeper"


def test_write_read_list_remove_snapshot(sb):
    sb.write_file("a/b/c.txt", b"abc")
    sb.write_file(f"{WS}/abs.txt", b"absolute")  # the configured workspace path works everywhere
    sb.write_file("bin/x", b"#!/bin/sh\necho x\n", mode=0o755)
    assert sb.exec("cat a/b/c.txt abs.txt; ./bin/x").stdout == "abcabsolutex\n"
    sb.exec("printf new > made.txt; mkdir -p d/e; printf deep > d/e/f; mkfifo pipe")
    assert sb.read_file("made.txt") == b"new" and sb.read_file("d/e/f") == b"deep"
    assert sb.list_files() == ["a/b/c.txt", "abs.txt", "bin/run.sh", "bin/x", "d/e/f",
                               "hello.txt", "made.txt"]
    assert sb.list_files("d") == ["d/e/f"] and sb.list_files("missing") == []
    assert sb.list_files("d/e/f") == ["d/e/f"] and sb.list_files("pipe") == []
    snap = sb.snapshot()
    assert snap["d/e/f"] == b"deep" and "pipe" not in snap and len(snap) == 7
    sb.remove("d")
    sb.remove("made.txt")
    sb.remove("never-existed")
    assert "d/e/f" not in sb.list_files() and sb.exec("test -e d || echo gone").stdout == "gone\n"
    with pytest.raises(FileNotFoundError):
        sb.read_file("made.txt")
    with pytest.raises(IsADirectoryError):
        sb.read_file("a")
    with pytest.raises(PermissionError):
        sb.read_file("pipe")  # a FIFO: refused at once, never blocks
    for bad in ("/etc/passwd", "../escape", "a/../../x"):
        with pytest.raises(PermissionError):
            sb.write_file(bad, b"x")
        with pytest.raises(PermissionError):
            sb.read_file(bad)
    sb.write_file("/tmp/in-tmp.txt", b"tmp ok")
    assert sb.exec("cat /tmp/in-tmp.txt" if sb.backend != "local" else 'cat "$TMPDIR/in-tmp.txt"').stdout == "tmp ok"


def test_output_cap(sb):
    r = sb.exec("head -c 3000000 /dev/zero | tr '\\0' a; echo done >&2", max_output=1000)
    assert r.rc == 0 and r.truncated and r.stdout == "a" * 1000 and r.stderr == "done\n"
    r = sb.exec("echo small", max_output=1000)
    assert not r.truncated


def test_timeout_kills_everything_incl_setsid(sb):
    marker = f"{1000 + uuid.uuid4().int % 8999}.{uuid.uuid4().int % 997}"
    t0 = time.monotonic()
    r = sb.exec(f"sleep {marker} & setsid sleep {marker} & (nohup sleep {marker} &); echo started; sleep {marker}",
                timeout=1.5)
    assert r.timed_out and r.rc == 124 and not r.ok and r.stdout == "started\n"
    assert time.monotonic() - t0 < 15
    assert wait_gone(f"sleep\0{marker}") == []
    assert sb.exec("echo still usable").stdout == "still usable\n"


def test_close_is_idempotent(factory):
    s = factory.open()
    s.close()
    s.close()
    with pytest.raises(SandboxError):
        s.exec("true")


def test_close_during_exec_stops_the_command(factory):
    marker = f"{7000 + uuid.uuid4().int % 2999}.{uuid.uuid4().int % 953}"
    s = factory.open()
    threading.Timer(0.7, s.close).start()
    t0 = time.monotonic()
    with pytest.raises(SandboxError, match="closed"):
        s.exec(f"sleep {marker}", timeout=60)
    assert time.monotonic() - t0 < 20
    assert wait_gone(f"sleep\0{marker}") == []


# ---------------------------------------------------------------------------------------------
# the environment ClawGym tasks and verifiers expect (isolating backends)
def test_environment_tools(isb):
    r = isb.exec("pwd; python3 -c 'import yaml, pytest, sys; print(sys.version_info[0])'; "
                 "git --version; make --version | head -1; node --version; bash --version | head -1; "
                 "git init -q r && cd r && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x "
                 "&& git log --oneline | wc -l")
    lines = r.stdout.splitlines()
    assert r.ok and len(lines) == 7, (r.stdout, r.stderr)
    assert lines[0] == WS and lines[1] == "3" and lines[2].startswith("git version")
    assert lines[3].startswith("GNU Make") and lines[4].startswith("v") and "bash" in lines[5]
    assert lines[6] == "1"


# ---------------------------------------------------------------------------------------------
# hostile suite (docker, bwrap)
def test_host_files_unreachable(isb, tmp_path):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host data")
    r = isb.exec(f"cat {secret}; echo pwned > {secret}; ls /work /home/* 2>&1; "
                 "echo x > /etc/passwd; touch /usr/bin/evil /evil; echo rc=$?")
    assert "host data" not in r.stdout
    assert secret.read_text() == "host data"
    assert not os.path.exists("/usr/bin/evil") and not os.path.exists("/evil")
    assert isb.exec("test -w /etc/passwd || test -w /usr && echo writable").stdout == ""
    with open("/etc/passwd") as f:
        assert "pwned" not in f.read()


def test_no_privileges(isb):
    r = isb.exec("id -u; grep CapEff /proc/self/status; unshare -Ur true 2>/dev/null && echo NESTED-USERNS; "
                 "mount -t tmpfs x /tmp 2>/dev/null && echo MOUNTED; echo end")
    uid, _, capeff, *rest = r.stdout.split()
    assert uid == "1000" and int(capeff, 16) == 0 and rest == ["end"], r.stdout


@pytest.fixture(scope="module")
def host_server():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    hits = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
                hits.append(1)
                c.sendall(b"HOST-SERVER")
                c.close()
            except OSError:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], hits
    stop.set()
    t.join(2)
    srv.close()


def test_no_network(isb, host_server):
    port, hits = host_server
    probe = textwrap.dedent(f"""
        import socket
        for host, port in [("127.0.0.1", {port}), ("1.1.1.1", 80), ("deb.debian.org", 80), ("pypi.org", 443)]:
            try:
                s = socket.create_connection((host, port), timeout=3)
                print("CONNECTED", host, s.recv(20))
            except OSError as e:
                print("blocked", host, type(e).__name__)
    """)
    r = isb.exec(["python3", "-c", probe], timeout=30)
    assert r.rc == 0, r.stderr
    assert "CONNECTED" not in r.stdout and r.stdout.count("blocked") == 4
    assert hits == []


def test_fork_bomb_contained(isb):
    t0 = time.monotonic()
    r = isb.exec("bomb() { bomb | bomb & }; bomb; sleep 1; echo survived", timeout=6)
    assert time.monotonic() - t0 < 30
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork
    r = isb.exec("echo alive; ps -e --no-headers | wc -l")
    assert r.ok and r.stdout.startswith("alive\n")
    assert int(r.stdout.split()[1]) < 10  # the bomb is gone
    if getattr(isb, "_cg", None) is not None:
        # bwrap: nothing left in the sandbox's cgroup either (server mode: only bwrap and its exec server)
        assert set(isb._cg.pids()) <= isb._keep and len(isb._keep) == (2 if isb.server_mode else 0)


def test_memory_bomb_contained(isb):
    r = isb.exec("python3 -c \"x = b'x' * (1 << 30); print('allocated', len(x))\"", timeout=60)
    assert r.rc != 0 and "allocated" not in r.stdout
    assert isb.exec("echo ok").stdout == "ok\n"


def test_disk_fill_contained(isb):
    before = os.statvfs("/tmp").f_bavail
    r = isb.exec("dd if=/dev/zero of=big bs=1M count=500 2>&1; dd if=/dev/zero of=/tmp/big2 bs=1M count=500 2>&1; "
                 "du -sm big", timeout=60)
    assert "No space left" in r.stdout
    assert int(r.stdout.split()[-2]) <= 64  # capped at the sandbox's disk_mb
    assert os.statvfs("/tmp").f_bavail > before - (200 << 20) // os.statvfs("/tmp").f_frsize
    isb.exec("rm -f big /tmp/big2")
    assert isb.exec("echo fine > f && cat f").stdout == "fine\n"
    # an inode bomb (many empty files) is capped too
    r = isb.exec(["python3", "-c", "import os\nos.mkdir('many')\nfor i in range(40000):\n"
                  "    try: open(f'many/{i}', 'w').close()\n    except OSError as e: print(i, e.errno); break"])
    n, err = r.stdout.split()
    assert int(n) < 40000 and int(err) == errno.ENOSPC
    isb.remove("many")


def test_symlinks_never_followed_host_side(isb):
    isb.exec("ln -s /etc/passwd leak; ln -s / root; ln -s /etc etcdir; mkfifo fifo")
    for p in ("leak", "root/etc/passwd", "etcdir/passwd"):
        with pytest.raises(PermissionError):
            isb.read_file(p)
    with open("/etc/hostname", "rb") as f:
        host_hostname = f.read()
    isb.write_file("leak", b"replaced the link, not the target")
    with pytest.raises(PermissionError):
        isb.write_file("etcdir/hostname", b"x")
    with open("/etc/hostname", "rb") as f:
        assert f.read() == host_hostname
    assert isb.read_file("leak") == b"replaced the link, not the target"
    t0 = time.monotonic()
    with pytest.raises(PermissionError):
        isb.read_file("fifo")
    assert time.monotonic() - t0 < 2
    assert isb.list_files() == ["leak"]
    assert set(isb.snapshot()) == {"leak"}


def test_sparse_file_does_not_blow_host_memory(isb):
    r = isb.exec("truncate -s 50G sparse && echo small > ok.txt")
    assert r.ok, r.stderr
    with pytest.raises(OSError) as ei:
        isb.read_file("sparse")
    assert ei.value.errno == errno.EFBIG
    assert isb.read_file("sparse", max_bytes=10) == b"\0" * 10
    assert isb.snapshot() == {"ok.txt": b"small\n"}


def test_gigabyte_of_stdout_capped(isb):
    t0 = time.monotonic()
    r = isb.exec("head -c 1000000000 /dev/zero; echo end", max_output=1 << 20, timeout=60)
    assert r.truncated and len(r.stdout) == 1 << 20 and not r.timed_out
    assert time.monotonic() - t0 < 30


def test_endless_command_killed(isb):
    marker = f"spin{uuid.uuid4().hex[:12]}"
    t0 = time.monotonic()
    r = isb.exec(f"exec -a {marker} bash -c 'while :; do :; done'", timeout=1)
    assert r.timed_out and r.rc == 124 and time.monotonic() - t0 < 15
    assert wait_gone(marker) == []


# ---------------------------------------------------------------------------------------------
# teardown: nothing is left after success, exception, timeout, Ctrl-C
def _traces(s) -> dict:
    """Everything a sandbox holds on the host."""
    t = {"dirs": [], "containers": [], "cgroups": []}
    st = getattr(s, "_state", None) or getattr(getattr(s, "_slot", None), "state", None)
    t["dirs"].append(st.path)
    if getattr(s, "container_id", None):
        t["containers"].append(s.container_id)
    cg = getattr(s, "_cg", None)
    if cg is not None:
        t["cgroups"] += cg.dirs
    return t


def _assert_gone(traces, factory):
    if factory.stats:  # docker and bwrap recycle: a closed sandbox is reset in the background
        assert factory.settle(60)
        for key, d in factory.idle():  # back in the pool: reset to an empty state, not leaked
            if key in traces["containers"] or d in traces["dirs"]:
                if key in traces["containers"]:
                    traces["containers"].remove(key)
                traces["dirs"].remove(d)
                traces["cgroups"] = []  # the same sandbox, kept with its cgroup
                assert os.listdir(os.path.join(d, "tmp")) == []
                assert os.listdir(os.path.join(d, "root", ".openclaw", "workspace")) == []
                if os.path.isdir(os.path.join(d, "shm")):
                    assert os.listdir(os.path.join(d, "shm")) == []
    for d in traces["dirs"]:
        assert not os.path.exists(d), d
        assert d not in open("/proc/self/mounts").read()
    for c in traces["cgroups"]:
        assert not os.path.exists(c), c
    if traces["containers"]:
        ids = {c["Id"] for c in factory.client.api.containers(all=True)}
        assert not (set(traces["containers"]) & ids)


@pytest.mark.parametrize("how", ["success", "exception", "timeout", "keyboardinterrupt"])
def test_teardown_leaves_nothing(factory, how):
    marker = f"{2000 + uuid.uuid4().int % 7999}.{uuid.uuid4().int % 991}"
    traces = None
    try:
        with factory.open([File(path="f.txt", content=b"x")]) as s:
            traces = _traces(s)
            if how == "success":
                assert s.exec("cat f.txt").stdout == "x"
            elif how == "exception":
                s.exec(f"sleep {marker} >/dev/null 2>&1 &")
                raise RuntimeError("task failed")
            elif how == "timeout":
                assert s.exec(f"sleep {marker}", timeout=0.5).timed_out
            else:  # Ctrl-C while a command runs
                threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
                s.exec(f"setsid sleep {marker} & sleep {marker}", timeout=30)
                pytest.fail("no KeyboardInterrupt")
    except (RuntimeError, KeyboardInterrupt):
        pass
    _assert_gone(traces, factory)
    assert wait_gone(f"sleep\0{marker}") == []


CHILD = textwrap.dedent("""
    import sys, time
    from clawgym.sandbox import get_factory
    from clawgym.sandbox.base import SandboxConfig
    kw = {"pool_size": 1} if sys.argv[1] == "docker" else {"server": sys.argv[3] == "server"}
    f = get_factory(sys.argv[1], SandboxConfig(memory_mb=256, pids=64, disk_mb=32), **kw)
    s = f.open()
    if sys.argv[1] == "docker":
        f.warm(60)
    print("ready", flush=True)
    s.exec("sleep " + sys.argv[2], timeout=120)
""")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_signal_to_process_leaves_nothing(ifactory, sig):
    """A whole process using sandboxes gets Ctrl-C / SIGTERM: everything it made goes away."""
    marker = f"{3000 + uuid.uuid4().int % 6999}.{uuid.uuid4().int % 983}"
    env = dict(os.environ)
    mode = "server" if getattr(ifactory, "server", True) else "perexec"
    p = subprocess.Popen([sys.executable, "-c", CHILD, ifactory.name, marker, mode], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, text=True)
    try:
        line = p.stdout.readline()
        assert line.strip() == "ready", p.stderr.read()
        end = time.monotonic() + 20
        while not host_procs_with(f"sleep\0{marker}") and time.monotonic() < end:
            time.sleep(0.05)
        assert host_procs_with(f"sleep\0{marker}")
        assert cleanup.find_leftovers(pid=p.pid)  # it holds a sandbox now
        p.send_signal(sig)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    left = cleanup.find_leftovers(pid=p.pid)
    assert not left, left.summary()
    assert wait_gone(f"sleep\0{marker}") == []


def test_cleanup_removes_what_a_killed_process_left(bwrap_factory):
    """SIGKILL gives no chance to clean up: remove_leftovers() finds and removes the orphans."""
    marker = f"{4000 + uuid.uuid4().int % 5999}.{uuid.uuid4().int % 977}"
    p = subprocess.Popen([sys.executable, "-c", CHILD, "bwrap", marker, "server"], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    end = time.monotonic() + 20
    while not host_procs_with(f"sleep\0{marker}") and time.monotonic() < end:
        time.sleep(0.05)
    p.kill()
    p.wait()
    left = cleanup.find_leftovers(pid=p.pid, orphans_only=True)
    assert left.mounts and left.dirs
    removed = cleanup.remove_leftovers(pid=p.pid)
    assert removed.dirs == left.dirs
    assert not cleanup.find_leftovers(pid=p.pid)
    assert wait_gone(f"sleep\0{marker}") == []
