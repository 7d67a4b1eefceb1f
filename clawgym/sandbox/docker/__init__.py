"""The docker backend (`@sandbox_backend("docker")`): one container per pooled slot, labelled clawgym.sandbox=1.

    backend.py     DockerSandbox / DockerFactory: the Sandbox protocol over a slot, the recycling pool
    container.py   the engine and one started container (`Slot`): create, drive from the host, destroy
    exec.py        how a command runs: the in-container exec server (fast path) or `docker exec` (fallback)
    Dockerfile     the sandbox image the online way (offline: scripts/build_sandbox_image.sh)

Importing this package registers nothing; clawgym.sandbox.registry imports `backend` on first lookup.
"""
