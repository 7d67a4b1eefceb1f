"""bubblewrap on this host: finding it (`bwrap_path`, `available`), probing its features (`_supports`), the
debootstrapped root (`find_rootfs`) and the read-only system binds (`_system_args`)."""

from __future__ import annotations

import os
import shutil
import subprocess

from clawgym.sandbox.base import SandboxConfig, SandboxError
from clawgym.sandbox.host.statedir import SANDBOX_GID, SANDBOX_UID

DEFAULT_ROOTFS = "/var/lib/clawgym/rootfs"
STAMP = ".clawgym-stamp"
_SKIP_TOP = {"proc", "dev", "sys", "tmp", "root", "home", "run", "boot", "media", "mnt", "srv",
             "lost+found"}
_HOST_TOP = ["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt"]


def find_rootfs(config: SandboxConfig) -> str | None:
    """The debootstrapped root to use, or None for the host's system dirs."""
    cand = config.rootfs or os.environ.get("CLAWGYM_ROOTFS") or DEFAULT_ROOTFS
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
