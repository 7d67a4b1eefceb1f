"""Teardown bookkeeping and leftover cleanup.

* Every live sandbox and factory registers here; `close_all()` runs at interpreter exit (atexit)
  and on SIGTERM (when the process had no SIGTERM handler of its own), so Ctrl-C, exceptions and
  normal exits never leak containers, mounts, temp dirs or processes.
* `find_leftovers()` / `remove_leftovers()` find what a crashed run left behind: containers
  labelled `clawgym.sandbox=1`, tmpfs mounts and temp dirs named clawgym-sbx-<pid>-*, stray bwrap
  processes and cgroups. Each carries the pid of the process that made it, so on a shared machine
  `remove_leftovers()` (orphans_only=True) only touches what dead processes left.

    python -m clawgym.sandbox.host.cleanup [--all] [--dry-run] [--state-root DIR]

The state dirs are looked for in `state_root` (SandboxConfig.state_root: the folder the sandboxes were made in; ""
= the system temp dir); `clawgym sandbox cleanup` takes it from $CLAWGYM_SANDBOX_TMP.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
import weakref
from dataclasses import dataclass, field

from clawgym.sandbox.base import SandboxFactory
from clawgym.sandbox.host import cgroups
from clawgym.sandbox.host.fstree import _rmtree
from clawgym.sandbox.host.statedir import PREFIX, our_mounts, owner_pid, tmp_base, umount

log = logging.getLogger(__name__)

LABEL = "clawgym.sandbox"
LABEL_PID = "clawgym.pid"
LABEL_HOST = "clawgym.host"

_live: weakref.WeakSet = weakref.WeakSet()
_lock = threading.Lock()
_installed = False


def register(obj) -> None:
    """Track an object with close(); closed at exit if still open."""
    global _installed
    with _lock:
        _live.add(obj)
        if not _installed:
            atexit.register(close_all)
            _install_sigterm()
            _installed = True


def unregister(obj) -> None:
    """Stop tracking `obj` (it was closed)."""
    with _lock:
        _live.discard(obj)


def close_all() -> None:
    """Close every live sandbox first, then every factory (pools)."""
    with _lock:
        objs = list(_live)
    objs.sort(key=lambda o: isinstance(o, SandboxFactory))
    for o in objs:
        try:
            o.close()
        except Exception as e:  # pragma: no cover
            log.warning("close of %r failed at exit: %s", o, e)


def _install_sigterm() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            def _on_term(signum, frame):
                close_all()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)

            signal.signal(signal.SIGTERM, _on_term)
    except (ValueError, OSError):  # not in main thread / unsupported
        pass


# ---------------------------------------------------------------------------------------------
@dataclass
class Leftovers:
    """Sandbox remains found (or removed) on this machine: containers, mounts, dirs, processes, cgroups."""

    containers: list[str] = field(default_factory=list)  # container ids
    mounts: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any((self.containers, self.mounts, self.dirs, self.processes, self.cgroups))

    def summary(self) -> str:
        return (f"containers={self.containers} mounts={self.mounts} dirs={self.dirs} "
                f"processes={self.processes} cgroups={self.cgroups}")


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _keep(owner: int | None, pid: int | None, orphans_only: bool) -> bool:
    if pid is not None and owner != pid:
        return False
    return not (orphans_only and _alive(owner))


def _docker_client():
    try:
        import docker
        from docker.utils import kwargs_from_env

        # an engine configured the way docker.from_env finds one (its own reading of DOCKER_HOST), or the default
        # socket; else none is asked (no connect timeout on a host without docker)
        if not kwargs_from_env().get("base_url") and not os.path.exists("/var/run/docker.sock"):
            return None
        c = docker.from_env(timeout=10)
        c.ping()
        return c
    except Exception:
        return None


def _bwrap_processes() -> list[tuple[int, int | None]]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0] or os.path.basename(argv[0]) != b"bwrap":
            continue
        for a in argv:
            s = a.decode(errors="replace")
            if PREFIX in s:
                comp = [c for c in s.split("/") if c.startswith(PREFIX)]
                out.append((int(d), owner_pid(comp[0]) if comp else None))
                break
    return out


def find_leftovers(pid: int | None = None, orphans_only: bool = False,
                   docker_client=None, state_root: str = "") -> Leftovers:
    """What sandboxes left behind. pid: only things made by that process; orphans_only: only
    things whose maker is dead; state_root: where the state dirs were made (SandboxConfig.state_root)."""
    lo = Leftovers()
    host = os.uname().nodename
    client = docker_client or _docker_client()
    try:
        _find_into(lo, client, host, pid, orphans_only, state_root)
    finally:
        if client is not None and docker_client is None:
            client.close()
    return lo


def _find_into(lo: Leftovers, client, host: str, pid: int | None, orphans_only: bool, state_root: str) -> None:
    if client is not None:
        try:
            # the low-level list: no per-container inspect that races with concurrent removals
            for c in client.api.containers(all=True, filters={"label": f"{LABEL}=1"}):
                labels = c.get("Labels") or {}
                if labels.get(LABEL_HOST, host) != host:
                    continue
                try:
                    owner = int(labels.get(LABEL_PID, ""))
                except ValueError:
                    owner = None
                if _keep(owner, pid, orphans_only):
                    lo.containers.append(c["Id"])
        except Exception as e:  # pragma: no cover
            log.warning("could not list containers: %s", e)
    mounts = our_mounts()
    for m in mounts:
        if _keep(owner_pid(m), pid, orphans_only):
            lo.mounts.append(m)
    base = tmp_base(state_root)
    try:
        for n in os.listdir(base):
            if n.startswith(PREFIX) and _keep(owner_pid(n), pid, orphans_only):
                lo.dirs.append(os.path.join(base, n))
    except OSError:
        pass
    for p, owner in _bwrap_processes():
        if _keep(owner, pid, orphans_only):
            lo.processes.append(p)
    for cg in cgroups.our_cgroups(PREFIX):
        if _keep(owner_pid(cg), pid, orphans_only):
            lo.cgroups.append(cg)


def remove_leftovers(pid: int | None = None, orphans_only: bool = True,
                     dry_run: bool = False, state_root: str = "") -> Leftovers:
    """Remove what find_leftovers() reports; returns it."""
    client = _docker_client()
    lo = find_leftovers(pid=pid, orphans_only=orphans_only, docker_client=client, state_root=state_root)
    if dry_run:
        return lo
    for p in lo.processes:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    if client is not None:
        for cid in lo.containers:
            try:
                client.api.remove_container(cid, force=True)
            except Exception as e:  # pragma: no cover
                log.warning("could not remove container %s: %s", cid[:12], e)
    for cg in lo.cgroups:
        cgroups.Cgroup([cg], "v1").remove()
    for m in sorted(lo.mounts, key=len, reverse=True):
        try:
            umount(m)
        except OSError as e:  # pragma: no cover
            log.warning("%s", e)
    for d in lo.dirs:
        if d in our_mounts():
            continue
        _rmtree(d)
    if client is not None:
        client.close()
    return lo


def main(argv: list[str] | None = None) -> int:
    """Command line: remove sandbox leftovers (orphans only unless --all) and print what was removed."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m clawgym.sandbox.host.cleanup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="also what live processes own (stops their sandboxes)")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--state-root", default="", help="the folder the sandboxes' state dirs were made in "
                    "(SandboxConfig.state_root; default: the system temp dir)")
    a = ap.parse_args(argv)
    lo = remove_leftovers(orphans_only=not a.all, dry_run=a.dry_run, state_root=a.state_root)
    print(("would remove: " if a.dry_run else "removed: ") + lo.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
