"""Host-side cleanup of a sandbox's IPC namespace (used by quiesce() and the recycling resets).

The in-sandbox "reset" op of the exec server removes IPC objects as the sandbox user, in a process forked
inside the sandbox: when the agent filled the memory cgroup with SysV shared memory, that fork itself may
have no memory left. This runs on the host instead and charges nothing to the sandbox: a short-lived helper
thread (setns moves only the calling thread) joins the sandbox's IPC namespace through
/proc/<pid>/ns/ipc (host root holds CAP_SYS_ADMIN over it) and removes every SysV shm segment,
semaphore set and message queue, then unlinks every POSIX message queue (listed through
/proc/<pid>/root/dev/mqueue, the sandbox's own read-only /dev). Nothing in the sandbox can influence it:
it reads only kernel tables and never follows a path the sandbox user can write.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import threading

log = logging.getLogger(__name__)

_CLONE_NEWIPC = 0x08000000
_SYS_SETRESUID = {"x86_64": 117, "aarch64": 147}
_libc = None


def _lib():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def in_ipc_ns(pid: int, fn, timeout: float = 20.0):
    """Run fn() on a short-lived host thread that joined the IPC namespace of host pid `pid` (setns moves
    only the calling thread; it exits afterwards). Raises OSError when it cannot join."""
    out: dict = {}

    def run():
        try:
            fd = os.open(f"/proc/{int(pid)}/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _lib().setns(fd, _CLONE_NEWIPC) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, f"setns ipc of {pid}: {os.strerror(e)}")
            finally:
                os.close(fd)
            out["v"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            out["e"] = e

    t = threading.Thread(target=run, name="clawgym-ipc-ns", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise OSError(errno.ETIMEDOUT, "ipc namespace helper did not finish")
    if "e" in out:
        raise out["e"]
    return out.get("v")


def _ids(kind: str) -> list[int]:
    try:
        with open(f"/proc/sysvipc/{kind}") as f:
            return [int(ln.split()[1]) for ln in f.read().splitlines()[1:] if ln.split()]
    except OSError:
        return []


def _clear_here(pid: int) -> list[str]:
    libc = _lib()
    for _ in range(3):
        for i in _ids("shm"):
            libc.shmctl(i, 0, None)  # IPC_RMID: freed as nothing has it attached (nothing runs any more)
        for i in _ids("sem"):
            libc.semctl(i, 0, 0)
        for i in _ids("msg"):
            libc.msgctl(i, 0, None)
        if not (_ids("shm") or _ids("sem") or _ids("msg")):
            break
    left = [f"{k} {i}" for k in ("shm", "sem", "msg") for i in _ids(k)]
    try:
        mq = os.open(f"/proc/{int(pid)}/root/dev/mqueue", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return left
    try:
        for n in os.listdir(mq):
            try:
                os.unlink(n, dir_fd=mq)
            except OSError as e:
                left.append(f"mqueue {n!r}: {e}")
        left += [f"mqueue {n!r}" for n in os.listdir(mq)]
    finally:
        os.close(mq)
    return left


def clear_ipc(pid: int, timeout: float = 20.0) -> tuple[bool, str]:
    """Remove every SysV IPC object and POSIX message queue of the IPC namespace of host pid `pid` (needs
    root). -> (True, "") or (False, what is left / why)."""
    if os.geteuid() != 0:
        return False, "needs root"
    try:
        left = in_ipc_ns(pid, lambda: _clear_here(pid), timeout)
    except OSError as e:
        return False, str(e)
    return (not left), "\n".join(left)[:500]


def force_shm_rmid(pid: int, on: bool = True) -> bool:
    """kernel.shm_rmid_forced=1 in the IPC namespace of host pid `pid`: a SysV shared memory segment is
    destroyed as soon as no process has it attached, so shared memory cannot outlive the agent's processes
    and keep the sandbox's memory cgroup full (per IPC namespace; host root may write it for a namespace
    whose sysctls belong to root, as in docker; for bwrap's the helper thread becomes their owner, the
    sandbox user's host uid). on=False turns it off again (tests). -> whether it is set as asked."""
    want = "1" if on else "0"

    def write():
        path = "/proc/sys/kernel/shm_rmid_forced"
        try:
            with open(path, "w") as f:
                f.write(want)
        except PermissionError:
            # the namespace's sysctls belong to its owner (bwrap: the sandbox user's host uid); without
            # CAP_SYS_RESOURCE root may not write them, the owner may: become it on this thread only (a raw
            # setresuid changes the calling thread's credentials; the thread ends right after)
            nr = _SYS_SETRESUID.get(os.uname().machine)
            owner = os.stat(path).st_uid
            if nr is None or owner == 0 or _lib().syscall(nr, -1, owner, -1) != 0:
                raise
            with open(path, "w") as f:
                f.write(want)
        with open(path) as f:
            return f.read().strip() == want

    if os.geteuid() != 0:
        return False
    try:
        return bool(in_ipc_ns(pid, write))
    except OSError as e:
        log.info("kernel.shm_rmid_forced not set for the sandbox: %s", e)
        return False


def set_oom_score_adj(pid: int, value: int) -> bool:
    """Write /proc/<pid>/oom_score_adj from the host; lowering it below 0 needs CAP_SYS_RESOURCE (with it,
    this also sets the process's minimum, which its children inherit)."""
    try:
        with open(f"/proc/{int(pid)}/oom_score_adj", "w") as f:
            f.write(str(int(value)))
        return True
    except OSError:
        return False
