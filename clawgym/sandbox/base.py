"""The Sandbox protocol. Backends: docker, bwrap, local.

A sandbox is an isolated place where one task's workspace lives at `workspace` (default
/root/.openclaw/workspace) and commands run. File access from the host never follows symlinks
inside the sandbox. Paths given to read/write/list/remove are relative to the workspace unless
absolute (then they must lie under the workspace or /tmp of the sandbox).
"""

from __future__ import annotations

import abc
import threading
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from clawgym import DEFAULT_WORKSPACE

if TYPE_CHECKING:
    from clawgym.sandbox.host.export import WorkspaceExport


class SandboxError(RuntimeError):
    """The sandbox itself failed (could not start, died): an `infra` failure, never the agent's."""


@dataclass
class SandboxConfig:
    """Settings of the sandboxes a factory makes: workspace path, resource limits, network, image and binds."""

    workspace: str = DEFAULT_WORKSPACE
    memory_mb: int = 1024
    pids: int = 256
    cpus: float = 1.0
    disk_mb: int = 512  # size of the writable tmpfs that holds workspace, /tmp and $HOME
    network: bool = False
    image: str = "clawgym-sandbox:latest"  # docker image / rootfs name
    rootfs: str | None = None  # bwrap: a debootstrapped root to use instead of the host's read-only /
    extra_ro_binds: list[tuple[str, str]] = field(default_factory=list)  # (host path, sandbox path)
    env: dict[str, str] = field(default_factory=dict)
    default_timeout_s: float = 60.0
    # kernel.shm_rmid_forced in the sandbox's IPC namespace (docker, bwrap server mode): a SysV shared memory
    # segment is destroyed as soon as no process has it attached, so the agent cannot fill the memory cgroup
    # with shared memory that outlives its processes (and get the exec server OOM-killed). False: segments
    # persist until quiesce()/reset (only for tests of that cleanup).
    shm_rmid_forced: bool = True
    # bwrap: one long-lived bwrap per sandbox with the exec server as its pid 1, where the host allows it (root
    # + cgroups). False: a fresh bwrap per exec (the fallback; entry points map CLAWGYM_BWRAP_SERVER=0 to it).
    bwrap_server: bool = True
    # Where this host keeps things (host facts). The library never reads them from the environment: the entry points
    # map their variables onto these fields (clawgym.sandbox.host_settings(env)).
    # bwrap: the root scripts/build_sandbox_image.sh built, used when it is built, else the host's system dirs
    # ($CLAWGYM_ROOTFS; "host": always the host's). `rootfs`, when given, is used first and must be built.
    default_rootfs: str = "/var/lib/clawgym/rootfs"
    # the folder the per-sandbox state dirs (HOME, /tmp, workspace) go in; "" = the system temp dir. A launched run
    # sets one the engine's host shares at the same path ($CLAWGYM_SANDBOX_TMP); the cleanup is told the same one.
    state_root: str = ""
    # state dirs as size-limited tmpfs mounts, where this process may mount (root). False: plain dirs (a launched
    # run, whose mounts the engine would not see: $CLAWGYM_SANDBOX_NO_TMPFS=1).
    tmpfs: bool = True
    # bwrap: memory / pids / CPU limits by a cgroup, where this process may make one (root). False: per-process
    # rlimits (a host or container without usable cgroups: $CLAWGYM_SANDBOX_NO_CGROUP=1).
    cgroups: bool = True
    # docker: bind a copy of execd.py staged in `state_root` rather than the package's file (a caller that is itself
    # a container, whose package path the engine's host lacks: $CLAWGYM_EXECD_STAGE=1).
    stage_execd: bool = False


@dataclass
class ExecResult:
    """Outcome of one Sandbox.exec: exit status, decoded output, timeout and truncation flags."""

    rc: int
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_s: float = 0.0
    truncated: bool = False  # stdout/stderr were cut at the output cap

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out


