"""How the lake stores text that is not valid Unicode (lake string encoding, version 1).

Python strings can hold what UTF-8 cannot: a workspace file name that is not UTF-8 arrives as a ``str`` with
lone surrogates (``os.fsdecode`` / ``surrogateescape`` maps byte 0xFF to ``'\\udcff'``), and tool output or
model text can carry lone surrogates too. Arrow/Parquet strings must be UTF-8, so such a value used to make
the whole batch fail with ``UnicodeEncodeError``. DuckDB's JSON functions also reject ``\\udcff`` escapes
that have no partner, so plain ``json.dumps(ensure_ascii=True)`` is not enough either.

The encoding, applied by :func:`clawgym.lake.io.to_table` to every string the lake stores (plain columns,
list elements and the text of ``*_json`` columns alike):

* every lone surrogate U+D800–U+DFFF, and the escape character ``␛`` (U+241B) itself, is written as
  ``␛`` followed by its code point in four upper-case hex digits: ``'\\udcff.txt'`` → ``'␛DCFF.txt'``,
  ``'␛'`` → ``'␛241B'``. Nothing else changes (NUL, emoji, any valid text are stored as they are).
* ``*_json`` text is first normalised when it contains ``\\uD8xx``–``\\uDFxx`` or ``\\u241B`` escapes
  (``json.loads`` + ``json.dumps(ensure_ascii=False)``), so every surrogate in it is a raw character the
  rule above can escape. The stored JSON is therefore valid UTF-8 JSON that DuckDB parses on every row.

Decoding (:func:`decode_text`) replaces each ``␛XXXX`` by ``chr(0xXXXX)``; it is exact because every ``␛`` in a
stored value came from the encoder. :func:`loads` reads a ``*_json`` column back into Python objects;
:func:`text_bytes` turns a decoded string back into the original bytes (``surrogateescape``, as
``os.fsencode``). In DuckDB the escaped values are visible as ``␛DCFF`` (e.g.
``SELECT * FROM trajectories WHERE diff_json LIKE '%␛%'``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, overload

ESC = "\u241b"  # ␛ SYMBOL FOR ESCAPE
VERSION = 1
_ODD = re.compile("[\ud800-\udfff\u241b]")
_CODE = re.compile("\u241b([0-9A-Fa-f]{4})")
_JSON_ODD_ESCAPE = re.compile(r"\\u(?:[dD][89a-fA-F][0-9a-fA-F]{2}|241[bB])")


def _esc(m: re.Match) -> str:
    return f"{ESC}{ord(m.group(0)):04X}"


def needs_escape(s: str) -> bool:
    """Whether `s` holds a character that :func:`encode_text` escapes."""
    return not s.isascii() and _ODD.search(s) is not None


def encode_text(s: str) -> str:
    """A str → a valid-UTF-8 str that :func:`decode_text` maps back to exactly `s`."""
    if s.isascii():
        return s
    return _ODD.sub(_esc, s)


@overload
def decode_text(s: str) -> str: ...


@overload
def decode_text(s: None) -> None: ...


def decode_text(s: str | None) -> str | None:
    """The original string of a stored (encoded) value; None stays None."""
    if s is None or ESC not in s:
        return s
    return _CODE.sub(lambda m: chr(int(m.group(1), 16)), s)


def _default(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode("utf-8", "surrogateescape")  # exact: text_bytes() gives the bytes back
    if isinstance(v, (set, frozenset, tuple)):
        return list(v)
    return str(v)


def encode_json_text(s: str) -> str:
    """Encode the text of a ``*_json`` column value (JSON, or any text the caller put there)."""
    if _JSON_ODD_ESCAPE.search(s):
        try:
            s = json.dumps(json.loads(s), ensure_ascii=False)
        except ValueError:  # not JSON (e.g. a model's raw tool arguments): stored as text, escaped the same way
            pass
    return encode_text(s)


def dumps(obj: Any) -> str:
    """JSON text of any value, encoded for the lake (bytes become surrogate-escaped strings, others str())."""
    return encode_text(json.dumps(obj, ensure_ascii=False, default=_default))


def loads(stored: str | None, default: Any = None) -> Any:
    """Python value of a stored ``*_json`` column value (strings exactly as they were before encoding)."""
    if stored is None:
        return default
    if isinstance(stored, (list, dict)):
        return stored
    return json.loads(decode_text(stored))


def text_bytes(s: str) -> bytes:
    """The original bytes of a decoded string (a file name, a tool's output): UTF-8 with surrogateescape,
    as ``os.fsencode``; surrogates outside U+DC80–U+DCFF (not from bytes) are written as CESU-8."""
    try:
        return s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogatepass")


def decode_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row read from the lake with every string (and list-of-string element) decoded. ``*_json`` columns
    stay text (now with raw surrogates): pass them to ``json.loads``, or use :func:`loads` on stored text."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        if isinstance(v, str):
            v = decode_text(v)
        elif isinstance(v, list) and v and all(isinstance(x, str) or x is None for x in v):
            v = [decode_text(x) for x in v]
        out[k] = v
    return out


__all__ = ["ESC", "VERSION", "encode_text", "decode_text", "encode_json_text", "dumps", "loads", "text_bytes",
           "decode_row", "needs_escape"]
