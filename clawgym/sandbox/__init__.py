"""Sandboxes: one protocol, three backends (docker, bwrap, local).

  from clawgym.sandbox import get_factory, SandboxConfig
  with get_factory("auto", SandboxConfig(memory_mb=1024)) as factory:   # docker if it answers, else bwrap
      with factory.open(task.files) as sb:                              # workspace: /root/.openclaw/workspace
          r = sb.exec("python3 check.py", timeout=30)                   # ExecResult(rc, stdout, stderr, timed_out, ...)
          files = sb.snapshot()

Setup: scripts/start_dockerd.sh (an engine), scripts/build_sandbox_image.sh (rootfs + image, offline);
or from Python clawgym.sandbox.images.ensure_docker()/ensure_rootfs()/ensure_image().
Pools (docker, bwrap: clawgym.sandbox.pool): factory.warm(), settle(), idle(), stats.
Leftovers of crashed runs: `python -m clawgym.sandbox.host.cleanup`. Overhead: `python -m clawgym.sandbox.bench`.
Host-side file access raises OSError subclasses (FileNotFoundError, IsADirectoryError,
PermissionError for symlinks/FIFOs/paths outside the workspace and /tmp); infra failures SandboxError.
"""

from clawgym.sandbox.base import (  # noqa: F401
    ExecResult,
    Sandbox,
    SandboxConfig,
    SandboxError,
    SandboxFactory,
)
from clawgym.sandbox.registry import sandbox_backend  # noqa: F401


def get_factory(backend: str = "auto", config: "SandboxConfig | None" = None, **kwargs) -> SandboxFactory:
    """A factory of the registered backend `backend` (clawgym.sandbox.registry). auto = the first available of
    docker (an engine answers and has the image), bwrap; local only when asked for by name. kwargs go to the
    backend's factory (docker: pool_size=2)."""
    from clawgym.sandbox.registry import get_factory as _get

    return _get(backend, config, **kwargs)
