"""Per-sandbox memory + pids limits through a cgroup (v1 or v2, whichever the machine has).

`Cgroup.create(name, memory_mb, pids)` returns None when no writable cgroup hierarchy is
available; callers then fall back to prlimit (per-process limits).
"""

from __future__ import annotations

import logging
import os
import signal
import time

log = logging.getLogger(__name__)

ROOT = "/sys/fs/cgroup"


def _own_path_v1(controller: str) -> str:
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if controller in ctrls.split(","):
                    return path
    except OSError:
        pass
    return "/"


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def mode() -> str | None:
    """'v1', 'v2' or None."""
    if os.path.exists(os.path.join(ROOT, "cgroup.controllers")):
        return "v2"
    if os.path.isdir(os.path.join(ROOT, "memory")) and os.path.isdir(os.path.join(ROOT, "pids")):
        return "v1"
    return None


class Cgroup:
    """The cgroup (v1: one directory per controller, v2: one directory) that limits one sandbox."""

    def __init__(self, dirs: list[str], version: str):
        self.dirs = dirs  # one per controller (v1) or a single one (v2)
        self.version = version

    # -- creation ---------------------------------------------------------------------------
    @classmethod
    def create(cls, name: str, memory_mb: int, pids: int, cpus: float | None = None) -> Cgroup | None:
        """memory + pids are required (else None); a CPU quota is added where the cpu controller
        is available (v1: cpu.cfs_quota_us, v2: cpu.max)."""
        if os.geteuid() != 0:  # a caller told not to use cgroups (SandboxConfig.cgroups) does not call this
            return None
        m = mode()
        try:
            if m == "v1":
                cg = cls._create_v1(name, memory_mb, pids)
            elif m == "v2":
                cg = cls._create_v2(name, memory_mb, pids)
            else:
                return None
        except OSError as e:
            log.info("no cgroup for sandbox limits (%s); falling back to prlimit", e)
            return None
        if cpus:
            cg._limit_cpu(name, float(cpus))
        return cg

    def _limit_cpu(self, name: str, cpus: float) -> None:
        period = 100_000
        quota = max(1000, int(cpus * period))
        try:
            if self.version == "v1":
                d = os.path.join(ROOT, "cpu", _own_path_v1("cpu").lstrip("/"), name)
                os.mkdir(d)
                self.dirs.append(d)
                _write(os.path.join(d, "cpu.cfs_period_us"), str(period))
                _write(os.path.join(d, "cpu.cfs_quota_us"), str(quota))
                burst = os.path.join(d, "cpu.cfs_burst_us")
            else:
                _write(os.path.join(self.dirs[0], "cpu.max"), f"{quota} {period}")
                burst = os.path.join(self.dirs[0], "cpu.max.burst")
            # let a sandbox save one period's unused quota for a burst (kernel >= 5.14): a command start is
            # bwrap + bash + python at once, and without burst it was throttled to the next 100 ms period
            # (~20 ms more per verification here); the long-run average stays at `cpus`
            if os.path.exists(burst):
                try:
                    _write(burst, str(quota))
                except OSError:
                    pass
        except OSError as e:
            log.info("no CPU quota for the sandbox: %s", e)

    def cpu_quota(self) -> float | None:
        """The CPU limit in cpus, None without one."""
        for d in self.dirs:
            q = os.path.join(d, "cpu.cfs_quota_us")
            if os.path.exists(q):
                with open(q) as f, open(os.path.join(d, "cpu.cfs_period_us")) as g:
                    quota, period = int(f.read()), int(g.read())
                return None if quota < 0 else quota / period
            q = os.path.join(d, "cpu.max")
            if os.path.exists(q):
                with open(q) as f:
                    max_quota, max_period = f.read().split()  # cgroup v2: "<quota|max> <period>"
                return None if max_quota == "max" else int(max_quota) / int(max_period)
        return None

    @classmethod
    def _create_v1(cls, name, memory_mb, pids):
        dirs = []
        try:
            for ctrl in ("memory", "pids"):
                d = os.path.join(ROOT, ctrl, _own_path_v1(ctrl).lstrip("/"), name)
                os.mkdir(d)
                dirs.append(d)
            mem, pid = dirs
            limit = str(int(memory_mb) * 1024 * 1024)
            _write(os.path.join(mem, "memory.limit_in_bytes"), limit)
            try:
                _write(os.path.join(mem, "memory.memsw.limit_in_bytes"), limit)
            except OSError:
                pass
            _write(os.path.join(pid, "pids.max"), str(int(pids)))
        except BaseException:
            for d in dirs:
                try:
                    os.rmdir(d)
                except OSError:
                    pass
            raise
        return cls(dirs, "v1")

    @classmethod
    def _create_v2(cls, name, memory_mb, pids):
        parent = os.path.join(ROOT, "clawgym")
        os.makedirs(parent, exist_ok=True)
        for d in (ROOT, parent):
            with open(os.path.join(d, "cgroup.subtree_control")) as f:
                have = f.read().split()
            with open(os.path.join(d, "cgroup.controllers")) as f:
                avail = f.read().split()
            want = [c for c in ("memory", "pids", "cpu") if c not in have and (c != "cpu" or c in avail)]
            if want:
                _write(os.path.join(d, "cgroup.subtree_control"), " ".join("+" + c for c in want))
        d = os.path.join(parent, name)
        os.mkdir(d)
        try:
            _write(os.path.join(d, "memory.max"), str(int(memory_mb) * 1024 * 1024))
            try:
                _write(os.path.join(d, "memory.swap.max"), "0")
            except OSError:
                pass
            _write(os.path.join(d, "pids.max"), str(int(pids)))
        except BaseException:
            os.rmdir(d)
            raise
        return cls([d], "v2")

    # -- use ----------------------------------------------------------------------------------
    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def shell_join_prefix(self) -> list[str]:
        """argv prefix that moves the process into this cgroup, then execs the rest."""
        script = " && ".join(f'echo $$ > "{p}"' for p in self.procs_files()) + ' && exec "$@"'
        return ["/bin/sh", "-c", script, "sh"]

    def pids(self) -> list[int]:
        out: set[int] = set()
        for p in self.procs_files():
            try:
                with open(p) as f:
                    out.update(int(x) for x in f.read().split())
            except (OSError, ValueError):
                pass
        return sorted(out)

    def kill_all(self, timeout: float = 5.0, keep: frozenset[int] | set[int] = frozenset()) -> bool:
        """SIGKILL every process in the cgroup except `keep` until none is left (loops: a fork bomb respawns)."""
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while True:
            pids = [p for p in self.pids() if p not in keep]
            if not pids:
                return True
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if time.monotonic() > deadline:
                log.warning("cgroup %s still has processes %s", self.dirs, pids[:10])
                return False
            time.sleep(delay)  # SIGKILLed processes leave the cgroup within a millisecond or two
            delay = min(delay * 2, 0.05)

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs:
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the last process is being reaped
                    time.sleep(0.01)


def our_cgroups(prefix: str) -> list[str]:
    """Cgroup dirs whose name starts with prefix (under our own v1 paths or the v2 parent)."""
    out = []
    m = mode()
    bases = []
    if m == "v1":
        for ctrl in ("memory", "pids", "cpu"):
            bases.append(os.path.join(ROOT, ctrl, _own_path_v1(ctrl).lstrip("/")))
    elif m == "v2":
        bases.append(os.path.join(ROOT, "clawgym"))
    for b in bases:
        try:
            for n in os.listdir(b):
                if n.startswith(prefix) and os.path.isdir(os.path.join(b, n)):
                    out.append(os.path.join(b, n))
        except OSError:
            pass
    return out
