"""Oracle-output variants the synthesis gates grade: generic mutations (missing file, wrong path, a row
dropped, a number off) and family-specific ones, the scaffold (placeholder outputs), and a task's declared
outputs. An overlay maps a workspace path to new bytes, or None for a removed file."""

from __future__ import annotations

import json
import os
import re
from typing import Any, cast

from clawgym.tasks.model import Task

_NUM = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")


def _bump(tok: str) -> str:
    if "." in tok:
        dec = len(tok.split(".")[1])
        return f"{float(tok) + 1:.{dec}f}"
    return str(int(tok) + 1)


def _json_first_number(obj: Any) -> tuple[bool, Any]:
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return False, obj
    if isinstance(obj, (int, float)):
        return True, obj + 1
    items = list(obj.items()) if isinstance(obj, dict) else list(enumerate(obj))
    for k, v in items:
        done, nv = _json_first_number(v)
        if done:
            obj[k] = nv
            return True, obj
    return False, obj


def _json_drop(obj: Any) -> bool:
    if isinstance(obj, list):
        if obj:
            for v in obj:
                if isinstance(v, (list, dict)) and _json_drop_list_only(v):
                    return True
            obj.pop()
            return True
        return False
    if isinstance(obj, dict):
        for v in obj.values():
            if _json_drop_list_only(v):
                return True
        if len(obj) >= 2:
            obj.pop(list(obj)[-1])
            return True
    return False


def _json_drop_list_only(obj: Any) -> bool:
    if isinstance(obj, list) and obj:
        obj.pop()
        return True
    if isinstance(obj, dict):
        return any(_json_drop_list_only(v) for v in obj.values())
    return False


_INVALID = object()


def _load(path: str, data: bytes) -> tuple[str, str, Any]:
    """(extension, text, the parsed JSON of a .json file: _INVALID when it does not parse, else None)."""
    text = data.decode("utf-8", errors="replace")
    ext = os.path.splitext(path)[1].lower()
    if ext != ".json":
        return ext, text, None
    try:
        return ext, text, json.loads(text)
    except json.JSONDecodeError:
        return ext, text, _INVALID


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode()


def number_off(path: str, data: bytes) -> bytes | None:
    """`data` with its first number raised by one (JSON value, CSV cell, markdown table cell or text), or None
    when it has none."""
    ext, text, obj = _load(path, data)
    if ext == ".json":
        if obj is _INVALID:
            return None
        done, obj = _json_first_number(obj)
        return _json_bytes(obj) if done else None
    lines = text.splitlines(keepends=True)
    if ext == ".csv":
        for i, line in enumerate(lines[1:], 1):
            cells = line.rstrip("\n").split(",")
            for j, c in enumerate(cells):
                if re.fullmatch(r"\s*-?\d+(?:\.\d+)?\s*", c):
                    cells[j] = _bump(c.strip())
                    lines[i] = ",".join(cells) + ("\n" if line.endswith("\n") else "")
                    return "".join(lines).encode()
        return None
    # markdown / text / yaml: a numeric table cell first, else the first number outside headings/comments
    for i, line in enumerate(lines):
        if line.strip().startswith("|"):
            cells = line.split("|")
            for j, c in enumerate(cells):
                if re.fullmatch(r"\s*-?\d+(?:\.\d+)?\s*", c):
                    cells[j] = c.replace(c.strip(), _bump(c.strip()))
                    lines[i] = "|".join(cells)
                    return "".join(lines).encode()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("#"):
            continue
        m = _NUM.search(line)
        if m:
            lines[i] = line[:m.start()] + _bump(m.group()) + line[m.end():]
            return "".join(lines).encode()
    return None


