"""Make the sandbox prerequisites exist: a Docker engine, the offline rootfs, the docker image.

All three call the repo scripts (idempotent) and return quickly when things already exist.
"""

from __future__ import annotations

import os
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


def ensure_docker(timeout: float = 90) -> str:
    """Start dockerd when no engine answers (scripts/start_dockerd.sh); sets and returns DOCKER_HOST."""
    host = _run("start_dockerd.sh", timeout=timeout).splitlines()[-1].strip()
    if host:
        os.environ["DOCKER_HOST"] = host
    return host


def ensure_rootfs(timeout: float = 900) -> str:
    """Debootstrap the sandbox root (skipped when already built); returns its path."""
    _run("build_sandbox_image.sh", "--rootfs-only", timeout=timeout)
    return os.environ.get("CLAWGYM_ROOTFS", "/var/lib/clawgym/rootfs")


def ensure_image(timeout: float = 900) -> str:
    """Build the rootfs if needed and `docker import` it as clawgym-sandbox:latest (skipped when
    the image is current). Needs a running engine (ensure_docker())."""
    _run("build_sandbox_image.sh", timeout=timeout)
    return os.environ.get("CLAWGYM_IMAGE", "clawgym-sandbox:latest")
