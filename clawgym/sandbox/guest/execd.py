"""In-sandbox exec server of the docker and bwrap backends (stdlib only; runs under the sandbox's python3).

    python3 -I /opt/clawgym/execd.py /run/clawgym/ctl.sock      (docker)
    python3 -I -S /run/clawgym/execd.py --fd N                  (bwrap: pid 1 of the sandbox)
    python3 -I -S /opt/clawgym/execd.py --reset                 (once, as the sandbox user: the "reset" op)

docker: it replaces `sleep infinity` as the child of docker-init and runs as uid 0 with only
CAP_SETUID and CAP_SETGID (no-new-privileges, read-only root, no network). It listens on a unix
socket in a directory the sandbox user cannot enter (host dir owned by root, mode 0700).
bwrap: it is pid 1 of the sandbox's pid namespace and runs as the sandbox user without capabilities;
it serves an inherited listening socket the host bound outside the sandbox (no path inside), and as
pid 1 it receives no signal from its own namespace that it has no handler for (not even SIGKILL).
Both: it ignores SIGINT/SIGTERM/SIGHUP and is not dumpable (nothing in the sandbox can ptrace it or
read its memory, environ or fds). The OOM killer must never pick it, whatever fills the memory cgroup:
the host sets its oom_score_adj to -1000 where it may (CAP_SYS_RESOURCE), and every command starts at
COMMAND_OOM_ADJ (500: half the cgroup's limit added to its score, so any command outranks the server and
its handlers); docker: the handler raises its own value around the start (inherited) and lowers it back;
bwrap, where the handler may not write its own file (not dumpable), it writes the command's right after
the exec. A command may lower its own value again, down to the minimum it inherited (the server's): it can
then only tie with the server, never make the server the preferred victim. the host's sweeps still kill everything.

For each connection it forks a handler which starts the command with subprocess (vfork + exec):
as 1000:1000 with only group 1000 (like docker exec; nothing to drop when already that user), own
session, chdir(cwd) (rc 126 + message when missing), default signal dispositions, the environment
exactly as given, stdin/stdout/stderr pipes. The handler relays output as frames and sends the exit
status. It never kills anything: the host kills leftovers via the sandbox's cgroup, sparing the server.

Protocol (host -> server): 4-byte big-endian length + request (a dict in `marshal` format 4), then (when "stdin" is
true) the raw stdin bytes until the host shuts down its write side.
  {"op": "exec", "argv": [...], "env": {...}, "cwd": "/abs", "stdin": bool, "uid": 1000, "gid": 1000}
      (uid/gid: the sandbox user's; docker's `service_exec` asks for execd_client.SERVICE_UID/GID, 1001, for
      the harness's own in-sandbox services; bwrap's server has no privileges to switch: its service execs
      enter the sandbox from the host instead)
  {"op": "reset", "uid": 1000, "gid": 1000}  -> as that user: remove SysV IPC objects and empty
                                                 /dev/shm and /dev/mqueue, then check they are empty
Server -> host frames: 1 byte kind + 4-byte big-endian length + payload.
  kind 1 stdout, 2 stderr, 3 exit (payload: 4-byte signed rc; a signal death is 128+sig),
  4 error (utf-8 message: the request could not be served; no exit frame follows),
  5 started (empty: the command's process exists),
  6 not started (utf-8 reason: no process could be made for the command, e.g. the pids limit; nothing ran, so the
    host may clear the sandbox and retry).
A connection that ends with neither STARTED nor NOT_STARTED may have run the command (the handler was killed
between the command's start and its STARTED frame, which the command itself can do on bwrap): the host never
retries it.
"""

import ctypes
import errno
import marshal
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

OUT, ERR, EXIT, ERROR, STARTED, NOT_STARTED = 1, 2, 3, 4, 5, 6
_CHUNK = 1 << 16
COMMAND_OOM_ADJ = 500  # every command outranks the server (<= 0) in the OOM killer's choice


def _frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BI", kind, len(payload)) + payload


def _send(conn: socket.socket, kind: int, payload: bytes) -> None:
    conn.sendall(_frame(kind, payload))


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        b = conn.recv(n - len(buf))
        if not b:
            raise EOFError("connection closed")
        buf += b
    return bytes(buf)


def _drop(uid: int, gid: int) -> None:
    if os.getresuid() == (uid, uid, uid) and os.getresgid() == (gid, gid, gid):
        return  # already that user (bwrap: the server itself runs as the sandbox user, without privileges)
    os.setgroups([gid])  # what `docker exec --user uid:gid` gives: only its own group
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


_DEFAULT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGQUIT,
                    signal.SIGXFSZ, signal.SIGTTIN, signal.SIGTTOU, signal.SIGTSTP)


