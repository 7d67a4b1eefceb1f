"""Byte relays between a TCP port and the recording proxy's unix socket (stdlib only).

One implementation serves both sides of the socket:

* the host: :class:`clawgym.agent.proxy_gate.PeerGate` relays each admitted connection to the proxy's TCP
  port with :func:`pipe`;
* the sandbox: ``clawgym.agent.openclaw.FORWARDER`` is the source of this module, run there with the
  sandbox's python3 as a harness service (``python3 -I -S -c FORWARDER HOST PORT SOCKET``: another uid than the
  sandbox user's, no file the agent could replace; see clawgym.agent.openclaw.start_forwarder), or shipped as
  ``fwd.py`` (``python3 fwd.py HOST PORT SOCKET [READY_FILE]``: the sandbox user's fallback).

  It first listens on HOST:PORT (before the agent runs: the port is taken for the rollout), then connects once
  to SOCKET (the gate pins itself to the first admitted peer: this forwarder, whose uid and namespaces it
  checks), writes "ready" to READY_FILE when given, and relays every connection to HOST:PORT to SOCKET. It
  exits once SOCKET is gone (the proxy stopped).

Imports nothing but the standard library: the sandbox has no clawgym and no third-party package.
"""

import asyncio
import os
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


async def serve(host: str, port: int, path: str, ready: "str | None" = None, poll_s: float = 0.5) -> None:
    """Relay every connection to host:port to the unix socket `path` until `path` is gone (see the module
    docstring)."""

    async def handle(cr, cw):
        try:
            ur, uw = await asyncio.open_unix_connection(path)
        except Exception:
            cw.close()
            return
        await asyncio.gather(pipe(cr, uw), pipe(ur, cw))

    srv = await asyncio.start_server(handle, host, port)  # no SO_REUSEPORT: nobody else can bind the port
    # hello: the proxy's socket gate pins itself to the first admitted peer (this process); the host waits for it
    r, w = await asyncio.open_unix_connection(path)
    w.close()
    if ready:
        with open(ready, "w") as f:
            f.write("ready")
    async with srv:
        while os.path.exists(path):
            await asyncio.sleep(poll_s)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None))
