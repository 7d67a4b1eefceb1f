"""The agent tools' semantics, on any workspace backend (stdlib only).

One implementation of OpenClaw's core tools (``read``, ``write``, ``edit`` incl. the
``{path, edits:[{oldText,newText}]}`` form, ``exec``, ``ls``, ``apply_patch``) used both by
clawgym.agent.tools (against a clawgym Sandbox) and by the synthesis gates' replay driver, which ships
this file into a sandbox and runs it there against a plain directory (clawgym.sandbox.guest.synth.replay).

A workspace backend is anything with the Sandbox surface the tools use: ``workspace`` (the path the
agent sees), ``read_file(path) -> bytes``, ``write_file(path, data)``, ``remove(path)`` and
``exec(cmd, timeout=, workdir=, max_output=)`` returning an object with ``rc``, ``ok``, ``stdout``,
``stderr`` (str), ``timed_out`` and ``truncated``. Paths handed to it are workspace-relative, or
absolute outside the workspace (the backend refuses what it must).

Agent mistakes never raise: they are ``is_error=True`` results. Exceptions of the classes in ``infra``
(a broken sandbox) propagate.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

MAX_OUTPUT_CHARS = 50_000  # any tool output longer than this is cut and marked
READ_DEFAULT_LINES = 2000
EXEC_DEFAULT_TIMEOUT_S = 120.0
EXEC_MAX_TIMEOUT_S = 1800.0
TOOL_NAMES = ("read", "write", "edit", "exec", "ls", "apply_patch")

Workspace = Any  # the Sandbox surface described above
Infra = tuple[type[BaseException], ...]  # exception classes that propagate (infra, not agent errors)


@dataclass
class ToolResult:
    """The text a tool call returns to the model, and whether it is an error."""

    content: str
    is_error: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ToolArgError(ValueError):
    """The model called a tool with bad arguments (an agent error, shown to the model)."""


def truncate_output(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """Keep head and tail of an over-long output with a visible marker in between."""
    if len(text) <= limit:
        return text
    head = limit * 3 // 4
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... output truncated: {cut} characters omitted ...]\n{text[-tail:]}"


def norm_path(workspace: str, path: Any, field: str = "path") -> str:
    """A tool's path argument as the workspace sees it: relative to the workspace, or absolute outside it
    (the workspace backend decides whether it may go there). `~/` is /root."""
    if not isinstance(path, str) or not path.strip():
        raise ToolArgError(f'"{field}" must be a non-empty string')
    if "\0" in path:
        raise ToolArgError(f'"{field}" contains a NUL character')
    path = path.strip()
    if path.startswith("~/"):
        path = posixpath.join("/root", path[2:])
    ws = workspace.rstrip("/")
    if path.startswith("/"):
        p = posixpath.normpath(path)
        if p == ws:
            return "."
        if p.startswith(ws + "/"):
            return p[len(ws) + 1:]
        return p  # /tmp/... is allowed by the sandbox; anything else it refuses
    p = posixpath.normpath(path)
    if p == ".." or p.startswith("../"):
        raise ToolArgError(f"path escapes the workspace: {path}")
    return p


def _decode(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def as_int(v: Any, field: str) -> int | None:
    """`v` as an int (None for None or ""); ToolArgError naming `field` when it is not a number."""
    if v is None or v == "":
        return None
    try:
        return int(float(v))
    except (TypeError, ValueError, OverflowError):  # OverflowError: inf
        raise ToolArgError(f'"{field}" must be a number, got {v!r}') from None


# ---- tools -----------------------------------------------------------------------------------
def _store(ws: Workspace, writes: list[tuple[str, bytes | None]], infra: Infra, fail: str) -> ToolResult | None:
    """Write each (path, data), or remove the path where data is None. None when all went through, else an
    is_error result: `fail` + the backend's error."""
    try:
        for p, data in writes:
            if data is None:
                ws.remove(p)
            else:
                ws.write_file(p, data)
    except infra:
        raise
    except Exception as e:
        return ToolResult(f"{fail}{e}", True)
    return None