def row_dropped(path: str, data: bytes) -> bytes | None:
    """`data` with its last record removed (JSON list item or key, CSV/TSV/JSONL/text line, table row or bullet),
    or None when there is nothing to drop."""
    ext, text, obj = _load(path, data)
    if ext == ".json":
        return None if obj is _INVALID or not _json_drop(obj) else _json_bytes(obj)
    lines = text.splitlines(keepends=True)
    idx = [i for i, ln in enumerate(lines) if ln.strip()]
    if ext in (".csv", ".jsonl", ".tsv", ".txt"):
        if len(idx) < (2 if ext in (".csv", ".tsv") else 1):
            return None
        del lines[idx[-1]]
        return "".join(lines).encode()
    table = [i for i in idx if lines[i].strip().startswith("|") and not re.fullmatch(r"[|\s:-]+", lines[i].strip())]
    bullets = [i for i in idx if re.match(r"\s*(?:[-*+]|\d+[.)])\s+", lines[i])]
    for cand in (table[1:], bullets, idx):
        if cand:
            del lines[cand[-1]]
            return "".join(lines).encode()
    return None


def generic_mutations(outputs: list[str], overlay: dict[str, bytes | None],
                      inputs: dict[str, bytes]) -> dict[str, dict[str, bytes | None]]:
    """missing_file, wrong_path, row_dropped, number_off on the primary output (those that apply)."""
    prim = next((p for p in outputs if overlay.get(p) is not None), None)
    if prim is None:
        return {}
    data = overlay[prim]
    assert data is not None
    muts: dict[str, dict[str, bytes | None]] = {}
    muts["missing_file"] = {**overlay, prim: None}
    base = os.path.basename(prim)
    wrong = base if base not in inputs and base not in overlay else "misc/" + base
    muts["wrong_path"] = {**overlay, prim: None, wrong: data}
    rd = row_dropped(prim, data)
    if rd is not None and rd != data:
        muts["row_dropped"] = {**overlay, prim: rd}
    no = number_off(prim, data)
    if no is not None and no != data:
        muts["number_off"] = {**overlay, prim: no}
    return muts


def scaffold_overlay(outputs: list[str]) -> dict[str, bytes | None]:
    """Placeholder content for each output path (`{}` for JSON, a line of text otherwise)."""
    return {p: (b"{}\n" if p.endswith(".json") else b"placeholder\n") for p in outputs}


_OUT_PATH = re.compile(r"\boutput/[\w.\-/]*\w")


def task_outputs(task: Task) -> list[str]:
    """Declared deliverables: source["outputs"] (LLM-route tasks: source["llm"]["output_paths"]), reference
    writes under output/, else paths in the instruction."""
    outs = list(task.source.get("outputs") or (task.source.get("llm") or {}).get("output_paths") or [])
    for c in task.reference or []:
        p = c.arguments.get("path", "")
        if c.name == "write" and p.startswith("output/") and p not in outs:
            outs.append(p)
    if not outs:
        outs = [p for p in dict.fromkeys(_OUT_PATH.findall(task.instruction)) if "." in p.rsplit("/", 1)[-1]]
    return outs


def family_mutations(task: Task, overlay: dict[str, bytes | None]) -> dict[str, dict[str, bytes | None]]:
    """The procedural family's own corruptions of `overlay` for this task's seed, by name (none for
    LLM-route tasks; a mutation that cannot apply is skipped)."""
    if task.route != "procedural" or not task.source.get("mutations"):
        return {}
    from clawgym.synth.families.base import get_family

    out: dict[str, dict[str, bytes | None]] = {}
    for name, m in get_family(task.family).mutations(task.seed or 0).items():
        try:
            # Mutation.fn is typed bytes-only; its overlays carry None (= deleted) both ways
            out[name] = cast("dict[str, bytes | None]", m.fn(cast("dict[str, bytes]", dict(overlay))))
        except Exception:  # a mutation that cannot apply is skipped, not counted
            continue
    return out


__all__ = ["number_off", "row_dropped", "generic_mutations", "scaffold_overlay", "task_outputs",
           "family_mutations"]
