"""Sandboxes: one protocol, three backends (docker, bwrap, local)."""

from clawgym.sandbox.base import (  # noqa: F401
    ExecResult, Sandbox, SandboxConfig, SandboxError, SandboxFactory,
)


def get_factory(backend: str = "auto", config: "SandboxConfig | None" = None) -> SandboxFactory:
    """auto = docker when an engine answers, else bwrap. local only when asked for by name."""
    from clawgym.sandbox.registry import get_factory as _get

    return _get(backend, config)