def _read(ws: Workspace, args: dict, infra: Infra = (), max_timeout_s: float | None = None) -> ToolResult:
    path = norm_path(ws.workspace, args.get("path", args.get("file_path")))
    offset = as_int(args.get("offset"), "offset") or 1
    limit = as_int(args.get("limit"), "limit")
    try:
        data = ws.read_file(path)
    except infra:
        raise
    except IsADirectoryError:
        return ToolResult(f"Path is a directory, not a file: {args.get('path')}", True)
    except Exception as e:  # FileNotFoundError, PermissionError, ValueError(outside workspace)
        return ToolResult(f"Cannot read {args.get('path')}: {e}", True)
    if b"\0" in data[:8192]:
        return ToolResult(f"{args.get('path')} is a binary file ({len(data)} bytes)", False)
    lines = _decode(data).split("\n")
    if data.endswith(b"\n"):
        lines = lines[:-1]
    total = len(lines)
    if offset < 1:
        offset = 1
    if total and offset > total:
        return ToolResult(f"Offset {offset} is beyond end of file ({total} lines total)", True)
    n = limit if limit and limit > 0 else READ_DEFAULT_LINES
    chunk = lines[offset - 1: offset - 1 + n]
    text = "\n".join(chunk)
    end = offset - 1 + len(chunk)
    if len(text) > MAX_OUTPUT_CHARS:
        kept: list[str] = []
        size = 0
        for ln in chunk:
            if kept and size + len(ln) + 1 > MAX_OUTPUT_CHARS:
                break
            kept.append(ln[:MAX_OUTPUT_CHARS])
            size += len(ln) + 1
        end = offset - 1 + len(kept)
        text = "\n".join(kept)
        text += (f"\n\n[Output truncated at 50KB. Showing lines {offset}-{end} of {total}. "
                 f"Use offset={end + 1} to continue]")
    elif end < total:
        text += f"\n\n[Showing lines {offset}-{end} of {total}. Use offset={end + 1} to continue]"
    return ToolResult(text)


def _write(ws: Workspace, args: dict, infra: Infra = (), max_timeout_s: float | None = None) -> ToolResult:
    path = norm_path(ws.workspace, args.get("path", args.get("file_path")))
    content = args.get("content")
    if content is None:
        raise ToolArgError('missing "content"')
    if not isinstance(content, str):
        content = json.dumps(content, indent=2) if isinstance(content, (dict, list)) else str(content)
    data = content.encode()
    done = ToolResult(f"Successfully wrote {len(data)} bytes to {args.get('path')}")
    return _store(ws, [(path, data)], infra, f"Cannot write {args.get('path')}: ") or done


def _edit(ws: Workspace, args: dict, infra: Infra = (), max_timeout_s: float | None = None) -> ToolResult:
    path = norm_path(ws.workspace, args.get("path", args.get("file_path")))
    edits = args.get("edits")
    if edits is None:
        if "oldText" not in args and "old_string" not in args:
            raise ToolArgError('give "oldText" and "newText" (or "edits": [{oldText, newText}])')
        edits = [{"oldText": args.get("oldText", args.get("old_string")),
                  "newText": args.get("newText", args.get("new_string", ""))}]
    if not isinstance(edits, list) or not edits:
        raise ToolArgError('"edits" must be a non-empty list of {oldText, newText}')
    try:
        text = _decode(ws.read_file(path))
    except infra:
        raise
    except Exception as e:
        return ToolResult(f"Cannot edit {args.get('path')}: {e}", True)
    for i, ed in enumerate(edits):
        if not isinstance(ed, dict):
            raise ToolArgError(f"edits[{i}] must be an object")
        old, new = ed.get("oldText"), ed.get("newText", "")
        if not isinstance(old, str) or old == "":
            raise ToolArgError(f'edits[{i}]."oldText" must be a non-empty string')
        if not isinstance(new, str):
            raise ToolArgError(f'edits[{i}]."newText" must be a string')
        n = text.count(old)
        if n == 0:
            return ToolResult(f"Could not find the exact text in {args.get('path')}. The old text must "
                              "match exactly including all whitespace and newlines.", True)
        if n > 1:
            return ToolResult(f"Found {n} occurrences of the text in {args.get('path')}. The text must be "
                              "unique. Please provide more context to make it unique.", True)
        text = text.replace(old, new, 1)
    done = ToolResult(f"Successfully replaced text in {args.get('path')}.")
    return _store(ws, [(path, text.encode())], infra, f"Cannot write {args.get('path')}: ") or done


