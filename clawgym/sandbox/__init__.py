"""Sandboxes: one protocol, three backends (docker, bwrap, local).

  from clawgym.sandbox import get_factory, SandboxConfig
  with get_factory("auto", SandboxConfig(memory_mb=1024)) as factory:   # docker if it answers, else bwrap
      with factory.open(task.files) as sb:                              # workspace: /root/.openclaw/workspace
          r = sb.exec("python3 check.py", timeout=30)                   # ExecResult(rc, stdout, stderr, timed_out, ...)
          files = sb.snapshot()

Setup: scripts/start_dockerd.sh (an engine), scripts/build_sandbox_image.sh (rootfs + image, offline);
or from Python clawgym.sandbox.images.ensure_docker()/ensure_rootfs()/ensure_image().
Where this host keeps things (the built root, the state dirs' folder, tmpfs / cgroups allowed, execd staged) are
SandboxConfig fields; an entry point maps its environment onto them with `host_settings(os.environ)`.
Pools (docker, bwrap: clawgym.sandbox.pool): factory.warm(), settle(), idle(), stats.
Leftovers of crashed runs: `clawgym sandbox cleanup` (or `python -m clawgym.sandbox.host.cleanup --state-root DIR`).
Overhead: `python -m clawgym.sandbox.bench`.
Host-side file access raises OSError subclasses (FileNotFoundError, IsADirectoryError,
PermissionError for symlinks/FIFOs/paths outside the workspace and /tmp); infra failures SandboxError.
"""

from collections.abc import Mapping
from typing import Any

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


def host_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The SandboxConfig host-fact fields that an entry point's environment `env` sets (the entry point passes its
    own: ``SandboxConfig(**host_settings(os.environ), memory_mb=...)``): $CLAWGYM_ROOTFS -> default_rootfs,
    $CLAWGYM_SANDBOX_TMP -> state_root, $CLAWGYM_SANDBOX_NO_TMPFS=1 -> tmpfs=False, $CLAWGYM_SANDBOX_NO_CGROUP=1 ->
    cgroups=False, $CLAWGYM_EXECD_STAGE=1 -> stage_execd=True. Variables unset (or empty) give no field."""
    out: dict[str, Any] = {}
    if env.get("CLAWGYM_ROOTFS"):
        out["default_rootfs"] = env["CLAWGYM_ROOTFS"]
    if env.get("CLAWGYM_SANDBOX_TMP"):
        out["state_root"] = env["CLAWGYM_SANDBOX_TMP"]
    if env.get("CLAWGYM_SANDBOX_NO_TMPFS") == "1":
        out["tmpfs"] = False
    if env.get("CLAWGYM_SANDBOX_NO_CGROUP") == "1":
        out["cgroups"] = False
    if env.get("CLAWGYM_EXECD_STAGE") == "1":
        out["stage_execd"] = True
    return out
