"""The host side of a sandbox, shared by the backends: what the host does to a sandbox from outside it.

    hostfs.py        host-side file access to the workspace and /tmp that never follows a symlink (HostFS)
    fstree.py        symlink-safe, iterative walks, emptying, removal and sealing of host directories
    statedir.py      the sandbox's writable state on the host (a size-limited tmpfs) and resource names
    export.py        the workspace as data for the verifier's clean room (WorkspaceExport)
    execd_client.py  the host half of the in-sandbox exec server's protocol (clawgym/sandbox/guest/execd.py)
    proc.py          host processes with a deadline and capped output; the output caps of every exec path
    nsipc.py         SysV / POSIX IPC removed from the host through the sandbox's IPC namespace
    cgroups.py       per-sandbox memory + pids limits through a cgroup (v1 / v2; bwrap's, swept by cleanup)
    cleanup.py       every leftover of a crashed run, found by owner pid (`python -m clawgym.sandbox.host.cleanup`)
"""
