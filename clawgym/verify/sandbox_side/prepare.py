"""Runs inside the sandbox (as the sandbox user, `python3 -I -S`) after the agent's processes are gone and
before any verifier code: empties the places only the agent wrote that a verifier could pick up as
configuration — /tmp, /dev/shm and $HOME except the path down to the workspace — and reports what in the
workspace is not a plain file or directory (symlinks, FIFOs, sockets, devices) as one JSON line.

argv: HOME WORKSPACE. Iterative walks (no recursion limit), never follows a symlink.
"""

import json
import os
import stat
import sys


def _remove_tree(path, errors):
    """Remove `path` (file, link or directory tree) without recursion, making directories writable."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
        return
    stack = [(path, False)]
    while stack:
        d, listed = stack.pop()
        if listed:
            try:
                os.rmdir(d)
            except OSError as e:
                errors.append(f"{d}: {e}")
            continue
        try:
            os.chmod(d, 0o700)
        except OSError:
            pass
        stack.append((d, True))
        try:
            entries = list(os.scandir(d))
        except OSError as e:
            errors.append(f"{d}: {e}")
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append((e.path, False))
                else:
                    os.unlink(e.path)
            except OSError as ex:
                errors.append(f"{e.path}: {ex}")


def _empty(directory, keep, errors):
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for n in names:
        p = os.path.join(directory, n)
        if p in keep:
            continue
        _remove_tree(p, errors)


def _odd_entries(workspace, limit=10000):
    """Workspace entries that are neither regular files nor directories: [path, kind, link target]."""
    out = []
    stack = [workspace]
    while stack and len(out) < limit:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            rel = os.path.relpath(e.path, workspace)
            if stat.S_ISDIR(st.st_mode):
                stack.append(e.path)
            elif stat.S_ISLNK(st.st_mode):
                try:
                    target = os.readlink(e.path)
                except OSError:
                    target = ""
                out.append([rel, "symlink", target])
            elif not stat.S_ISREG(st.st_mode):
                out.append([rel, "special", ""])
    return out


def main():
    home, workspace = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    errors = []
    keep = set()
    chain = []
    if workspace.startswith(home + "/"):  # keep the directories on the way down to the workspace
        p = workspace
        while p != home:
            keep.add(p)
            p = os.path.dirname(p)
            if p != home:
                chain.append(p)
    for d in [home] + sorted(chain, key=len):
        _empty(d, keep, errors)
    _empty("/tmp", keep, errors)
    _empty("/dev/shm", keep, errors)
    odd = _odd_entries(workspace)
    sys.stdout.write(json.dumps({"errors": errors[:50], "odd": odd}, ensure_ascii=True,
                                default=str) + "\n")


if __name__ == "__main__":
    main()
