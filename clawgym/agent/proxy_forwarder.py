"""Byte relays between a TCP port and the recording proxy's unix socket (stdlib only).

One implementation serves both sides of the socket:

* the host: :class:`clawgym.agent.proxy_gate.PeerGate` relays each admitted connection to the proxy's TCP
  port with :func:`pipe`;
* the sandbox: this file is shipped verbatim as ``fwd.py`` (``clawgym.agent.openclaw.FORWARDER`` is the
  source of this module) and run there with the sandbox's python3 as

      python3 fwd.py HOST PORT SOCKET READY_FILE

  It first connects once to SOCKET (the gate pins itself to the namespaces of the first connecting process:
  this sandbox's), then serves HOST:PORT, relaying every connection to SOCKET, and writes "ready" to
  READY_FILE once it listens.

Imports nothing but the standard library: the sandbox has no clawgym and no third-party package.
"""

import asyncio
import sys


async def pipe(r, w) -> None:
    """Copy `r` to `w` until EOF or an error, then close `w` (errors are swallowed: either end may vanish)."""
    try:
        while True:
            d = await r.read(65536)
            if not d:
                break
            w.write(d)
            await w.drain()
    except Exception:
        pass
    finally:
        try:
            w.close()
        except Exception:
            pass


async def serve(host: str, port: int, path: str, ready: str) -> None:
    """Relay every connection to host:port to the unix socket `path` (see the module docstring)."""

    async def handle(cr, cw):
        try:
            ur, uw = await asyncio.open_unix_connection(path)
        except Exception:
            cw.close()
            return
        await asyncio.gather(pipe(cr, uw), pipe(ur, cw))

    # hello: the proxy's socket pins itself to the first connecting process's namespaces (this sandbox)
    r, w = await asyncio.open_unix_connection(path)
    w.close()
    srv = await asyncio.start_server(handle, host, port)
    with open(ready, "w") as f:
        f.write("ready")
    async with srv:
        await srv.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]))