def _exec(ws: Workspace, args: dict, infra: Infra = (), max_timeout_s: float | None = None) -> ToolResult:
    cmd = args.get("command", args.get("cmd"))
    if isinstance(cmd, list):
        cmd = " ".join(shlex.quote(str(c)) for c in cmd)
    if not isinstance(cmd, str) or not cmd.strip():
        raise ToolArgError('"command" must be a non-empty string')
    if "\0" in cmd:
        raise ToolArgError('"command" contains a NUL character')
    timeout = args.get("timeout", args.get("timeoutSeconds"))
    t = float(as_int(timeout, "timeout") or EXEC_DEFAULT_TIMEOUT_S)
    t = max(1.0, min(t, EXEC_MAX_TIMEOUT_S))
    capped = max_timeout_s is not None and max_timeout_s < t
    if capped:  # the rollout's tool time limit or the wall time it has left
        assert max_timeout_s is not None  # capped implies it
        t = max(0.01, float(max_timeout_s))
    workdir = args.get("workdir")
    wd = ws.workspace
    if workdir:
        p = norm_path(ws.workspace, workdir, "workdir")
        wd = p if p.startswith("/") else posixpath.join(ws.workspace, p) if p != "." else ws.workspace
    r = ws.exec(cmd, timeout=t, workdir=wd, max_output=MAX_OUTPUT_CHARS * 4)
    out = r.stdout
    if r.stderr:
        out = (out + ("\n" if out and not out.endswith("\n") else "") + r.stderr) if out else r.stderr
    out = truncate_output(out.rstrip("\n"))
    if r.truncated:
        out += "\n[output truncated]"
    if r.timed_out:
        why = " (the most this rollout's time limits allowed)" if capped else ""
        return ToolResult(f"{out}\n\nCommand timed out after {t:.3g} seconds{why}".lstrip(), True)
    if r.rc != 0:
        return ToolResult(f"{out}\n\nCommand exited with code {r.rc}".lstrip(), True)
    return ToolResult(out if out else "(no output)")


def _ls(ws: Workspace, args: dict, infra: Infra = (), max_timeout_s: float | None = None) -> ToolResult:
    raw = args.get("path") or "."
    path = norm_path(ws.workspace, raw)
    full = path if path.startswith("/") else posixpath.join(ws.workspace, path)
    r = ws.exec(["ls", "-1Ap", "--", full], timeout=max(0.01, min(30.0, max_timeout_s or 30.0)))
    if r.timed_out:
        return ToolResult(f"Listing {raw} timed out", True)
    if not r.ok:
        return ToolResult((r.stderr or r.stdout).strip() or f"Cannot list {raw}", True)
    entries = [e for e in r.stdout.split("\n") if e]
    return ToolResult(truncate_output("\n".join(sorted(entries))) if entries else "(empty directory)")


# ---- apply_patch -------------------------------------------------------------------------------
class PatchError(ValueError):
    """An apply_patch input that cannot be parsed or applied (shown to the model)."""


