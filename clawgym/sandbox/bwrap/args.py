"""bubblewrap on this host: finding it (`bwrap_path`, `available`), probing its features (`_supports`), the
debootstrapped root (`find_rootfs`), the read-only system binds (`_system_args`) and the seccomp program of the
clean rooms (`no_keyrings_filter`)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess

from clawgym.sandbox.base import SandboxConfig, SandboxError
from clawgym.sandbox.host.statedir import SANDBOX_GID, SANDBOX_UID

DEFAULT_ROOTFS = "/var/lib/clawgym/rootfs"
STAMP = ".clawgym-stamp"
_SKIP_TOP = {"proc", "dev", "sys", "tmp", "root", "home", "run", "boot", "media", "mnt", "srv",
             "lost+found"}
_HOST_TOP = ["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt"]


def find_rootfs(config: SandboxConfig) -> str | None:
    """The debootstrapped root to use, or None for the host's system dirs: config.rootfs (it must be built), else
    config.default_rootfs when it is built ("host": never)."""
    cand = config.rootfs or config.default_rootfs or DEFAULT_ROOTFS
    if cand == "host":
        return None
    if os.path.isfile(os.path.join(cand, STAMP)) and os.path.isdir(os.path.join(cand, "usr")):
        return cand
    if config.rootfs:
        raise SandboxError(f"rootfs {config.rootfs} is not built (run scripts/build_sandbox_image.sh)")
    return None


def bwrap_path() -> str | None:
    """Path of the bwrap binary, or None when it is not installed."""
    return shutil.which("bwrap")


_features: dict[str, bool] = {}


def _supports(flag: str) -> bool:
    """Whether this bwrap knows `flag` (e.g. --disable-userns needs bubblewrap >= 0.8)."""
    if flag not in _features:
        try:
            h = subprocess.run([bwrap_path() or "bwrap", "--help"], capture_output=True, text=True, timeout=10)
            _features[flag] = flag in h.stdout + h.stderr
        except (OSError, subprocess.TimeoutExpired):
            _features[flag] = False
    return _features[flag]


def available() -> tuple[bool, str]:
    """(True, "") when bwrap can create a sandbox here, else (False, reason)."""
    b = bwrap_path()
    if not b:
        return False, "bwrap is not installed (apt-get install bubblewrap)"
    argv = [b, "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"]
    if os.geteuid() == 0:
        argv = ["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_GID}", "--clear-groups"] + argv
    try:
        p = subprocess.run(argv, capture_output=True, timeout=20, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"bwrap failed to start: {e}"
    if p.returncode != 0:
        return False, f"bwrap cannot create namespaces here: {p.stderr.decode(errors='replace').strip()}"
    return True, ""


def _system_args(rootfs: str | None) -> list[str]:
    args: list[str] = []
    if rootfs:
        for name in sorted(os.listdir(rootfs)):
            if name in _SKIP_TOP or name.startswith("."):
                continue
            src = os.path.join(rootfs, name)
            if os.path.islink(src):
                args += ["--symlink", os.readlink(src), "/" + name]
            elif os.path.isdir(src):
                args += ["--ro-bind", src, "/" + name]
    else:
        for name in _HOST_TOP:
            src = "/" + name
            if os.path.islink(src):
                args += ["--symlink", os.readlink(src), src]
            elif os.path.isdir(src):
                args += ["--ro-bind", src, src]
        for secret in ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-"):
            if os.path.exists(secret):
                args += ["--ro-bind", "/dev/null", secret]
    return args


# ---- a seccomp filter without keyrings (bwrap --seccomp) -----------------------------------------------------
# (audit arch, mask applied to the syscall number, numbers of add_key, request_key, keyctl) per ABI a kernel of
# this machine runs: x86_64 (its x32 numbers carry bit 30, masked away) with i386, aarch64 with arm
_KEYRING_SYSCALLS = {
    "x86_64": ((0xC000003E, 0xBFFFFFFF, (248, 249, 250)), (0x40000003, 0xFFFFFFFF, (286, 287, 288))),
    "aarch64": ((0xC00000B7, 0xFFFFFFFF, (217, 218, 219)), (0x40000028, 0xFFFFFFFF, (309, 310, 311))),
}
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_AND_K, _BPF_RET_K = 0x20, 0x15, 0x54, 0x06
_SECCOMP_RET_ALLOW, _SECCOMP_RET_EPERM = 0x7FFF0000, 0x00050001


def no_keyrings_filter(machine: str | None = None) -> bytes | None:
    """A classic-BPF seccomp program (what `bwrap --seccomp FD` reads) that refuses add_key, request_key and keyctl
    with EPERM, as docker's default profile does, and allows every other call; None on an architecture it does not
    know. A sandbox started with it can never hold a kernel key, so its reset need not clear keyrings from inside."""
    table = _KEYRING_SYSCALLS.get(machine or os.uname().machine)
    if table is None:
        return None
    prog: list[tuple[int, int, int, int]] = [(_BPF_LD_W_ABS, 0, 0, 4)]  # A = seccomp_data.arch
    denies: list[int] = []  # indexes of the jumps to the final EPERM
    for arch, mask, nrs in table:
        body = 2 + len(nrs) + 1  # load nr, mask, one test per call, allow
        prog.append((_BPF_JEQ_K, 0, body, arch))  # another ABI: skip this block (A still holds the arch)
        prog.append((_BPF_LD_W_ABS, 0, 0, 0))  # A = seccomp_data.nr
        prog.append((_BPF_AND_K, 0, 0, mask))
        for nr in nrs:
            denies.append(len(prog))
            prog.append((_BPF_JEQ_K, 0, 0, nr))
        prog.append((_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW))
    prog.append((_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW))  # an ABI this kernel does not run
    deny = len(prog)
    prog.append((_BPF_RET_K, 0, 0, _SECCOMP_RET_EPERM))
    for i in denies:
        code, _jt, jf, k = prog[i]
        prog[i] = (code, deny - i - 1, jf, k)
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)
