"""Sandboxes: one protocol, three backends (docker, bwrap, local)."""

from clawgym.sandbox.base import (  # noqa: F401
    ExecResult, Sandbox, SandboxConfig, SandboxError, SandboxFactory,
)


def get_factory(backend: str = "auto", config: "SandboxConfig | None" = None, **kwargs) -> SandboxFactory:
    """auto = docker when an engine answers (and has the image), else bwrap. local only when asked
    for by name. kwargs go to the backend's factory (docker: pool_size=2)."""
    from clawgym.sandbox.registry import get_factory as _get

    return _get(backend, config, **kwargs)
