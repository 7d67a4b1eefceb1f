"""The agent's workspace from the artifact tar, by clawgym's export rules (tests/clawgym_unpack.py; stdlib only).

Exported by clawgym.tasks.harbor_export. In Harbor's separate verifier environment tests/test.sh runs
`python3 -I /tests/clawgym_unpack.py <tar> <workspace> /logs/verifier` before the verifier: the image's copy of the
workspace is emptied and the tar the `[[verifier.collect]]` hook made in the agent's container is read *as data*,
with the rules of clawgym's own clean-room export (tests/clawgym_export.py is clawgym/sandbox/host/export.py verbatim):

- regular files (0o755 or 0o644) and directories are kept;
- a symlink becomes the bytes of the workspace file it names, resolved link by link inside the workspace, else it
  is dropped (outside the workspace, to a directory, dangling, through /proc/self/root, a loop);
- a hard link becomes a plain copy of the file it names (the built-in export reads each name of an inode as the
  same bytes);
- devices, FIFOs, names that are absolute or climb out with `..`: dropped; at most 50,000 entries, and at most 3/4
  of the free disk in bytes (copies of links counted at full size), so the export always fits.

No tar at all is an empty workspace: the collect hook makes none when the workspace was no directory any more
(replaced by a file or a link, or deleted), and that is the agent's outcome -- the image's own copy of the workspace
is never what gets verified. What was dropped goes to <logs>/clawgym_export.json. Exit 1 with the reason on stderr
when the tar cannot be read.
"""
import importlib.util
import json
import os
import shutil
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_ENTRIES = 50_000
# the artifact is the agent's container's doing (root there: it can swap tar, or the tar after the hook ran), so it
# is read at a bounded cost: a plain tar only (the hook never compresses: no xz/gzip bomb), members iterated and never
# kept (no tf.members list), reading stopped at the entry cap, and a wall-clock deadline (past it: unreadable, 0)
DEADLINE_S = 120.0


def shipped(name):
    """tests/<name>.py, a module the exporter wrote beside this program from clawgym's own source; loaded by its
    path, so that no same-named module on sys.path (python3 -I: neither this folder nor the cwd) can stand in."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there while the class is made
    spec.loader.exec_module(mod)
    return mod


export = shipped("clawgym_export")  # clawgym/sandbox/host/export.py verbatim
WorkspaceExport, clean_mode, resolve_links = export.WorkspaceExport, export.clean_mode, export.resolve_links


def _rel(name):
    """A member name as a workspace-relative path, or None when it is absolute or climbs out."""
    if name.startswith("/"):
        return None
    parts = [x for x in name.split("/") if x not in ("", ".")]
    if ".." in parts:
        return None
    return "/".join(parts)


class _Forget(list):
    """TarFile.members that keeps nothing: TarFile.next() appends each member it reads (a hard link is then looked
    up in exp.files, never through the tar's member list)."""

    def append(self, m):
        pass


def read_tar(path, budget):
    """The tar at `path` as a WorkspaceExport (links still unresolved); bytes at most `budget` (None: no cap)."""
    exp = WorkspaceExport()
    if not os.path.isfile(path):
        exp.dropped.append({"path": ".", "kind": "workspace", "why": "no workspace export: the workspace was not a "
                                                                    "directory when collected, or no tar came"})
        return exp, budget
    over = 0
    end = time.monotonic() + DEADLINE_S
    with tarfile.open(path, "r:") as tf:
        tf.members = _Forget()  # iterate without keeping every TarInfo
        for m in tf:
            if time.monotonic() > end:
                raise tarfile.ReadError(f"the tar took over {DEADLINE_S:.0f} s to read")
            p = _rel(m.name)
            if p is None:
                exp.dropped.append({"path": m.name[:200], "kind": "member", "why": "outside the workspace"})
                continue
            if not p:
                continue  # the workspace folder itself
            if len(exp.files) + len(exp.links) + len(exp.dirs) >= MAX_ENTRIES:
                over = 1  # the rest is not read at all
                break
            exp.files.pop(p, None)
            exp.links.pop(p, None)
            if m.isdir():
                exp.dirs.append(p)
            elif m.isreg():
                if budget is not None and m.size > budget:
                    exp.dropped.append({"path": p, "kind": "file", "why": "over the export's byte budget"})
                    continue
                with tf.extractfile(m) as src:
                    data = src.read()
                exp.files[p], exp.modes[p] = data, clean_mode(m.mode)
                budget = None if budget is None else budget - len(data)
            elif m.issym():
                exp.links[p] = m.linkname
            elif m.islnk():  # another name of a file the tar holds already: a plain copy of it
                t = _rel(m.linkname)
                if not t or t not in exp.files:
                    exp.dropped.append({"path": p, "kind": "hard link", "why": "names no file of the workspace"})
                    continue
                if budget is not None and len(exp.files[t]) > budget:
                    exp.dropped.append({"path": p, "kind": "hard link", "why": "over the export's byte budget"})
                    continue
                exp.files[p], exp.modes[p] = exp.files[t], exp.modes.get(t, 0o644)
                budget = None if budget is None else budget - len(exp.files[t])
            else:
                exp.dropped.append({"path": p, "kind": "special", "why": "not a regular file"})
    if over:
        exp.dropped.append({"path": "", "kind": "entries",
                            "why": f"entries beyond the export's {MAX_ENTRIES}-entry cap (not read)"})
    return exp, budget


def empty(ws):
    """`ws` as an empty directory, never following a link (a link or file there is removed, not entered)."""
    if os.path.islink(ws) or (os.path.lexists(ws) and not os.path.isdir(ws)):
        os.unlink(ws)
    os.makedirs(ws, exist_ok=True)
    for e in os.scandir(ws):
        if e.is_dir(follow_symlinks=False):
            shutil.rmtree(e.path)
        else:
            os.unlink(e.path)


def write(exp, ws):
    """The export's directories and files under `ws` (an entry that cannot be written is dropped and listed)."""
    for d in sorted(set(exp.dirs)):
        try:
            os.makedirs(os.path.join(ws, d), exist_ok=True)
        except OSError as e:
            exp.dropped.append({"path": d, "kind": "dir", "why": str(e)[:200]})
    for p in sorted(exp.files):
        dst = os.path.join(ws, p)
        try:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(exp.files[p])
            os.chmod(dst, exp.modes.get(p, 0o644))
        except OSError as e:
            exp.dropped.append({"path": p, "kind": "file", "why": str(e)[:200]})


def main(tar, ws, logs):
    """Empty `ws`, then write the tar's export there (the summary to <logs>/clawgym_export.json); 0, or 1 when
    the tar cannot be read."""
    empty(ws)
    try:
        st = os.statvfs(ws)
        budget = st.f_bavail * st.f_frsize * 3 // 4
    except OSError:
        budget = None
    try:
        exp, budget = read_tar(tar, budget)
    except (tarfile.TarError, OSError, EOFError) as e:
        sys.stderr.write(f"clawgym: workspace export unreadable: {type(e).__name__}: {e}\n")
        return 1
    resolve_links(exp, (os.path.normpath(ws),), budget)
    write(exp, ws)
    try:
        os.makedirs(logs, exist_ok=True)
        with open(os.path.join(logs, "clawgym_export.json"), "w") as fh:
            json.dump(exp.summary(), fh)
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3]))