def parse_patch(text: str) -> list[dict]:
    """Parse ``*** Begin Patch`` … ``*** End Patch`` into operations:
    {"op": "add", "path", "content"} | {"op": "delete", "path"} |
    {"op": "update", "path", "move_to", "hunks": [[(tag, line), …], …]} with tag in ' ', '-', '+'."""
    lines = text.replace("\r\n", "\n").strip("\n").split("\n")
    # tolerate heredoc wrappers such as  apply_patch <<'EOF' … EOF
    while lines and not lines[0].strip().startswith("*** Begin Patch"):
        lines.pop(0)
    if not lines:
        raise PatchError("patch must start with '*** Begin Patch'")
    end = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip() == "*** End Patch"), None)
    if end is None:
        raise PatchError("patch must end with '*** End Patch'")
    body = lines[1:end]
    ops: list[dict] = []
    i = 0
    while i < len(body):
        line = body[i]
        if line.startswith("*** Add File: "):
            path = line[len("*** Add File: "):].strip()
            i += 1
            content: list[str] = []
            while i < len(body) and not body[i].startswith("*** "):
                if not body[i].startswith("+"):
                    raise PatchError(f"Add File {path}: every line must start with '+': {body[i]!r}")
                content.append(body[i][1:])
                i += 1
            ops.append({"op": "add", "path": path, "content": "\n".join(content) + ("\n" if content else "")})
        elif line.startswith("*** Delete File: "):
            ops.append({"op": "delete", "path": line[len("*** Delete File: "):].strip()})
            i += 1
        elif line.startswith("*** Update File: "):
            path = line[len("*** Update File: "):].strip()
            i += 1
            move_to = None
            if i < len(body) and body[i].startswith("*** Move to: "):
                move_to = body[i][len("*** Move to: "):].strip()
                i += 1
            hunks: list[list[tuple[str, str]]] = []
            cur: list[tuple[str, str]] | None = None
            while i < len(body) and not body[i].startswith("*** ") or (
                    i < len(body) and body[i] == "*** End of File"):
                ln = body[i]
                if ln == "*** End of File":
                    i += 1
                    continue
                if ln.startswith("@@"):
                    cur = []
                    hunks.append(cur)
                elif ln[:1] in (" ", "-", "+") or ln == "":
                    if cur is None:
                        cur = []
                        hunks.append(cur)
                    cur.append((ln[:1] or " ", ln[1:]))
                else:
                    raise PatchError(f"Update File {path}: bad line {ln!r}")
                i += 1
            if not any(hunks) and move_to is None:
                raise PatchError(f"Update File {path}: no changes")
            ops.append({"op": "update", "path": path, "move_to": move_to, "hunks": [h for h in hunks if h]})
        elif line.strip() == "":
            i += 1
        else:
            raise PatchError(f"unexpected line in patch: {line!r}")
    if not ops:
        raise PatchError("patch contains no file operations")
    return ops


def _find(lines: list[str], seq: list[str], start: int) -> int:
    if not seq:
        return start
    for norm in (lambda s: s, lambda s: s.rstrip(), lambda s: s.strip()):
        target = [norm(s) for s in seq]
        for k in range(start, len(lines) - len(seq) + 1):
            if [norm(s) for s in lines[k:k + len(seq)]] == target:
                return k
    return -1


def apply_hunks(text: str, hunks: list[list[tuple[str, str]]], path: str) -> str:
    """`text` with each hunk of an Update File operation applied in order; PatchError when the lines to
    change are not found."""
    had_nl = text.endswith("\n")
    lines = text.split("\n")
    if had_nl:
        lines = lines[:-1]
    pos = 0
    for h in hunks:
        old = [s for t, s in h if t in (" ", "-")]
        new = [s for t, s in h if t in (" ", "+")]
        k = _find(lines, old, pos)
        if k < 0:
            k = _find(lines, old, 0)
        if k < 0:
            raise PatchError(f"Update File {path}: could not find the lines to change:\n" + "\n".join(old))
        if not old:  # pure insertion without context: append at the end
            k = len(lines)
        lines[k:k + len(old)] = new
        pos = k + len(new)
    return "\n".join(lines) + ("\n" if had_nl or not text else "")


