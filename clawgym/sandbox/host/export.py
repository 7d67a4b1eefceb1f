"""The workspace as data: what leaves an agent's sandbox for the verifier's clean room.

After the agent phase the host walks the workspace (never following a link, never blocking on a FIFO) and
keeps only *data*:

* regular files: their bytes and permission bits (set-id, sticky bits dropped; 0o755 or 0o644 only);
* directories (so an empty output folder survives);
* a symlink becomes a regular file holding the bytes of its target **as they were at export time**, when the
  target, resolved link by link inside the workspace (relative or absolute, through other links, at most
  40 hops), is a regular file of the workspace; every other link (to a directory, dangling, pointing outside
  the workspace, through `/proc/self/root`, a loop) is dropped;
* FIFOs, sockets, devices, xattrs, ownership: dropped.

`WorkspaceExport.files` are `clawgym.tasks.File` objects: a fresh sandbox (`SandboxFactory.rooms()`) receives
them with `open(files)` exactly like a task's own files. What was dropped is listed (`dropped`) for the record.
"""

from __future__ import annotations

import posixpath
import stat
from dataclasses import dataclass, field

MAX_HOPS = 40


@dataclass
class WorkspaceExport:
    """Regular files (path -> bytes, mode), directories and the entries left out, of one workspace."""

    files: dict[str, bytes] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)  # symlink path -> its target, as read
    resolved: dict[str, str] = field(default_factory=dict)  # symlink path -> the workspace file it became
    dropped: list[dict] = field(default_factory=list)  # {path, kind, why}

    def file_objects(self) -> list:
        """The export as `clawgym.tasks.File` objects (what `SandboxFactory.open` takes), sorted by path."""
        from clawgym.tasks.model import File

        return [File(path=p, content=self.files[p], mode=self.modes.get(p, 0o644)) for p in sorted(self.files)]

    def empty_dirs(self) -> list[str]:
        """Directories with no exported file below them (the others are made by writing their files)."""
        full = set()
        for p in self.files:
            parts = p.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                full.add("/".join(parts[:i]))
        return sorted(d for d in self.dirs if d and d not in full)

    def summary(self) -> dict:
        """Counts and the dropped entries (at most 50), for the verification record."""
        return {"files": len(self.files), "bytes": sum(len(b) for b in self.files.values()),
                "dirs": len(self.dirs), "links_resolved": len(self.resolved),
                "dropped": self.dropped[:50], "n_dropped": len(self.dropped)}


def clean_mode(st_mode: int) -> int:
    """0o755 when any exec bit was set, else 0o644 (no set-id, sticky, group/other write bits)."""
    return 0o755 if stat.S_IMODE(st_mode) & 0o111 else 0o644


def resolve_links(exp: WorkspaceExport, workspaces: tuple[str, ...], budget: int | None = None) -> None:
    """Turn each symlink of `exp.links` into a file of `exp.files` (see the module docstring) or drop it.
    `workspaces`: the absolute paths under which the workspace is seen from inside the sandbox. `budget`: bytes
    the copies may add in all (a link over it is dropped: the room must hold the export)."""
    roots = tuple(posixpath.normpath(w).rstrip("/") for w in workspaces if w)
    dirs = set(exp.dirs)

    def walk(link: str) -> tuple[str | None, str]:
        """-> (workspace file the link finally names, or None; why not)."""
        hops = 0
        path: list[str] = []
        comps = link.split("/")
        i = 0
        while i < len(comps):
            c = comps[i]
            cur = "/".join(path + [c])
            if cur in exp.links:
                hops += 1
                if hops > MAX_HOPS:
                    return None, "too many levels of links"
                target = exp.links[cur]
                if target.startswith("/"):
                    t = posixpath.normpath(target)
                    base = next((r for r in roots if t == r or t.startswith(r + "/")), None)
                    if base is None:
                        return None, f"points outside the workspace ({target[:200]!r})"
                    new = [x for x in t[len(base):].split("/") if x]
                    path = []
                else:
                    new = [x for x in target.split("/") if x]
                comps = new + comps[i + 1:]
                i = 0
                continue
            if c in ("", "."):
                i += 1
                continue
            if c == "..":
                if not path:
                    return None, f"points outside the workspace ({exp.links.get(link, '')[:200]!r})"
                path.pop()
                i += 1
                continue
            path.append(c)
            i += 1
        final = "/".join(path)
        if final in exp.files:
            return final, ""
        if final in dirs or final == "":
            return None, "points to a directory"
        return None, "dangling (no such workspace file)"

    for link in sorted(exp.links):
        target, why = walk(link)
        if target is None:
            exp.dropped.append({"path": link, "kind": "symlink", "why": why})
            continue
        size = len(exp.files[target])
        if budget is not None:
            if size > budget:
                exp.dropped.append({"path": link, "kind": "symlink", "why": "over the export's byte budget"})
                continue
            budget -= size
        exp.files[link] = exp.files[target]  # the same bytes object: one copy on the host
        exp.modes[link] = exp.modes.get(target, 0o644)
        exp.resolved[link] = target


__all__ = ["WorkspaceExport", "resolve_links", "clean_mode", "MAX_HOPS"]
