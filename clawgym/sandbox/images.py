"""Make the sandbox prerequisites exist: a Docker engine, the offline rootfs, the docker image.

All three call the repo scripts (idempotent) and return quickly when things already exist. The scripts read their
own settings ($CLAWGYM_ROOTFS, $CLAWGYM_IMAGE, $DOCKER_HOST) unless given as arguments, and print what they used.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from clawgym.sandbox.base import SandboxError

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _run(script: str, *args: str, timeout: float) -> str:
    path = SCRIPTS / script
    if not path.exists():
        raise SandboxError(f"{path} not found (clawgym is not installed from a source checkout)")
    try:
        p = subprocess.run(["bash", str(path), *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise SandboxError(f"{script} timed out after {timeout:.0f}s") from e
    if p.returncode != 0:
        raise SandboxError(f"{script} failed (rc={p.returncode}): {p.stderr.strip()[-2000:]}")
    return p.stdout.strip()


def _printed(out: str, key: str) -> str:
    """The value of the last `key=<value>` line a script printed on stdout."""
    vals = [ln.split("=", 1)[1].strip() for ln in out.splitlines() if ln.startswith(key + "=")]
    if not vals:
        raise SandboxError(f"build_sandbox_image.sh printed no {key}= line")
    return vals[-1]


def ensure_docker(timeout: float = 90) -> str:
    """Start dockerd when no engine answers (scripts/start_dockerd.sh); returns the DOCKER_HOST to use. This
    process's environment is left as it is: an entry point that wants its docker clients on that engine exports it
    (``os.environ["DOCKER_HOST"] = ensure_docker()``)."""
    return _run("start_dockerd.sh", timeout=timeout).splitlines()[-1].strip()


def ensure_rootfs(timeout: float = 900, rootfs: str | None = None) -> str:
    """Debootstrap the sandbox root (skipped when already built) in `rootfs` (None: the script's default,
    $CLAWGYM_ROOTFS else /var/lib/clawgym/rootfs); returns its path (SandboxConfig.default_rootfs / rootfs)."""
    out = _run("build_sandbox_image.sh", "--rootfs-only", *(("--rootfs", rootfs) if rootfs else ()), timeout=timeout)
    return _printed(out, "rootfs")


def ensure_image(timeout: float = 900, rootfs: str | None = None, image: str | None = None) -> str:
    """Build the rootfs if needed and `docker import` it as `image` (None: the script's default, $CLAWGYM_IMAGE else
    clawgym-sandbox:latest), skipped when the image is current; returns the image's name (SandboxConfig.image).
    Needs a running engine (ensure_docker())."""
    out = _run("build_sandbox_image.sh", *(("--rootfs", rootfs) if rootfs else ()),
               *(("--image", image) if image else ()), timeout=timeout)
    return _printed(out, "image")
