"""Backend-specific behaviour: registry selection, the setup scripts, docker's restart fallback and
pool, bwrap's host fallback, concurrency, the cleanup command."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from proc_helpers import host_procs_with

from clawgym.sandbox import get_factory, registry
from clawgym.sandbox.base import SandboxConfig, SandboxError
from clawgym.sandbox.host import cleanup
from clawgym.tasks.model import File

REPO = Path(__file__).resolve().parents[2]


def test_registry_selection(docker_factory, monkeypatch):
    assert set(registry.backends()) >= {"docker", "bwrap", "local"}
    monkeypatch.setenv("CLAWGYM_SANDBOX", "bwrap")  # the library ignores it: entry points read it
    assert registry.resolve_auto() == "docker"  # an engine answers and has the image
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert registry.resolve_auto() == "bwrap"  # no engine: bwrap, never local
    with get_factory("auto", SandboxConfig(memory_mb=256, pids=64, disk_mb=16)) as f:
        assert f.name == "bwrap"
    with pytest.raises(SandboxError, match="unknown sandbox backend"):
        get_factory("podman")


def test_entry_point_reads_the_sandbox_env(monkeypatch):
    """CLAWGYM_SANDBOX / CLAWGYM_BWRAP_SERVER work through the Dagster resource (not inside clawgym.sandbox)."""
    from clawgym_assets.resources import default_resources

    monkeypatch.setenv("CLAWGYM_SANDBOX", "bwrap")
    monkeypatch.setenv("CLAWGYM_BWRAP_SERVER", "0")
    res = default_resources()["sandbox"]
    assert res.backend == "bwrap" and res.config().bwrap_server is False
    monkeypatch.delenv("CLAWGYM_SANDBOX")
    monkeypatch.delenv("CLAWGYM_BWRAP_SERVER")
    res = default_resources()["sandbox"]
    assert res.backend == "auto" and res.config().bwrap_server is True


def test_entry_point_reads_the_host_facts(monkeypatch, tmp_path):
    """CLAWGYM_ROOTFS / CLAWGYM_SANDBOX_TMP / CLAWGYM_SANDBOX_NO_TMPFS / CLAWGYM_SANDBOX_NO_CGROUP / CLAWGYM_EXECD_STAGE
    become SandboxConfig fields at the entry points (the Dagster resource, `host_settings`), not inside the library."""
    from clawgym.sandbox import host_settings
    from clawgym_assets.defs.rollouts.resources import SandboxResource

    env = {"CLAWGYM_ROOTFS": "/srv/rootfs", "CLAWGYM_SANDBOX_TMP": str(tmp_path), "CLAWGYM_SANDBOX_NO_TMPFS": "1",
           "CLAWGYM_SANDBOX_NO_CGROUP": "1", "CLAWGYM_EXECD_STAGE": "1"}
    want = {"default_rootfs": "/srv/rootfs", "state_root": str(tmp_path), "tmpfs": False, "cgroups": False,
            "stage_execd": True}
    assert host_settings(env) == want and host_settings({}) == {}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    c = SandboxResource.from_env().config()
    assert {k: getattr(c, k) for k in want} == want


def test_state_root_holds_the_state_dirs_and_the_cleanup_finds_them_there(tmp_path):
    root = tmp_path / "sbx"
    root.mkdir()
    with get_factory("local", SandboxConfig(disk_mb=16, state_root=str(root))) as f, f.open() as s:
        assert s.workspace.startswith(str(root) + "/")
        mine = cleanup.find_leftovers(pid=os.getpid(), state_root=str(root))
        assert [os.path.dirname(d) for d in mine.dirs] == [str(root)]
        assert not [d for d in cleanup.find_leftovers(pid=os.getpid()).dirs if d.startswith(str(root))]
    assert not os.listdir(root)


def test_bwrap_server_off_by_config(bwrap_factory):
    with get_factory("bwrap", SandboxConfig(disk_mb=16, bwrap_server=False)) as f, f.open() as s:
        assert not f.server and not s.server_mode and f.stats["created"] == 1
        assert s.exec("echo ok").stdout == "ok\n"


def test_docker_missing_image_is_a_clear_error(docker_factory):
    with pytest.raises(SandboxError, match="build_sandbox_image"):
        get_factory("docker", SandboxConfig(image="clawgym-no-such-image:0"))


def test_scripts_are_idempotent(docker_factory):
    t0 = time.monotonic()
    p = subprocess.run(["bash", str(REPO / "scripts/start_dockerd.sh")], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip().startswith("unix://")
    p = subprocess.run(["bash", str(REPO / "scripts/build_sandbox_image.sh")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "rootfs" in p.stderr and "up to date" in p.stderr and "image clawgym-sandbox:latest up to date" in p.stderr
    assert time.monotonic() - t0 < 30
    stamp = Path(os.environ.get("CLAWGYM_ROOTFS", "/var/lib/clawgym/rootfs")) / ".clawgym-stamp"
    assert "python3-yaml" in stamp.read_text() and "nodejs" in stamp.read_text()


def test_docker_timeout_without_host_access_restarts_container(docker_factory):
    """Where the container's processes cannot be reached from the host, a timeout SIGKILLs the
    container and starts it again: everything dies, the workspace survives."""
    marker = f"{5000 + uuid.uuid4().int % 4999}.{uuid.uuid4().int % 971}"
    with docker_factory.open([File(path="keep.txt", content=b"kept")]) as s:
        s._slot.procs_file = None  # as if not root on the host
        r = s.exec(f"setsid sleep {marker} & sleep {marker}", timeout=1)
        assert r.timed_out and r.rc == 124
        assert s.exec("cat keep.txt; echo; ps -e --no-headers | grep -c sleep").stdout.split() == ["kept", "0"]
        assert s._slot.procs_file is not None  # located again after the restart


def test_docker_survives_kill_all_from_inside(docker_factory):
    with docker_factory.open([File(path="a", content=b"1")]) as s:
        s.exec("kill -9 -1")
        assert s.exec("cat a").stdout == "1"
        docker_factory.client.api.kill(s.container_id)  # the container dies under us: restarted
        assert s.exec("cat a").stdout == "1"


def test_docker_background_processes_do_not_outlive_exec(docker_factory):
    with docker_factory.open() as s:
        assert s.exec("sleep 300 & setsid sleep 301 & echo bg").stdout == "bg\n"
        assert s.exec("ps -e --no-headers -o comm | grep -c '^sleep' ").stdout.strip() == "0"


def test_warm_pool_makes_open_fast(docker_factory):
    docker_factory.warm(60)
    t0 = time.monotonic()
    with docker_factory.open([File(path="x", content=b"y")]) as s:
        opened = time.monotonic() - t0
        assert s.exec("cat x").stdout == "y"
    assert opened < 0.5, opened


@pytest.mark.parametrize("backend", ["docker", "bwrap"])
def test_concurrent_sandboxes(request, backend):
    f = request.getfixturevalue(f"{backend}_factory")
    errors, outs = [], {}

    def work(i):
        try:
            with f.open([File(path="i.txt", content=str(i).encode())]) as s:
                s.exec("cat i.txt > o.txt; echo -n $(cat i.txt) >> o.txt")
                outs[i] = s.read_file("o.txt")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors and outs == {i: f"{i}{i}".encode() for i in range(4)}


def test_bwrap_host_fallback_and_custom_workspace(bwrap_factory):
    cfg = SandboxConfig(rootfs="host", workspace="/workspace", memory_mb=256, pids=64, disk_mb=16)
    with get_factory("bwrap", cfg) as f:
        assert f.rootfs is None
        with f.open([File(path="in.txt", content=b"data")]) as s:
            r = s.exec("pwd; cat in.txt; echo; python3 -c 'import yaml; print(yaml.safe_load(\"a: 1\"))'; "
                       "cat /etc/shadow | wc -c; touch /usr/x 2>/dev/null || echo ro")
            assert r.stdout.splitlines() == ["/workspace", "data", "{'a': 1}", "0", "ro"], r.stderr
            s.exec("echo out > made")
            assert s.list_files() == ["in.txt", "made"]


def test_bwrap_rootfs_must_exist_when_named():
    with pytest.raises(SandboxError, match="not built"):
        get_factory("bwrap", SandboxConfig(rootfs="/nonexistent/rootfs"))


def test_local_is_explicit_and_warns(caplog):
    with caplog.at_level("WARNING"):
        with get_factory("local", SandboxConfig(disk_mb=16)) as f, f.open([File(path="a.txt", content=b"A")]) as s:
            assert s.workspace != "/root/.openclaw/workspace" and os.path.isdir(s.workspace)
            assert s.exec('cat a.txt; echo " $WORKSPACE"').stdout == f"A {s.workspace}\n"
    assert any("WITHOUT isolation" in r.message for r in caplog.records)


def test_cleanup_command_dry_run(capsys):
    assert cleanup.main(["--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("would remove: containers=")


def test_closed_factory_refuses(bwrap_factory):
    f = get_factory("bwrap", SandboxConfig(disk_mb=16))
    s = f.open()
    f.close()
    with pytest.raises(SandboxError):
        s.exec("true")  # closing a factory closes its sandboxes
    with pytest.raises(SandboxError):
        f.open()


def test_bwrap_prlimit_fallback_contains_bombs(bwrap_factory):
    """Without a usable cgroup, per-process rlimits still stop memory and fork bombs."""
    with get_factory("bwrap", SandboxConfig(memory_mb=256, pids=64, disk_mb=16, cgroups=False)) as f, f.open() as s:
        assert s._cg is None
        r = s.exec("python3 -c \"x = b'x' * (1 << 30); print('allocated')\"", timeout=60)
        assert r.rc != 0 and "allocated" not in r.stdout
        t0 = time.monotonic()
        s.exec("bomb() { bomb | bomb & }; bomb; sleep 1", timeout=5)
        assert time.monotonic() - t0 < 20
        assert s.exec("echo ok").stdout == "ok\n"
        marker = f"{6000 + uuid.uuid4().int % 3999}.{uuid.uuid4().int % 967}"
        assert s.exec(f"setsid sleep {marker} & sleep {marker}", timeout=0.5).timed_out
        end = time.monotonic() + 5
        while host_procs_with(f"sleep\0{marker}") and time.monotonic() < end:
            time.sleep(0.05)
        assert host_procs_with(f"sleep\0{marker}") == []


SPIN = "import time; t = time.time()\nwhile time.time() - t < 1.5: pass\nprint(round(time.process_time(), 2))"


def test_cpu_limits(bwrap_factory, docker_factory):
    with get_factory("bwrap", SandboxConfig(cpus=0.25, memory_mb=256, pids=64, disk_mb=16)) as f, f.open() as s:
        if s._cg is not None:
            assert s._cg.cpu_quota() == pytest.approx(0.25)
            used = float(s.exec(["python3", "-c", SPIN]).stdout)
            assert used <= 0.25 * 1.5 + 0.2  # 1.5 s of wall clock at a quarter of a CPU
    with docker_factory.open() as s:
        hc = docker_factory.client.api.inspect_container(s.container_id)["HostConfig"]
        cfg = docker_factory.config
        assert hc["NanoCpus"] == int(cfg.cpus * 1e9) and hc["PidsLimit"] == cfg.pids
        assert hc["Memory"] == cfg.memory_mb << 20 and hc["ReadonlyRootfs"] and hc["NetworkMode"] == "none"
        assert hc["CapDrop"] == ["ALL"] and "no-new-privileges" in hc["SecurityOpt"]


LEAVE_STATE = r"""
import ctypes, os
l = ctypes.CDLL(None, use_errno=True)
l.syscall.restype = ctypes.c_long
assert l.shmget(1234, 4096, 0o1666) >= 0  # SysV shared memory
assert l.mq_open(b"/q1", os.O_CREAT | os.O_RDWR, 0o600, None) >= 0  # POSIX message queue
serial = l.syscall(248, b"user", b"cgkey", b"secret", 6, -4)  # a key in the user keyring (x86_64 add_key)
assert serial > 0
print(serial)
"""
READ_KEY = r"""
import ctypes, sys
l = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(64)
n = l.syscall(250, 11, int(sys.argv[1]), buf, 64)  # keyctl(KEYCTL_READ, serial): the key's payload
print(buf.raw[:n].decode() if n >= 0 else "unreadable")
"""
STATE_CHECK = ("ls -A /tmp /dev/shm /dev/mqueue ~ | tr '\\n' ' '; echo; tail -n +2 /proc/sysvipc/shm | wc -l; "
               "grep -c cgkey /proc/keys; ps -e --no-headers -o comm | grep -c sleep")


def test_bwrap_server_pool_recycles_clean_sandboxes(bwrap_factory):
    """Server mode: sandboxes are started ahead (open is fast); the exec server survives kill -9 from
    inside; a closed sandbox is reset and reused, and nothing of the previous task is left in it."""
    # shm_rmid_forced off: the SysV segment outlives its process, so the reset must be what removes it
    with get_factory("bwrap", SandboxConfig(memory_mb=256, pids=64, disk_mb=16, shm_rmid_forced=False), pool_size=1,
                     max_idle=2) as f:
        if not f.server:
            pytest.skip("server mode needs root and cgroups (the per-exec fallback is tested everywhere)")
        assert f.warm(60)
        t0 = time.monotonic()
        s1 = f.open([File(path="a.txt", content=b"one")])
        assert time.monotonic() - t0 < 0.5 and s1.server_mode
        pid1 = s1._proc.pid
        r = s1.exec("sleep 300 & kill -9 1; kill -9 -1; cat a.txt")
        assert r.rc == 137  # `kill -9 -1` killed the command, not the server (pid 1 ignores it)
        assert s1.exec("echo ok").stdout == "ok\n"
        assert os.path.exists(s1._sock) and not s1.exec(f"test -e {s1._sock}").ok  # host-only socket
        x86 = os.uname().machine == "x86_64"
        if x86:
            r = s1.exec(["python3", "-c", LEAVE_STATE])
            assert r.ok, r.stderr
            serial = r.stdout.strip()
            assert s1.exec(["python3", "-c", READ_KEY, serial]).stdout == "secret\n"
        s1.exec("echo x > /tmp/x; echo y > /dev/shm/y; mkdir ~/.cache; touch ~/.cache/z; (setsid sleep 301 &); "
                "touch /dev/evil; rm -f /dev/stdout")  # /dev itself is read-only
        before = s1.exec(STATE_CHECK).stdout.splitlines()
        assert before[0].split() == ["/dev/mqueue:"] + (["q1"] if x86 else []) + ["/dev/shm:", "y", "/root:", ".cache",
                                     ".openclaw", "/tmp:", "x"]
        assert before[1:] == (["1", "1"] if x86 else ["0", "0"]) + ["0"]  # background jobs die with their exec
        assert s1.exec("test -L /dev/stdout && test ! -e /dev/evil").ok
        s1.close()
        assert f.settle(30)
        with f.open() as s2:
            assert s2._proc.pid == pid1 and f.stats["recycled"] == 1  # the same sandbox, reset
            if x86:  # the reset unlinked the old key: unreadable by its serial at once
                assert s2.exec(["python3", "-c", READ_KEY, serial]).stdout == "unreadable\n"
            deadline = time.monotonic() + 10
            while True:  # an invalidated key stays listed in /proc/keys until the kernel's key GC runs
                after = s2.exec(STATE_CHECK + "; ls -A").stdout.splitlines()
                if after[2] == "0" or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert after[0].split() == ["/dev/mqueue:", "/dev/shm:", "/root:", ".openclaw", "/tmp:"]
            assert after[1:] == ["0", "0", "0"]  # no IPC object, key or process; the workspace is empty
        assert f.settle(30)
    assert not os.path.exists(s2._state.path)  # factory.close() tore the pooled sandbox down
    assert all(not os.path.exists(f"/proc/{p}") or open(f"/proc/{p}/stat").read().split()[2] == "Z" for p in s2._keep)