def _start(req: dict, stdin_r: int | None, out_w: int, err_w: int) -> tuple[int | None, int, bytes]:
    """In the handler: start the command with subprocess (vfork + exec in C: ~1 ms, where a fork of this
    Python process costs ~3 ms) -> (pid, 0, b"") or, when it could not be exec'd, (None, rc, message).
    Raises OSError when no process could be made at all (e.g. the pids limit: the host may retry)."""
    for s in _DEFAULT_SIGNALS:  # the command gets default dispositions, not the server's ignores
        signal.signal(s, signal.SIG_DFL)
    uid, gid = int(req.get("uid", 1000)), int(req.get("gid", 1000))
    same = os.getresuid() == (uid, uid, uid) and os.getresgid() == (gid, gid, gid)
    drop: dict = {} if same else {"user": uid, "group": gid, "extra_groups": [gid]}  # like `docker exec --user`
    os.umask(0o022)
    cwd = req.get("cwd") or "/"
    argv = [str(a) for a in req["argv"]]
    env = {str(k): str(v) for k, v in (req.get("env") or {}).items()}
    base = _oom_adj("self")
    differs = base is not None and base != COMMAND_OOM_ADJ
    own = differs and _set_oom_adj("self", COMMAND_OOM_ADJ)  # inherited by the command (docker: may write it)
    try:
        p = subprocess.Popen(argv, stdin=stdin_r if stdin_r is not None else subprocess.DEVNULL,
                             stdout=out_w, stderr=err_w, cwd=cwd, env=env, start_new_session=True,
                             close_fds=True, **drop)
    except (FileNotFoundError, NotADirectoryError, PermissionError, IsADirectoryError) as e:
        if e.filename == cwd:
            return None, 126, f"cd: {cwd}: {e.strerror}\n".encode()
        rc = 127 if isinstance(e, (FileNotFoundError, NotADirectoryError)) else 126
        return None, rc, f"{argv[0]}: {e.strerror}\n".encode()
    except subprocess.SubprocessError as e:  # the child failed before exec for another reason
        return None, 126, f"execd: {e}\n".encode()
    except (ValueError, TypeError) as e:  # a NUL byte in argv, env or cwd, "=" in an env name: nothing started
        return None, 126, f"execd: {e}\n".encode()
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.ENOMEM):
            raise
        return None, 126, f"{argv[0]}: {e.strerror}\n".encode()
    finally:
        if own:
            assert base is not None  # own is true only when base was read (differs)
            _set_oom_adj("self", base)  # the handler itself stays protected
    if differs and not own:  # bwrap: the handler (not dumpable) cannot write its own; the command's it can
        _set_oom_adj(str(p.pid), COMMAND_OOM_ADJ)
    p.returncode = 0  # the handler reaps it with waitpid; keep Popen from trying later
    return p.pid, 0, b""