class Sandbox(abc.ABC):
    """One live sandbox. Use as a context manager; close() is idempotent and always tears down."""

    backend: str = "abstract"
    #: What the backend promises against a hostile agent, declared by the backend (a capability, never read
    #: from its name): True -- commands run as an unprivileged uid in namespaces of their own, quiesce() stops
    #: every process earlier execs left, scrub() and seal() work from the host (docker, bwrap). False (local,
    #: test doubles): nothing; the verifier's clean room still gets the workspace as data.
    isolating: ClassVar[bool] = False

    def __init__(self, config: SandboxConfig):
        self.config = config

    @property
    def workspace(self) -> str:
        return self.config.workspace

    @abc.abstractmethod
    def exec(
        self,
        cmd: str | list[str],
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        stdin: bytes | None = None,
        max_output: int = 1_000_000,
    ) -> ExecResult:
        """Run a command (a str runs under `bash -lc`) as the sandbox's unprivileged user.
        On timeout every process the command started is killed and timed_out=True, rc=124."""

    @abc.abstractmethod
    def write_file(self, path: str, content: bytes, mode: int = 0o644) -> None: ...

    @abc.abstractmethod
    def read_file(self, path: str) -> bytes: ...

    @abc.abstractmethod
    def list_files(self, path: str = ".") -> list[str]:
        """Regular files under path (recursive, any depth), relative to the workspace, sorted. Symlinks,
        FIFOs, sockets and device nodes are skipped. Names that are not UTF-8 come back as str decoded with
        surrogateescape (os.fsdecode), and read_file accepts them as they are."""

    @abc.abstractmethod
    def remove(self, path: str) -> None:
        """Remove a file or a directory tree (no error if missing)."""

    def quiesce(self) -> None:
        """Stop everything the sandbox's earlier execs left behind, keeping its files; for the step between the
        agent's phase and the verifier (which runs in the same sandbox).

        After it returns: no process started by any earlier exec is alive (background, double-forked,
        setsid/nohup, stopped, signal-ignoring ones included; an exec still running in another thread is
        killed too and returns rc 137/124), and every SysV IPC object (shm, sem, msg), every POSIX message
        queue, every /dev/shm file and the sandbox user's keyrings are gone. The workspace, $HOME and /tmp
        files are left exactly as they are; the sandbox stays usable (exec works afterwards).
        Raises SandboxError only when the sandbox itself is broken (its processes cannot be killed, its exec
        server is gone). Backends that cannot do this raise SandboxError (this default)."""
        raise SandboxError(f"{type(self).__name__} cannot stop the agent's processes (no quiesce())")

    def scrub(self) -> list[list[str]]:
        """After quiesce(), before a verifier: empty /tmp and $HOME except the directories down to the workspace,
        from the host, never following symlinks; return the workspace entries that are neither regular files
        nor directories ([rel path, "symlink" | "special", link target]). The workspace itself is untouched.
        Backends that cannot do it from the host raise NotImplementedError (the verifier then does it with a
        program inside the sandbox)."""
        raise NotImplementedError

    def seal(self, path: str) -> None:
        """Make the file or tree at `path` (relative to the workspace, or absolute under the workspace or /tmp)
        owned by a uid other than the sandbox user (root; inside a bwrap sandbox that shows as the overflow uid)
        and not writable by it: directories 0755, files 0444 (0555 when they had an exec bit), set-id bits
        dropped; where the filesystem allows it the top entry is made immutable too, so it cannot be renamed
        away or deleted from its parent (the host's own later write_file into it fails; remove() works).
        Done from the host, never following symlinks: if `path` or one of its parents is a symlink it raises
        ValueError (remove and rewrite the directory first); FileNotFoundError when missing. Call quiesce()
        first: a process holding a file open for writing keeps that descriptor.
        The `local` backend only chmods (no other uid: no protection). Default: SandboxError."""
        raise SandboxError(f"{type(self).__name__} cannot seal verifier files (no seal())")

    def lock_workspace_path(self) -> None:
        """Make the directories above the workspace (up to HOME) another owner's and not writable by the sandbox
        user, so it cannot rename the workspace or a parent away and put another in its place; with seal(".") it
        fixes what a later read of the workspace finds. From the host. Default: SandboxError."""
        raise SandboxError(f"{type(self).__name__} cannot lock the workspace's path (no lock_workspace_path())")

    @abc.abstractmethod
    def close(self) -> None: ...

    # ---- shared helpers -------------------------------------------------------------
    def write_files(self, files: Iterable) -> None:
        """Write clawgym.tasks.File objects (path, content, mode) into the workspace."""
        for f in files:
            self.write_file(f.path, f.content, f.mode)

    def snapshot(self) -> dict[str, bytes]:
        """All regular files of the workspace: {relative path: content}."""
        return {p: self.read_file(p) for p in self.list_files(".")}

    def export_workspace(self) -> WorkspaceExport:
        """The workspace as data for the verifier's clean room (clawgym.sandbox.host.export): regular files with
        their bytes and clean modes, directories, symlinks resolved inside the workspace as they are now (or
        dropped), special files dropped. Host-side backends walk it without following links; this default
        (regular files through list_files/read_file, no links, no empty directories) serves the others."""
        from clawgym.sandbox.host.export import WorkspaceExport

        exp = WorkspaceExport()
        for p in self.list_files("."):
            exp.files[p] = self.read_file(p)
            exp.modes[p] = 0o644
        return exp

    def make_dirs(self, paths: Iterable[str]) -> None:
        """Make these workspace directories (and their parents), e.g. an export's empty ones."""
        for p in paths:
            self.write_file(f"{p}/.clawgym-dir", b"")
            self.remove(f"{p}/.clawgym-dir")

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_S = TypeVar("_S", bound=Sandbox)
_ROOMS_LOCK = threading.Lock()  # held while a factory's rooms() factory is made (once per factory)
_STATE_LOCK = threading.Lock()  # held for a moment: taking a factory's rooms to close them, its first _adopt()


