"""The bwrap backend (`@sandbox_backend("bwrap")`): bubblewrap namespaces over the offline rootfs, a cgroup where
available, one exec server as pid 1 per sandbox (server mode) or a fresh bwrap per exec.

    backend.py   BwrapSandbox / BwrapFactory: the Sandbox protocol, server mode, the recycling pool
    args.py      bubblewrap on this host: finding it, its features, the rootfs, the read-only system binds

Importing this package registers nothing; clawgym.sandbox.registry imports `backend` on first lookup.
"""
