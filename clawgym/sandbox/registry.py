"""Backend selection: get_factory("auto" | "docker" | "bwrap" | "local", config, **kwargs).

auto = docker when an engine answers and the image exists, else bwrap. local is never chosen
automatically. CLAWGYM_SANDBOX=<name> overrides "auto".
"""

from __future__ import annotations

import logging
import os

from clawgym.sandbox.base import SandboxConfig, SandboxError, SandboxFactory

log = logging.getLogger(__name__)

BACKENDS = ("docker", "bwrap", "local")


def resolve_auto(config: SandboxConfig | None = None) -> str:
    """Which backend "auto" means on this machine right now."""
    env = os.environ.get("CLAWGYM_SANDBOX")
    if env and env != "auto":
        if env not in BACKENDS:
            raise SandboxError(f"CLAWGYM_SANDBOX={env!r}: must be one of {BACKENDS} or auto")
        return env
    from clawgym.sandbox import docker_backend

    ok, why = docker_backend.available((config or SandboxConfig()).image)
    if ok:
        return "docker"
    log.info("sandbox auto: not docker (%s); using bwrap", why)
    return "bwrap"


def get_factory(backend: str = "auto", config: SandboxConfig | None = None, **kwargs) -> SandboxFactory:
    """A factory for `backend`. kwargs go to the backend (docker: pool_size=2)."""
    config = config or SandboxConfig()
    if backend == "auto":
        backend = resolve_auto(config)
    if backend == "docker":
        from clawgym.sandbox.docker_backend import DockerFactory

        return DockerFactory(config, **kwargs)
    if backend == "bwrap":
        from clawgym.sandbox.bwrap_backend import BwrapFactory

        return BwrapFactory(config, **kwargs)
    if backend == "local":
        from clawgym.sandbox.local_backend import LocalFactory

        return LocalFactory(config, **kwargs)
    raise SandboxError(f"unknown sandbox backend {backend!r}: one of auto, {', '.join(BACKENDS)}")