class SandboxFactory(abc.ABC):
    """Opens sandboxes of one backend (may keep a warm pool). Thread-safe.

    Backends register themselves with `clawgym.sandbox.registry.sandbox_backend(name)`; get_factory(name)
    finds them there. The pool operations (warm, settle, idle, stats) are answered by every factory: the
    recycling backends (docker, bwrap) by their clawgym.sandbox.pool.RecyclingPool, the others with the
    defaults below (nothing pooled, closing is immediate).

    The factory's own state below is declared here with its defaults (class attributes, shadowed per instance
    on first write), so it reads the same whether or not a subclass's __init__ calls this one's."""

    name: str = "abstract"

    # ---- the factory's state ------------------------------------------------------------------
    #: The constructor settings beyond the config (keywords), recorded by the backend's __init__: the rooms()
    #: factory is made with them (`_make_rooms`). Default: none.
    _init_kwargs: Mapping[str, Any] = MappingProxyType({})
    #: This factory is another's rooms() factory (its own rooms() is itself). Set once, by the factory that made it.
    _is_room: bool = False
    #: The rooms() factory, once made; None before, and again once closed (`_close_rooms`).
    _rooms: SandboxFactory | None = None
    #: The sandboxes this factory handed out (`_adopt`) and has not seen closed: factory.close() closes them.
    #: Made on the first _adopt().
    _open_sandboxes: weakref.WeakSet[Sandbox] | None = None

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()

    @classmethod
    def available(cls, config: SandboxConfig) -> tuple[bool, str]:
        """(True, "") when this backend can make sandboxes with `config` on this machine now, else (False, why).
        get_factory("auto") takes the first available backend of those registered for auto."""
        return True, ""

    @abc.abstractmethod
    def open(self, files: Iterable = ()) -> Sandbox:
        """A fresh sandbox whose workspace holds `files` (clawgym.tasks.File)."""

    def close(self) -> None:
        """Tear down pools and anything else the factory holds (its rooms() factory included)."""
        self._close_rooms()

    # ---- clean rooms ------------------------------------------------------------------------
    def rooms(self) -> SandboxFactory:
        """The factory of this factory's *clean rooms*: sandboxes of the same backend and config from a pool
        of their own, that only ever hold verifications -- no agent phase ever runs in one. Made on first use,
        closed with this factory. A room factory's own rooms() is itself."""
        if self._is_room:
            return self
        with _ROOMS_LOCK:
            r = self._rooms
            if r is None:
                r = self._make_rooms()
                r._is_room = True
                self._rooms = r
            return r

    def _make_rooms(self) -> SandboxFactory:
        """A sibling factory for rooms(): this class with the same config and constructor settings
        (`_init_kwargs`, recorded by the backend's __init__)."""
        return type(self)(self.config, **self._init_kwargs)

    def _close_rooms(self) -> None:
        """Close the rooms() factory, if one was made (once: a second call finds none); the next rooms() makes
        another."""
        with _STATE_LOCK:
            r, self._rooms = self._rooms, None
        if r is not None:
            r.close()

    # ---- pool operations --------------------------------------------------------------------
    def warm(self, timeout: float = 60.0) -> bool:
        """Wait (at most `timeout` s) until the pool holds its `pool_size` sandboxes ready (less those handed out
        now), so the next open() calls are fast (benchmarks, tests); -> whether it does. It does not warm the
        rooms() pool: call rooms().warm() too where verifications follow. Default (no pool): True at once."""
        return True

    def settle(self, timeout: float = 60.0) -> bool:
        """Wait (at most `timeout` s) until every closed sandbox has been reset and pooled, or torn down
        (close() of a recycled sandbox returns at once and the reset runs in the background); -> whether that
        happened in time. Default (close() tears down before it returns): True at once."""
        return True

    def idle(self) -> list[tuple[str, str]]:
        """(key, host state dir) of each sandbox ready in the pool (key: docker's container id, bwrap's state
        name). Default (no pool): []."""
        return []

    @property
    def stats(self) -> dict[str, int]:
        """Pool counters (a copy): created, recycled, destroyed, reset_failed (clawgym.sandbox.pool.STATS_KEYS).
        Default (no pool): {}."""
        return {}

    # ---- shared helpers for backends ----------------------------------------------------
    def _adopt(self, sb: _S, files: Iterable) -> _S:
        """Fill a just-opened sandbox with `files` and track it (closed by factory.close()); a failure
        while writing closes it before re-raising."""
        try:
            sb.write_files(files)
        except BaseException:
            sb.close()
            raise
        tracked = self._open_sandboxes
        if tracked is None:
            with _STATE_LOCK:
                if self._open_sandboxes is None:
                    self._open_sandboxes = weakref.WeakSet()
                tracked = self._open_sandboxes
        tracked.add(sb)
        return sb

    def _close_adopted(self) -> None:
        """Close every sandbox this factory handed out and has not seen closed."""
        for sb in list(self._open_sandboxes or ()):
            sb.close()

    def __enter__(self) -> SandboxFactory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
