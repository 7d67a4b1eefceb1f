"""Between the agent's phase and the verifier (same sandbox): Sandbox.quiesce(), Sandbox.seal(), an exec
server the agent's memory use cannot kill, and listings that survive hostile workspaces. Every backend
(docker, bwrap server mode, bwrap per exec, local where it means something). Fixtures: tests/conftest.py."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest
from proc_helpers import host_procs_with

from clawgym.sandbox.base import SandboxError
from clawgym.tasks.model import File

ALL = ["docker", "bwrap", "bwrap_perexec", "local"]
ISOLATING = ["docker", "bwrap", "bwrap_perexec"]
SERVER = ["docker", "bwrap"]  # backends whose sandboxes keep an exec server (and IPC state) between execs
X86 = os.uname().machine == "x86_64"


@pytest.fixture(params=ALL)
def factory(request):
    return request.getfixturevalue(f"{request.param}_factory")


@pytest.fixture(params=ISOLATING)
def ifactory(request):
    return request.getfixturevalue(f"{request.param}_factory")


@pytest.fixture(params=SERVER)
def sfactory(request):
    f = request.getfixturevalue(f"{request.param}_factory")
    if request.param == "bwrap" and not f.server:
        pytest.skip("bwrap server mode needs root and cgroups")
    return f


def _marker() -> str:
    """A `sleep` argument no other process on the machine uses (host-side process probes)."""
    return f"{3000 + uuid.uuid4().int % 6999}.{uuid.uuid4().int % 997}"


# every way of outliving a command: background, nohup, setsid + double fork, stopped, ignoring every
# catchable signal (set explicitly: nothing relies on inherited dispositions)
def _leave_processes(m: str) -> str:
    q = ">/dev/null 2>&1 </dev/null"
    return (f"trap '' TERM HUP INT QUIT USR1 USR2; "
            f"(sleep {m} {q} &) ; nohup sleep {m} {q} & "
            f"setsid sh -c \"trap '' TERM HUP INT; (sleep {m} &) ; sleep {m}\" {q} & "
            f"sleep {m} {q} & kill -STOP $! ; "
            f"python3 -c \"import os, signal, time\n"
            f"for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT): signal.signal(s, signal.SIG_IGN)\n"
            f"if os.fork() == 0:\n os.setsid()\n"
            f" if os.fork() == 0: os.execvp('sleep', ['sleep', '{m}'])\n os._exit(0)\n"
            f"\" {q} ; ")


# ---------------------------------------------------------------------------------------------
# quiesce: processes
def test_quiesce_kills_processes_of_a_running_exec_and_keeps_files(factory):
    m = _marker()
    with factory.open([File(path="task.txt", content=b"task")]) as sb:
        sb.write_file("/tmp/t.txt", b"tmp")
        res = {}

        def agent():
            try:
                res["r"] = sb.exec(_leave_processes(m) + f"echo started > ws.txt; echo h > ~/home.txt 2>/dev/null; "
                                   f"sleep {m}", timeout=60)
            except SandboxError as e:  # a killed exec may report either way; it must not hang
                res["e"] = e

        t = threading.Thread(target=agent)
        t.start()
        end = time.monotonic() + 20
        def started() -> bool:  # `echo started > ws.txt` runs after the leftovers are launched
            try:
                return sb.read_file("ws.txt") == b"started\n"
            except (OSError, SandboxError):
                return False

        while (len(host_procs_with(f"sleep\0{m}")) < 6 or not started()) and time.monotonic() < end:
            time.sleep(0.05)
        assert len(host_procs_with(f"sleep\0{m}")) >= 6  # all of them are running / stopped now
        t0 = time.monotonic()
        sb.quiesce()
        assert host_procs_with(f"sleep\0{m}") == []  # gone when quiesce returns, not later
        t.join(20)
        assert not t.is_alive() and time.monotonic() - t0 < 20
        if "r" in res:
            assert res["r"].rc != 0
        assert sb.read_file("task.txt") == b"task" and sb.read_file("ws.txt") == b"started\n"
        assert sb.read_file("/tmp/t.txt") == b"tmp"
        r = sb.exec("echo alive; cat task.txt")  # usable afterwards
        assert r.ok and r.stdout == "alive\ntask"
        sb.quiesce()  # idempotent
        assert sb.exec("true").ok


def test_docker_quiesce_kills_kept_background_processes(docker_factory):
    m = _marker()
    with docker_factory.open() as sb:
        sb.kill_background = False  # processes outlive their exec until something kills them
        r = sb.exec(_leave_processes(m) + "echo done")
        assert r.ok and r.stdout.strip().endswith("done")
        end = time.monotonic() + 10
        while len(host_procs_with(f"sleep\0{m}")) < 5 and time.monotonic() < end:
            time.sleep(0.05)
        # (a stopped member of a process group that becomes orphaned may get SIGHUP + SIGCONT from the kernel)
        assert len(host_procs_with(f"sleep\0{m}")) >= 5
        sb.quiesce()
        assert host_procs_with(f"sleep\0{m}") == []
        assert sb.exec(["ps", "-u", "1000", "-o", "comm="]).stdout == "ps\n"


def test_quiesce_on_closed_sandbox_raises(factory):
    sb = factory.open()
    sb.close()
    with pytest.raises(SandboxError):
        sb.quiesce()


# ---------------------------------------------------------------------------------------------
# quiesce: IPC, /dev/shm, mqueues, keyrings
LEAVE_IPC = r"""
import ctypes, os
l = ctypes.CDLL(None, use_errno=True)
l.syscall.restype = ctypes.c_long
assert l.shmget(0x1234, 8192, 0o1600) >= 0
assert l.semget(0x2345, 2, 0o1600) >= 0
assert l.msgget(0x3456, 0o1600) >= 0
assert l.mq_open(b"/q1", os.O_CREAT | os.O_RDWR, 0o600, None) >= 0
os.makedirs("/dev/shm/d/e")
open("/dev/shm/d/e/f", "w").write("x")
open("/dev/shm/top", "w").write("x")
os.chmod("/dev/shm/d", 0)
serial = -1
if os.uname().machine == "x86_64":
    serial = l.syscall(248, b"user", b"qkey", b"secret", 6, -4)  # add_key into the user keyring