def _apply_patch(ws: Workspace, args: dict, infra: Infra = (), max_timeout_s: float | None = None) -> ToolResult:
    text = args.get("input", args.get("patch"))
    if not isinstance(text, str) or not text.strip():
        raise ToolArgError('"input" must hold the patch text')
    try:
        ops = parse_patch(text)
        # compute everything first so a failing hunk leaves no half-applied patch
        writes: list[tuple[str, bytes | None]] = []
        summary: list[str] = []
        for op in ops:
            p = norm_path(ws.workspace, op["path"])
            if op["op"] == "add":
                writes.append((p, op["content"].encode()))
                summary.append(f"A {op['path']}")
            elif op["op"] == "delete":
                try:
                    ws.read_file(p)
                except infra:
                    raise
                except Exception:
                    raise PatchError(f"Delete File {op['path']}: no such file") from None
                writes.append((p, None))
                summary.append(f"D {op['path']}")
            else:
                try:
                    old = _decode(ws.read_file(p))
                except infra:
                    raise
                except Exception:
                    raise PatchError(f"Update File {op['path']}: no such file") from None
                new = apply_hunks(old, op["hunks"], op["path"]) if op["hunks"] else old
                if op["move_to"]:
                    writes.append((p, None))
                    writes.append((norm_path(ws.workspace, op["move_to"]), new.encode()))
                    summary.append(f"M {op['path']} -> {op['move_to']}")
                else:
                    writes.append((p, new.encode()))
                    summary.append(f"M {op['path']}")
    except (PatchError, ToolArgError) as e:
        return ToolResult(f"apply_patch failed: {e}", True)
    done = ToolResult("Success. Updated the following files:\n" + "\n".join(summary))
    return _store(ws, writes, infra, "apply_patch failed: ") or done


_TOOLS = {"read": _read, "write": _write, "edit": _edit, "exec": _exec, "ls": _ls,
          "apply_patch": _apply_patch}
_ALIASES = {"bash": "exec", "shell": "exec", "read_file": "read", "write_file": "write",
            "edit_file": "edit", "list": "ls"}


def parse_arguments(arguments: dict | str | None) -> dict:
    """A tool call's arguments (a JSON object or its text) as a dict; ToolArgError when they are not an
    object or hold text that cannot be encoded as UTF-8."""
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            v = json.loads(arguments)
        except json.JSONDecodeError as e:
            raise ToolArgError(f"arguments are not valid JSON: {e}") from None
        if not isinstance(v, dict):
            raise ToolArgError("arguments must be a JSON object")
        arguments = v
    if not isinstance(arguments, dict):
        raise ToolArgError(f"arguments must be an object, got {type(arguments).__name__}")
    _check_unicode(arguments)
    return arguments


def _check_unicode(v: Any, where: str = "arguments") -> None:
    """JSON may carry lone surrogates (\\ud800) that no file name, command or UTF-8 file can hold."""
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolArgError(f"{where} holds a string that is not valid Unicode (a lone surrogate)") from None
    elif isinstance(v, dict):
        for k, x in v.items():
            _check_unicode(k, where)
            _check_unicode(x, f"{where}.{k}" if isinstance(k, str) else where)
    elif isinstance(v, list):
        for x in v:
            _check_unicode(x, where)


def execute(ws: Workspace, name: str, arguments: dict | str | None, max_timeout_s: float | None = None,
            infra: Infra = ()) -> ToolResult:
    """Run one tool call against the workspace backend `ws`. Agent mistakes come back as is_error results;
    exceptions of the `infra` classes propagate. `max_timeout_s` caps the time a command may run (exec's own
    ``timeout`` argument, default 120 s, is lowered to it)."""
    fn = _TOOLS.get(name) if isinstance(name, str) else None
    fn = fn or (_TOOLS.get(_ALIASES.get(name, "")) if isinstance(name, str) else None)
    if fn is None:
        return ToolResult(f"Unknown tool {name!r}. Available tools: {', '.join(TOOL_NAMES)}", True)
    try:
        args = parse_arguments(arguments)
        res = fn(ws, args, infra, max_timeout_s)
    except ToolArgError as e:
        return ToolResult(f"Invalid arguments for {name}: {e}", True)
    res.content = truncate_output(res.content, MAX_OUTPUT_CHARS + 500)
    return res


def replay(ws: Workspace, tool_calls: Iterable, infra: Infra = ()) -> list[ToolResult]:
    """Replay an oracle solution (objects with .name/.arguments, or {name, arguments} dicts)."""
    out = []
    for tc in tool_calls:
        name = tc["name"] if isinstance(tc, dict) else tc.name
        args = tc.get("arguments", {}) if isinstance(tc, dict) else tc.arguments
        out.append(execute(ws, name, args, infra=infra))
    return out


def replay_errors(results: Iterable[ToolResult]) -> list[str]:
    """How a replayed reference's failed calls are reported by the gates."""
    return [f"reference: {str(r.content)[:200]}" for r in results if r.is_error]
