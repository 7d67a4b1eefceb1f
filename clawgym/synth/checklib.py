"""Shared check library for procedural verifiers.

This module's SOURCE is prepended to every procedural task's grade() code (see
clawgym.synth.families.base.GradeCode), so it must stay stdlib-only (yaml optional) and run
under a plain Debian python3. Every helper returns a neutral/empty value when a file is missing
or malformed, so checks built on it score 0 on an untouched workspace or on placeholders.
"""

import csv as _csv
import hashlib as _hashlib
import io as _io
import json as _json
import os as _os
import re as _re

try:  # optional: Debian python3 may lack PyYAML
    import yaml as _yaml
except Exception:  # pragma: no cover
    _yaml = None


def _path(ws, rel):
    return _os.path.join(ws, rel)


def exists(ws, rel):
    return _os.path.isfile(_path(ws, rel))


def read_text(ws, rel):
    try:
        with open(_path(ws, rel), encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except Exception:
        return None


def sha256(ws, rel):
    try:
        with open(_path(ws, rel), "rb") as fh:
            return _hashlib.sha256(fh.read()).hexdigest()
    except Exception:
        return None


def load_json(ws, rel):
    t = read_text(ws, rel)
    if t is None:
        return None
    try:
        return _json.loads(t)
    except Exception:
        return None


def load_jsonl(ws, rel):
    t = read_text(ws, rel)
    if t is None:
        return None
    out = []
    for line in t.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(_json.loads(line))
        except Exception:
            return None
    return out


def load_yaml(ws, rel):
    t = read_text(ws, rel)
    if t is None or _yaml is None:
        return None
    try:
        return _yaml.safe_load(t)
    except Exception:
        return None


def load_csv(ws, rel):
    """Rows as dicts with stripped, lower-cased header names; None when missing/unparsable."""
    t = read_text(ws, rel)
    if t is None or not t.strip():
        return None
    try:
        rd = _csv.reader(_io.StringIO(t.strip("\ufeff")))
        rows = [r for r in rd if any(c.strip() for c in r)]
    except Exception:
        return None
    if not rows:
        return None
    head = [h.strip().lower() for h in rows[0]]
    return [dict(zip(head, [c.strip() for c in r])) for r in rows[1:]]


def to_num(x):
    """Parse '1,234.50', '$12', ' 12 % ', '(3.5)' -> float; None when not a number."""
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if x is None:
        return None
    s = str(x).strip().replace(",", "").replace("$", "").replace("€", "").replace("%", "").strip()
    neg = s.startswith("(") and s.endswith(")")
    s = s.strip("()")
    try:
        v = float(s)
    except Exception:
        return None
    return -v if neg else v


def close(a, b, tol=0.01, rel=0.0):
    a, b = to_num(a), to_num(b)
    if a is None or b is None:
        return False
    return abs(a - b) <= max(tol, rel * abs(b))


def norm(s):
    return _re.sub(r"\s+", " ", str(s if s is not None else "")).strip().lower()


def frac(n, d):
    return (float(n) / float(d)) if d else 0.0


def all_or_nothing(ok):
    return 1.0 if ok else 0.0


def set_score(got, expected):
    """1.0 iff the normalised sets are equal, else the Jaccard overlap (0 for None/empty got)."""
    if not got:
        return 0.0
    g = {norm(x) for x in got}
    e = {norm(x) for x in expected}
    if g == e:
        return 1.0
    return frac(len(g & e), len(g | e))


def list_equal(got, expected):
    if not isinstance(got, list):
        return False
    return [norm(x) for x in got] == [norm(x) for x in expected]


def contains_all(text, items):
    """Fraction of items found (case-insensitive, whitespace-normalised) in text."""
    if not text:
        return 0.0
    t = norm(text)
    return frac(sum(1 for i in items if norm(i) in t), len(items))


def contains_none(text, items):
    if not text:
        return False
    t = norm(text)
    return not any(norm(i) in t for i in items)


def numbers_in(text):
    return [float(m.replace(",", "")) for m in _re.findall(r"-?\d[\d,]*\.?\d*", text or "")]


def has_number(text, value, tol=0.01):
    return any(abs(v - float(value)) <= tol for v in numbers_in(text))


def md_headings(text):
    return [m.strip() for m in _re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text or "", _re.M)]


def md_table(text):
    """First markdown table as list of dicts (lower-cased headers); [] when none."""
    rows = []
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("|") and line.endswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if all(_re.fullmatch(r":?-{2,}:?", c) for c in cells if c):
                continue
            rows.append(cells)
        elif rows:
            break
    if len(rows) < 2:
        return []
    head = [h.lower() for h in rows[0]]
    return [dict(zip(head, r)) for r in rows[1:]]


def md_bullets(text):
    return [m.strip() for m in _re.findall(r"^\s*(?:[-*+]|\d+[.)])\s+(.+)$", text or "", _re.M)]


def rows_score(rows, expected, key, fields, tol=0.01):
    """Compare a list of dict rows with expected rows (dicts), matched by `key`.
    Score = fraction of expected rows whose fields all match, times a penalty for extra rows."""
    if not rows or not isinstance(rows, list):
        return 0.0
    got = {}
    for r in rows:
        if isinstance(r, dict):
            got[norm(r.get(key))] = r
    good = 0
    for e in expected:
        r = got.get(norm(e[key]))
        if r is None:
            continue
        ok = True
        for f in fields:
            ev, gv = e.get(f), r.get(f)
            if isinstance(ev, (int, float)) and not isinstance(ev, bool):
                ok = ok and close(gv, ev, tol)
            else:
                ok = ok and norm(gv) == norm(ev)
        good += 1 if ok else 0
    extra = max(0, len(got) - len(expected))
    return frac(good, len(expected)) * (1.0 if extra == 0 else frac(len(expected), len(expected) + extra))


def unchanged(ws, rel, digest):
    return sha256(ws, rel) == digest


def _safe(fn):
    try:
        v = fn()
    except Exception:
        return 0.0
    if v is None:
        return 0.0
    try:
        v = float(v)
    except Exception:
        return 0.0
    if v != v:
        return 0.0
    return max(0.0, min(1.0, v))