print(serial)
"""
IPC_STATE = ("for k in shm sem msg; do tail -n +2 /proc/sysvipc/$k | wc -l; done; "
             "ls -A /dev/shm /dev/mqueue | tr '\\n' ' '")
READ_KEY = r"""
import ctypes, sys
l = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(64)
n = l.syscall(250, 11, int(sys.argv[1]), buf, 64)  # keyctl(KEYCTL_READ, serial)
print(buf.raw[:n].decode() if n >= 0 else "unreadable")
"""


def test_quiesce_clears_ipc_and_keeps_files(ifactory):
    with ifactory.open([File(path="keep/a.txt", content=b"A"),
                        File(path="run.sh", content=b"#!/bin/sh\n", mode=0o755)]) as sb:
        r = sb.exec("echo h > ~/.home-file; mkdir -p ~/.cache/x && echo c > ~/.cache/x/y; echo t > /tmp/tfile; "
                    "mkdir /tmp/tdir && chmod 700 /tmp/tdir; echo w > made.txt; ln -s keep/a.txt link; "
                    "chmod 600 keep/a.txt")
        assert r.ok, r.stderr
        per_exec = sb.backend == "bwrap" and not sb.server_mode
        if not per_exec:  # let a detached SysV segment outlive its process (as where the host cannot stop it)
            _set_rmid_forced(sb, False)
        r = sb.exec(["python3", "-c", LEAVE_IPC])
        assert r.ok, r.stderr
        serial = r.stdout.strip()
        state = sb.exec(IPC_STATE).stdout.split()
        if per_exec:  # SysV IPC and mqueues die with each exec's ipc namespace; /dev/shm is shared
            assert state == ["0", "0", "0", "/dev/mqueue:", "/dev/shm:", "d", "top"]
        else:
            assert state == ["1", "1", "1", "/dev/mqueue:", "q1", "/dev/shm:", "d", "top"]
        key_lives = X86 and sb.backend == "bwrap" and sb.server_mode  # docker's seccomp refuses add_key
        if X86 and sb.backend == "docker":  # what lets docker's reset skip the in-container keyring clear
            assert int(serial) < 0, "docker's seccomp profile let add_key through"
        if key_lives:  # listed (VIEW); readable only while the user keyring is linked from the session's
            assert int(serial) > 0 and sb.exec("grep -c qkey /proc/keys").stdout == "1\n"
        files_before = sb.snapshot()
        listing_before = sb.exec("ls -la --time-style=+ ~ ~/.cache/x /tmp . keep | grep -v ' \\.\\.$'").stdout

        try:
            sb.quiesce()
        finally:
            if not per_exec:
                _set_rmid_forced(sb, True)

        assert sb.exec(IPC_STATE).stdout.split() == ["0", "0", "0", "/dev/mqueue:", "/dev/shm:"]
        if key_lives:
            assert sb.exec(["python3", "-c", READ_KEY, serial]).stdout == "unreadable\n"
            end = time.monotonic() + 10
            while sb.exec("grep -c qkey /proc/keys").stdout != "0\n":  # unlinked: gone at the key GC
                assert time.monotonic() < end, "the key is still listed"
                time.sleep(0.2)
        assert sb.snapshot() == files_before
        assert sb.exec("ls -la --time-style=+ ~ ~/.cache/x /tmp . keep | grep -v ' \\.\\.$'").stdout == listing_before
        assert sb.exec("cat ~/.home-file ~/.cache/x/y /tmp/tfile; readlink link").stdout == "h\nc\nt\nkeep/a.txt\n"


# ---------------------------------------------------------------------------------------------
# the exec server survives the agent's memory use
SHM_FILL = r"""
import ctypes, sys
detach = sys.argv[1] == "detach"
l = ctypes.CDLL(None, use_errno=True)
l.shmat.restype = ctypes.c_void_p
size, n = 8 << 20, 0
while n < 200:  # 1.6 GB at most: far beyond the sandbox's memory limit
    i = l.shmget(0, size, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600: not removed when this process ends
    if i < 0:
        break
    a = l.shmat(i, None, 0)
    if a in (None, ctypes.c_void_p(-1).value):
        break
    ctypes.memset(a, 1, size)
    if detach:
        l.shmdt(ctypes.c_void_p(a))
    n += 1
    print(n, flush=True)
"""
SHM_COUNT = "tail -n +2 /proc/sysvipc/shm | wc -l"


def _server_pids(sb) -> set[int]:
    return set(sb._keep) if sb.backend == "bwrap" else set(sb._slot.keep)


def _init_pid(sb) -> int:
    return sb._init if sb.backend == "bwrap" else sb._slot.init


def _adj(pid: int) -> int:
    with open(f"/proc/{pid}/oom_score_adj") as f:
        return int(f.read())


def _alive(pids) -> bool:
    return all(os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z" for p in pids)


def _set_rmid_forced(sb, on: bool) -> None:
    from clawgym.sandbox.host import nsipc

    assert nsipc.force_shm_rmid(_init_pid(sb), on)


def test_memory_use_cannot_kill_the_exec_server(sfactory):
    limit_mb = sfactory.config.memory_mb
    with sfactory.open([File(path="task.txt", content=b"t")]) as sb:
        keep = _server_pids(sb)
        # commands start at oom_score_adj 500 (checked in a child started a moment later), above the
        # server's (-1000 where the host may lower it, else 0): the OOM killer picks commands first
        assert sb.exec("sleep 0.2; cat /proc/self/oom_score_adj").stdout == "500\n"
        assert len(keep) == 2 and all(_adj(p) <= 0 for p in keep)
        assert sb.exec("cat /proc/sys/kernel/shm_rmid_forced").stdout == "1\n"

        # 1. SysV shm kept attached until the filler is OOM-killed: it dies with the filler (rmid_forced)
        r = sb.exec(["python3", "-c", SHM_FILL, "attached"], timeout=120)
        filled = int(r.stdout.split()[-1]) if r.stdout.split() else 0
        assert r.rc == 137 and filled * 8 >= limit_mb // 2, (r.rc, r.stdout[-100:], r.stderr[-500:])
        assert _alive(keep)
        r = sb.exec(SHM_COUNT + "; cat task.txt")  # no quiesce needed: nothing is pinned
        assert r.ok and r.stdout == "0\nt", (r.rc, r.stdout, r.stderr)

        # 2. a host where shm_rmid_forced is off: detached segments fill the cgroup and outlive the filler;
        # quiesce() frees them from the host (nothing inside needs memory for that)
        _set_rmid_forced(sb, False)
        try:
            r = sb.exec(["python3", "-c", SHM_FILL, "detach"], timeout=120)
            filled = int(r.stdout.split()[-1]) if r.stdout.split() else 0
            assert filled * 8 >= limit_mb // 2, (r.rc, r.stdout[-100:], r.stderr[-500:])
            assert _alive(keep)
            sb.quiesce()
            assert _alive(keep)
            r = sb.exec(SHM_COUNT + "; cat task.txt")
            assert r.ok and r.stdout == "0\nt", (r.rc, r.stdout, r.stderr)
        finally:
            _set_rmid_forced(sb, True)

        # 3. a plain memory bomb kills the bomb, not the sandbox
        r = sb.exec(["python3", "-c", "x = bytearray(1 << 30)"], timeout=60)
        assert r.rc != 0 and sb.exec("echo ok").stdout == "ok\n"
        assert _alive(keep)


# ---------------------------------------------------------------------------------------------
# seal
ATTACKS = [
    "echo evil >> reward/x.sh", "echo evil > reward/x.sh", "rm -f reward/x.sh", "chmod 777 reward/x.sh",
    "touch reward/new", "mv reward/x.sh reward/y.sh", "ln reward/x.sh reward/hard", "mkdir reward/d",
    "echo evil > reward/sub/data.txt", "rm -rf reward/sub", "truncate -s 0 reward/x.sh",
    "python3 -c \"open('reward/x.sh', 'r+').write('evil')\"", "chmod 777 reward", "touch reward/sub/new",
    "mv reward reward.old", "rm -rf reward",
]


def test_seal_makes_a_tree_read_only_for_the_sandbox_user(ifactory):
    before = ifactory.stats
    sb = ifactory.open()
    try:
        sb.write_file("reward/x.sh", b"#!/bin/sh\necho sealed-ok\n", mode=0o4755)
        sb.write_file("reward/sub/data.txt", b"data", mode=0o666)
        sb.exec("ln -s ../elsewhere reward/sub/lnk; mkfifo reward/fifo; chmod 777 reward reward/sub")
        sb.seal("reward")
        for attack in ATTACKS:
            r = sb.exec(attack)
            assert r.rc != 0, (attack, r.stdout, r.stderr)
        assert sb.read_file("reward/x.sh") == b"#!/bin/sh\necho sealed-ok\n"
        assert sb.read_file("reward/sub/data.txt") == b"data"
        r = sb.exec("./reward/x.sh; stat -c '%a %u' reward reward/x.sh reward/sub reward/sub/data.txt reward/fifo")
        assert r.ok, r.stderr
        out = r.stdout.split("\n")
        assert out[0] == "sealed-ok"
        modes = [ln.split() for ln in out[1:] if ln]
        assert [m for m, _ in modes] == ["755", "555", "755", "444", "444"]  # set-id bits dropped
        assert all(int(u) != 1000 for _, u in modes)  # root (docker) / the overflow uid (bwrap)
        assert sb.exec("echo fine > reward2.txt && cat reward2.txt").stdout == "fine\n"  # the rest stays writable
        # the host can still take it apart (the factory's reset does the same)
        sb.remove("reward/sub")
        assert sb.list_files("reward") == ["reward/x.sh"]
    finally:
        sb.close()
    assert ifactory.settle(30)
    # a sealed tree does not stop the sandbox being reused (no pool, e.g. local: no counters)
    assert ifactory.stats.get("reset_failed") == before.get("reset_failed")


def test_seal_absolute_tmp_path(ifactory):
    with ifactory.open() as sb:
        sb.write_file("/tmp/.guard/py/sitecustomize.py", b"print('guard')\n")
        sb.seal("/tmp/.guard/py")
        for attack in ("echo x >> /tmp/.guard/py/sitecustomize.py", "touch /tmp/.guard/py/evil.py",
                       "mv /tmp/.guard/py /tmp/.guard/old", "rm -rf /tmp/.guard/py"):
            assert sb.exec(attack).rc != 0, attack
        assert sb.read_file("/tmp/.guard/py/sitecustomize.py") == b"print('guard')\n"


def test_seal_refuses_symlinks(factory):
    with factory.open([File(path="real/x.sh", content=b"x")]) as sb:
        sb.exec("ln -s real link; ln -s /etc etc; mkdir -p d; ln -s ../real d/r")
        for bad in ("link", "link/x.sh", "etc", "d/r", "d/r/x.sh"):
            with pytest.raises(ValueError):
                sb.seal(bad)
        with pytest.raises(FileNotFoundError):
            sb.seal("missing")
        assert sb.read_file("real/x.sh") == b"x"
        mode = sb.exec("stat -c %a real/x.sh").stdout.strip()
        assert mode == "644"  # nothing was touched through the symlinks
        sb.seal("real/x.sh")  # a single file
        assert sb.exec("stat -c %a real/x.sh").stdout.strip() == "444"


# ---------------------------------------------------------------------------------------------
# listings of hostile workspaces
MAKE_HOSTILE = r"""
import os, socket
base = os.getcwd()
os.mkdir("deep")
os.chdir("deep")
for i in range(1100):
    os.mkdir("d")
    os.chdir("d")
open("bottom.txt", "w").write("bottom")
os.chdir(base)
open(b"\xff\xfe.txt", "wb").write(b"not utf-8")
os.mkdir(b"dir\xff")
open(b"dir\xff/in.txt", "wb").write(b"inside")
os.mkfifo("fifo")
s = socket.socket(socket.AF_UNIX)
s.bind("sock")
os.symlink("loop", "loop")
os.symlink("a", "b")
os.symlink("b", "a")
os.symlink("/", "rootlink")
os.symlink(".", "self")
open("plain.txt", "w").write("plain")
print("made")
"""


def test_listing_survives_hostile_workspace(factory):
    sb = factory.open()
    try:
        r = sb.exec(["python3", "-c", MAKE_HOSTILE], timeout=120)
        assert r.ok and r.stdout == "made\n", r.stderr[-2000:]
        deep = "deep/" + "d/" * 1100 + "bottom.txt"
        bad = os.fsdecode(b"\xff\xfe.txt")
        bad_in = os.fsdecode(b"dir\xff/in.txt")
        files = sb.list_files()
        assert files == sorted([bad, bad_in, deep, "plain.txt"])
        assert sb.list_files("deep") == [deep]
        assert sb.read_file(bad) == b"not utf-8" and sb.read_file(bad_in) == b"inside"
        assert sb.read_file(deep) == b"bottom"
        snap = sb.snapshot()
        assert snap == {bad: b"not utf-8", bad_in: b"inside", deep: b"bottom", "plain.txt": b"plain"}
        assert sb.list_files(os.fsdecode(b"dir\xff")) == [bad_in]
        sb.remove("deep")
        assert sb.list_files() == sorted([bad, bad_in, "plain.txt"])
        r = sb.exec(["python3", "-c", MAKE_HOSTILE.split("os.chdir(base)")[0] + "print('again')"], timeout=120)
        assert r.ok, r.stderr[-2000:]
    finally:
        sb.close()  # a recycled sandbox is reset with the 1100-deep tree still in it
    assert factory.settle(60)


# ---------------------------------------------------------------------------------------------
# a recycled sandbox: directory metadata (default ACLs, xattrs) the agent set on what a reset keeps
PLANT_ACL = r"""
import os, struct
# a default ACL granting r-x only (user::r-x, group::---, other::---): what is made below inherits mode 0500
acl = struct.pack("<I", 2) + struct.pack("<HHI", 1, 5, 0xffffffff) + struct.pack("<HHI", 4, 0, 0xffffffff) \
    + struct.pack("<HHI", 0x20, 0, 0xffffffff)
done = []
for d in ("/root", "/tmp", os.getcwd()):
    for name, val in (("system.posix_acl_default", acl), ("user.note", b"left for the next task")):
        try:
            os.setxattr(d, name, val)
            done.append(name)
        except OSError:
            pass
print(" ".join(done))
"""


def _state_path(sb) -> str:
    st = getattr(sb, "_state", None) or sb._slot.state
    return st.path


def test_reset_clears_acls_and_xattrs_the_agent_set(sfactory):
    """A reset keeps HOME, /tmp and (re-made) the workspace path: the agent's default ACL on them would make every
    entry of the next task's sandbox mode 0500 (its files unwritable: a later rollout scores 0), and xattrs carry data
    to the next user. The reset strips them (found by a hostile review)."""
    from clawgym.sandbox import get_factory

    backend = "docker" if type(sfactory).__name__.startswith("Docker") else "bwrap"
    with get_factory(backend, sfactory.config, pool_size=1, max_idle=1) as f:
        assert f.warm(60)
        s1 = f.open([File(path="a.txt", content=b"one")])
        path1 = _state_path(s1)
        r = s1.exec(["python3", "-c", PLANT_ACL])
        assert r.ok, r.stderr
        assert "system.posix_acl_default" in r.stdout.split(), r.stdout  # the plant itself took
        s1.close()
        assert f.settle(60)
        with f.open([File(path="sub/b.txt", content=b"two\n")]) as s2:
            if _state_path(s2) != path1:
                pytest.fail("the pool did not hand back the recycled sandbox (pool_size=1, max_idle=1)")
            r = s2.exec("echo new > made.txt && mkdir -p d/e && echo x > d/e/f && echo t > /tmp/t && "
                        "echo h > ~/h && cat sub/b.txt made.txt d/e/f")
            assert r.ok and r.stdout == "two\nnew\nx\n", (r.rc, r.stdout, r.stderr)
            r = s2.exec(["python3", "-c", "import os; print([(d, os.listxattr(d)) for d in ('/root', '/tmp', '.') "
                                          "if os.listxattr(d)])"])
            assert r.stdout.strip() == "[]", r.stdout