def _oom_adj(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/oom_score_adj") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _set_oom_adj(pid: str, value: int) -> bool:
    try:
        fd = os.open(f"/proc/{pid}/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.write(fd, str(value).encode())
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _status_rc(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return 126


def _run(conn: socket.socket, req: dict) -> None:
    """The handler: start the command, relay stdin/stdout/stderr, send its exit status."""
    want_stdin = bool(req.get("stdin"))
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r = in_w = None
    if want_stdin:
        in_r, in_w = os.pipe()
    try:
        pid, rc0, msg = _start(req, in_r, out_w, err_w)
    except OSError as e:  # no process was made (EAGAIN / ENOMEM): nothing ran
        _send(conn, NOT_STARTED, f"fork: {e.strerror}".encode())
        return
    for fd in (out_w, err_w, in_r):
        if fd is not None:
            os.close(fd)
    _send(conn, STARTED, b"")
    if pid is None:  # could not be exec'd: final, like a shell's 126/127
        _send(conn, ERR, msg)
        _send(conn, EXIT, struct.pack(">i", rc0))
        return
    _Relay(conn, pid, {out_r: OUT, err_r: ERR}, in_w, want_stdin).run()


class _Relay:
    """The handler's relay for a started command: its stdout/stderr pipes to the connection as frames, the host's
    stdin bytes to the command, and its exit status once it has exited."""

    def __init__(self, conn: socket.socket, pid: int, outs: dict[int, int], in_w: int | None,
                 want_stdin: bool) -> None:
        self.conn = conn
        self.pid = pid
        self.pidfd: int | None
        try:
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.pidfd = None
        self.outs = outs  # the read end of each output pipe -> its frame kind
        for fd in outs:
            os.set_blocking(fd, False)
        self.pending = bytearray()  # stdin not yet written to the child
        self.conn_open = want_stdin  # the host may still send stdin
        self.in_w = in_w
        if in_w is not None:
            os.set_blocking(in_w, False)
        self.rc: int | None = None

    def run(self) -> None:
        """Relay until the command has exited and its output pipes are at EOF."""
        while True:
            if self.rc is None:
                self._reap()
            if self.rc is not None and not self.outs:
                return
            ready = self._select()
            if ready is None:
                continue
            r, w = ready
            for fd in r:
                if fd is self.conn:
                    self._read_stdin()
                elif fd in self.outs:
                    self._relay_output(fd)
            if w and self.in_w is not None:
                self._write_stdin(self.in_w)
            if self.in_w is not None and not self.conn_open and not self.pending:
                os.close(self.in_w)
                self.in_w = None

    def _reap(self) -> None:
        """Once the command has exited: relay what it wrote, send its exit status, stop watching its pidfd."""
        try:
            done, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            done, status = self.pid, 0
        if done == self.pid:
            self.rc = _status_rc(status)
            for fd in list(self.outs):  # what the command wrote before it exited comes first
                self._relay_output(fd)
            _send(self.conn, EXIT, struct.pack(">i", self.rc))
            if self.pidfd is not None:
                os.close(self.pidfd)
                self.pidfd = None

    def _select(self) -> tuple[list, list] | None:
        """Wait for output, the command's exit (its pidfd), stdin from the host, or room in the command's stdin
        -> (readable, writable); None when a signal interrupted the wait."""
        rl: list = list(self.outs)
        if self.pidfd is not None:
            rl.append(self.pidfd)
        if self.conn_open and len(self.pending) < (1 << 20):
            rl.append(self.conn)
        wl = [self.in_w] if self.in_w is not None and self.pending else []
        try:
            r, w, _ = select.select(rl, wl, [], 0.05 if self.pidfd is None else 5.0)
        except InterruptedError:
            return None
        return r, w

    def _relay_output(self, fd: int) -> None:
        """Send what output pipe `fd` holds; at its EOF close it and stop watching it."""
        if not self._pump(fd):
            os.close(fd)
            del self.outs[fd]

    def _pump(self, fd: int) -> bool:
        """Read what is there; False at EOF."""
        while True:
            try:
                b = os.read(fd, _CHUNK)
            except BlockingIOError:
                return True
            except OSError:
                b = b""
            if not b:
                return False
            _send(self.conn, self.outs[fd], b)
            if len(b) < _CHUNK:
                return True

    def _read_stdin(self) -> None:
        """Take what the host sent for the command's stdin; at its EOF (or an error) no more comes."""
        try:
            b = self.conn.recv(_CHUNK)
        except OSError:
            b = b""
        if b:
            self.pending += b
        else:
            self.conn_open = False

    def _write_stdin(self, in_w: int) -> None:
        """Write what the command's stdin pipe takes of the pending bytes."""
        try:
            n = os.write(in_w, self.pending)
            del self.pending[:n]
        except BlockingIOError:
            pass
        except OSError:  # the command closed its stdin
            self.pending.clear()
            self.conn_open = False
            os.close(in_w)
            self.in_w = None


_IPC_RMID = 0


_SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}
_KEYCTL_CLEAR = 7


def _clear_keyrings(libc) -> None:
    """Empty the user and user-session keyrings (bwrap: per user namespace, so they outlive processes;
    docker's seccomp profile refuses keyctl, so there is nothing to clear)."""
    nr = _SYS_KEYCTL.get(os.uname().machine)
    if nr is None:
        return
    for ring in (-4, -5):  # KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING
        libc.syscall(nr, _KEYCTL_CLEAR, ring)


def _reset_ipc() -> list[str]:
    """As the sandbox user: remove its SysV IPC objects and POSIX shm/mqueue files; -> what is left."""
    libc = ctypes.CDLL(None, use_errno=True)
    for kind, rm in (("shm", lambda i: libc.shmctl(i, _IPC_RMID, None)),
                     ("sem", lambda i: libc.semctl(i, 0, _IPC_RMID)),
                     ("msg", lambda i: libc.msgctl(i, _IPC_RMID, None))):
        for i in _ipc_ids(kind):
            rm(i)
    for d in ("/dev/shm", "/dev/mqueue"):
        _empty(d)
    _clear_keyrings(libc)
    left = [f"{k} {i}" for k in ("shm", "sem", "msg") for i in _ipc_ids(k)]
    for d in ("/dev/shm", "/dev/mqueue"):
        try:
            left += [f"{d}/{n}" for n in os.listdir(d)]
        except FileNotFoundError:
            pass
    return left


def _ipc_ids(kind: str) -> list[int]:
    try:
        with open(f"/proc/sysvipc/{kind}") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return []
    return [int(ln.split()[1]) for ln in lines if ln.split()]


def _empty(path: str) -> None:
    """Remove everything below path without following symlinks (making dirs writable on the way)."""
    try:
        dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        _empty_fd(dfd, 0)
    finally:
        os.close(dfd)


def _empty_fd(dfd: int, depth: int) -> None:
    if depth > 64:
        return
    for name in os.listdir(dfd):
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            continue
        if (st.st_mode & 0o170000) == 0o040000:
            # nothing of the sandbox runs during a reset (the host swept it), so no race here
            try:
                os.chmod(name, 0o700, dir_fd=dfd)
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
            except OSError:
                continue
            try:
                _empty_fd(sub, depth + 1)
            finally:
                os.close(sub)
            try:
                os.rmdir(name, dir_fd=dfd)
            except OSError:
                pass
        else:
            try:
                os.unlink(name, dir_fd=dfd)
            except OSError:
                pass


def _reset(conn: socket.socket, req: dict) -> None:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            _drop(int(req.get("uid", 1000)), int(req.get("gid", 1000)))
            left = _reset_ipc()
            os.write(w, "\n".join(left).encode())
            code = 1 if left else 0
        except BaseException as e:  # noqa: BLE001
            try:
                os.write(w, f"reset failed: {e}".encode())
            except OSError:
                pass
        os._exit(code)
    os.close(w)
    msg = bytearray()
    while True:
        b = os.read(r, _CHUNK)
        if not b:
            break
        msg += b
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if msg:
        _send(conn, ERR, bytes(msg))
    _send(conn, EXIT, struct.pack(">i", _status_rc(status)))


def _handle(conn: socket.socket) -> None:
    n = struct.unpack(">I", _recv_exact(conn, 4))[0]
    if n > (16 << 20):
        raise ValueError("request too large")
    req = marshal.loads(_recv_exact(conn, n))  # only the host can connect; no json: its import costs ~10 ms
    op = req.get("op", "exec")
    if op == "exec":
        _run(conn, req)
    elif op == "reset":
        _reset(conn, req)
    elif op == "ping":
        _send(conn, EXIT, struct.pack(">i", 0))
    else:
        _send(conn, ERROR, f"unknown op {op!r}".encode())


def _undumpable() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except Exception:  # noqa: BLE001
        pass


def _listen(path: str) -> socket.socket:
    os.umask(0o077)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path + ".new")
    os.chmod(path + ".new", 0o600)
    srv.listen(128)
    os.rename(path + ".new", path)  # the host waits for `path`: it appears only once it listens
    return srv


def _refuse(conn: socket.socket, reason: str) -> None:
    """Tell the host its command was not started (the server could not fork a handler), then close. The request
    is read first: closing a socket with the host's request unread would fail the host's send (EPIPE) before it
    could read the reason."""
    try:
        conn.settimeout(0.5)  # the host sends its request right after connecting; never let it stall the server
        n = struct.unpack(">I", _recv_exact(conn, 4))[0]
        if n <= (16 << 20):
            _recv_exact(conn, n)
        _send(conn, NOT_STARTED, reason.encode())
    except (OSError, EOFError):
        pass
    finally:
        conn.close()


def serve(path: str | None = None, fd: int | None = None) -> None:
    """Serve on a new socket at `path`, or on an inherited listening socket `fd` (bwrap: the host made
    it outside the sandbox, so nothing inside can reach or replace it)."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(s, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers (and, as pid 1, orphans) are reaped by the kernel
    _undumpable()
    if fd is not None:
        os.umask(0o022)
        srv = socket.socket(fileno=fd)
        os.set_inheritable(fd, False)
    else:
        srv = _listen(path or "/run/clawgym/ctl.sock")
    while True:
        try:
            conn, _ = srv.accept()
        except InterruptedError:
            continue
        except OSError:
            time.sleep(0.01)
            continue
        try:
            pid = os.fork()
        except OSError as e:  # e.g. the pids limit is reached: say so, nothing ran (the host may retry)
            _refuse(conn, f"fork: {e.strerror}")
            time.sleep(0.01)
            continue
        if pid == 0:
            code = 0
            try:
                srv.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _handle(conn)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                try:
                    conn.close()
                except OSError:
                    pass
            os._exit(code)
        conn.close()


def main() -> None:
    """Entry point: `--reset` runs the reset op once; otherwise serve on a socket path or an inherited
    fd, and idle forever if serving fails (the container must not stop)."""
    if len(sys.argv) > 1 and sys.argv[1] == "--reset":  # docker exec fallback: as the calling user
        left = _reset_ipc()
        print("\n".join(left))
        sys.exit(1 if left else 0)
    try:
        if len(sys.argv) > 2 and sys.argv[1] == "--fd":
            serve(fd=int(sys.argv[2]))
        else:
            serve(sys.argv[1] if len(sys.argv) > 1 else "/run/clawgym/ctl.sock")
    except Exception as e:  # noqa: BLE001 - never let the container stop: the host falls back
        print(f"execd: {e}; idle", file=sys.stderr, flush=True)
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        while True:
            signal.pause()


if __name__ == "__main__":
    main()
