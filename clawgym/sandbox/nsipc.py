"""Host-side cleanup of a sandbox's IPC namespace (used by quiesce() and the recycling resets).

The in-sandbox "reset" op of the exec server removes IPC objects as the sandbox user, in a process forked
inside the sandbox: when the agent filled the memory cgroup with SysV shared memory, that fork itself may
have no memory left. This runs on the host instead and charges nothing to the sandbox: a short-lived helper
process (setns needs a single-threaded caller) joins the sandbox's IPC namespace through
/proc/<pid>/ns/ipc (host root holds every capability over it) and removes every SysV shm segment,
semaphore set and message queue, then unlinks every POSIX message queue (listed through
/proc/<pid>/root/dev/mqueue, the sandbox's own read-only /dev). Nothing in the sandbox can influence it:
it reads only kernel tables and never follows a path the sandbox user can write.
"""

from __future__ import annotations

import os
import subprocess
import sys

_HELPER = r"""
import ctypes, os, sys
pid = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(f"/proc/{pid}/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
if libc.setns(fd, 0x08000000) != 0:  # CLONE_NEWIPC
    e = ctypes.get_errno()
    sys.exit(f"setns ipc of {pid}: {os.strerror(e)}")
os.close(fd)

def ids(kind):
    try:
        with open(f"/proc/sysvipc/{kind}") as f:
            return [int(ln.split()[1]) for ln in f.read().splitlines()[1:] if ln.split()]
    except OSError:
        return []

for _ in range(3):
    for i in ids("shm"):
        libc.shmctl(i, 0, None)  # IPC_RMID: freed once nothing has it attached (nothing runs any more)
    for i in ids("sem"):
        libc.semctl(i, 0, 0)
    for i in ids("msg"):
        libc.msgctl(i, 0, None)
    if not (ids("shm") or ids("sem") or ids("msg")):
        break
left = [f"{k} {i}" for k in ("shm", "sem", "msg") for i in ids(k)]
try:
    mq = os.open(f"/proc/{pid}/root/dev/mqueue", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
except OSError:
    mq = None
if mq is not None:
    for n in os.listdir(mq):
        try:
            os.unlink(n, dir_fd=mq)
        except OSError as e:
            left.append(f"mqueue {n!r}: {e}")
    left += [f"mqueue {n!r}" for n in os.listdir(mq)]
print("\n".join(left))
sys.exit(1 if left else 0)
"""


def clear_ipc(pid: int, timeout: float = 20.0) -> tuple[bool, str]:
    """Remove every SysV IPC object and POSIX message queue of the IPC namespace of host pid `pid` (needs
    root). -> (True, "") or (False, what is left / why)."""
    if os.geteuid() != 0:
        return False, "needs root"
    try:
        p = subprocess.run([sys.executable, "-I", "-S", "-c", _HELPER, str(int(pid))], capture_output=True,
                           timeout=timeout, cwd="/", env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    if p.returncode != 0:
        return False, (p.stdout + p.stderr).decode(errors="replace").strip()[:500]
    return True, ""


def set_oom_score_adj(pid: int, value: int) -> bool:
    """Write /proc/<pid>/oom_score_adj from the host (root: this also sets the process's minimum, which its
    children inherit)."""
    try:
        with open(f"/proc/{int(pid)}/oom_score_adj", "w") as f:
            f.write(str(int(value)))
        return True
    except OSError:
        return False
