"""The unix-socket gate of a recording proxy that serves one sandbox (:class:`PeerGate`).

The OpenClaw runtime runs one proxy per rollout; its unix socket is served through the gate, which pins the
mount + network namespaces of the first process that connects (the rollout's in-sandbox forwarder,
clawgym.agent.proxy_forwarder) and refuses connections from any other namespace, i.e. from any other sandbox.
With `uid` set it also refuses every peer whose uid (SO_PEERCRED: as the host sees it, i.e. after any user
namespace mapping) is not the forwarder's: the forwarder runs as a harness service uid, so the agent (the sandbox
user), which shares the forwarder's namespaces, cannot reach the proxy past it even if it learns the path.
"""

import asyncio
import json
import os
import socket
import struct
import threading
import time

from clawgym.agent.proxy_forwarder import pipe


class PeerGate:
    """The unix-socket front door of a proxy that serves one sandbox.

    Listens on `path` (mode 0666: the sandbox user must be able to connect) and relays each accepted
    connection to the proxy's TCP port on the host loopback. The first connecting process pins the gate to
    its mount + network namespaces (read through SO_PEERCRED and /proc/<pid>/ns); a connection from any
    other namespace -- another sandbox that somehow learnt the path -- gets a 403 and is closed without
    reaching the proxy. `expect` pins up front instead. `uid` (may be set after start(), before the first
    peer connects): only peers of that host-side uid are admitted, checked before the pin, so nothing else can
    pin the gate either. `admitted` is set once a peer was admitted (the forwarder's hello: its port is bound).
    Fails closed: a peer whose credentials, pid or namespaces the host cannot see is refused."""

    NS = ("mnt", "net")

    def __init__(self, path: str, target: tuple, on_refuse=None, expect: tuple | None = None,
                 uid: int | None = None):
        self.path, self.target, self.on_refuse = path, target, on_refuse
        self.pinned: tuple | None = expect
        self.uid: int | None = uid
        self.admitted = threading.Event()
        self.refused = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server = None

    @classmethod
    def identity(cls, pid: int) -> tuple | None:
        """The (mnt, net) namespace links of process `pid`; None when the host cannot see them."""
        if pid <= 0:
            return None
        try:
            return tuple(os.readlink(f"/proc/{pid}/ns/{n}") for n in cls.NS)
        except OSError:
            return None

    def _check(self, sock) -> tuple:
        try:
            pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                  struct.calcsize("3i")))
        except (OSError, AttributeError):
            return "peer credentials unavailable", 0
        want = self.uid
        if want is not None and uid != want:
            return f"peer uid {uid} is not the forwarder's ({want})", pid
        ident = self.identity(pid)
        if ident is None:
            return "peer process or namespaces not visible from the proxy", pid
        with self._lock:
            if self.pinned is None:
                self.pinned = ident
            elif ident != self.pinned:
                return "connection from outside the rollout's sandbox", pid
        self.admitted.set()
        return None, pid

    async def _handle(self, reader, writer) -> None:
        why, pid = self._check(writer.get_extra_info("socket"))
        if why:
            with self._lock:
                self.refused += 1
            if self.on_refuse:
                try:
                    self.on_refuse(why, pid)
                except Exception:
                    pass
            body = json.dumps({"error": {"message": f"refused: {why}", "type": "forbidden"}}).encode()
            try:
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nConnection: close\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
                # let the client finish sending (bounded) so that it reads the 403 instead of a broken pipe
                got, t_end = 0, time.monotonic() + 2.0
                while got < (1 << 20) and time.monotonic() < t_end:
                    d = await asyncio.wait_for(reader.read(65536), max(0.01, t_end - time.monotonic()))
                    if not d:
                        break
                    got += len(d)
            except Exception:
                pass
            writer.close()
            return
        try:
            ur, uw = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, uw), pipe(ur, writer))

    def start(self, timeout: float = 10.0) -> "PeerGate":
        if os.path.lexists(self.path):
            os.unlink(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.path)
        os.chmod(self.path, 0o666)
        sock.listen(128)
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run():
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(asyncio.start_unix_server(self._handle, sock=sock))
            ready.set()
            self._loop.run_forever()
            self._server.close()
            self._loop.run_until_complete(self._server.wait_closed())
            for t in asyncio.all_tasks(self._loop):
                t.cancel()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

        self._thread = threading.Thread(target=run, daemon=True, name=f"peergate-{os.path.basename(self.path)}")
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError(f"socket gate on {self.path} did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop = self._thread = None
        try:
            os.unlink(self.path)
        except OSError:
            pass


__all__ = ["PeerGate"]
