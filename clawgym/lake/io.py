"""Paths, atomic Parquet writes and hive-partitioned part files of the lake.

Layout: ``<data root>/lake/<table>/[k=v/…]/part-<stamp>-<rand>.parquet``. Every file is written to a
temp name that does not end in ``.parquet`` and then ``os.replace``d into place, so readers (DuckDB
globs, pyarrow datasets) never see a half-written file and a killed run leaves none behind.

The lake root may also be an object-store prefix (``s3://bucket/prefix`` or a
:class:`clawgym.lake.store.RemoteLake` carrying endpoint and credentials): the same functions then list,
read and write objects through ``pyarrow.fs``; each part file is one whole-object upload (see
:mod:`clawgym.lake.store` for the overwrite rule readers follow there).
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from clawgym.lake import codec, modes
from clawgym.lake.schemas import PARTITIONS, file_schema, schema
from clawgym.lake.store import BASE_SUFFIX, RemoteLake, as_remote, is_remote

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA_DIR = REPO_ROOT / "data"  # the one default of the data root; CLAWGYM_DATA is read by entry points
_SAFE = re.compile(r"^[A-Za-z0-9._+@-]+$")


def data_root(data_dir: str | Path | None = None) -> Path:
    """The data root: `data_dir`, else <repo>/data. The library never reads the environment: the
    LakeResource and the `clawgym` CLI take $CLAWGYM_DATA and pass it down."""
    return Path(data_dir or DEFAULT_DATA_DIR).resolve()


def lake_root(root: str | Path | RemoteLake | None = None) -> Path | RemoteLake:
    """The lake folder: `root` (itself a lake folder), else <repo>/data/lake; an object-store root
    (``s3://…`` or a RemoteLake) gives its :class:`~clawgym.lake.store.RemoteLake`."""
    if is_remote(root):
        return as_remote(root)
    return Path(cast("str | Path", root)).resolve() if root else data_root() / "lake"  # not remote: a path


def table_dir(name: str, root: str | Path | RemoteLake | None = None) -> Path | str:
    """Folder of table `name` in the lake (KeyError for an unknown table); its ``s3://`` URI on object storage."""
    schema(name)  # validates the name
    if is_remote(root):
        r = as_remote(root)
        return r.uri_of(r.key(name))
    return lake_root(root) / name


def _check_value(col: str, v: Any) -> str:
    s = str(v)
    if not _SAFE.match(s):
        raise ValueError(f"partition value {col}={s!r} must match {_SAFE.pattern}")
    return s


def _partition_parts(name: str, partitions: Mapping[str, Any] | None) -> list[str]:
    cols = PARTITIONS.get(name, ())
    partitions = dict(partitions or {})
    if set(partitions) != set(cols):
        raise ValueError(f"table {name!r} is partitioned by {cols}, got {tuple(partitions)}")
    return [f"{c}={_check_value(c, partitions[c])}" for c in cols]


def partition_dir(name: str, partitions: Mapping[str, Any] | None = None,
                  root: str | Path | RemoteLake | None = None) -> Path | str:
    """Folder of one partition: every partition column of the table must be given, in any order
    (its ``s3://`` URI on object storage)."""
    d = table_dir(name, root)
    if is_remote(root):
        return "/".join([str(d), *_partition_parts(name, partitions)])
    d = cast(Path, d)  # a local lake's folder
    for kv in _partition_parts(name, partitions):
        d = d / kv
    return d


def atomic_write_parquet(table: pa.Table, path: str | Path) -> Path:
    """Write `table` to `path` via a temp file in the same folder + os.replace (atomic on POSIX); the file and
    the folders made for it get the lake's modes (:mod:`clawgym.lake.modes`: owner-only unless shared)."""
    path = Path(path)
    modes.make_dirs(path.parent)  # owner-only folders (clawgym.lake.modes), whatever the umask
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        modes.private_open(tmp).close()  # made 0600 (0640 with a shared group) before its first byte
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def _jsonable(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, str):
        return codec.encode_json_text(v)
    return codec.dumps(v)


def _text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray, memoryview)):
        v = bytes(v).decode("utf-8", "surrogateescape")
    return codec.encode_text(v if isinstance(v, str) else str(v))


def to_table(name: str, rows: Iterable[Mapping[str, Any]] | pa.Table, *, for_file: bool = False) -> pa.Table:
    """Conform rows (dicts) to the table's schema: missing columns become null, extra keys are dropped,
    ``*_json`` columns accept any JSON-able value, timestamps default to now (UTC). Every string is stored
    with the lake string encoding (:mod:`clawgym.lake.codec`): lone surrogates (non-UTF-8 file names) and
    other odd text never fail a write and read back exactly through ``codec.decode_text`` / ``codec.loads``."""
    sch = file_schema(name) if for_file else schema(name)
    if isinstance(rows, pa.Table):
        rows = rows.to_pylist()
    rows = list(rows)
    now = _dt.datetime.now(_dt.UTC)
    cols: dict[str, list] = {}
    for f in sch:
        vals = [r.get(f.name) for r in rows]
        if f.name.endswith("_json"):
            vals = [_jsonable(v) for v in vals]
        elif pa.types.is_timestamp(f.type):
            vals = [now if v is None else v for v in vals]
        elif pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
            vals = [_text(v) for v in vals]
        elif pa.types.is_list(f.type) and pa.types.is_string(f.type.value_type):
            vals = [None if v is None else [_text(x) for x in v] for v in vals]
        elif pa.types.is_floating(f.type):
            vals = [None if v is None else float(v) for v in vals]
        elif pa.types.is_integer(f.type):
            vals = [None if v is None else int(v) for v in vals]
        cols[f.name] = vals
    return pa.Table.from_pydict(cols, schema=sch)


def _part_name(base: bool = False) -> str:
    """part-<UTC second>-<ns>-<rand>.parquet: names sort in write order (readers rely on it for "latest row").
    `base` (object-store overwrites): ….base.parquet, a part that hides the older parts of its folder."""
    ns = time.time_ns()
    return f"part-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(ns // 10**9))}-{ns % 10**9:09d}-" \
           f"{secrets.token_hex(4)}" + (BASE_SUFFIX if base else ".parquet")


def _parquet_bytes(table: pa.Table) -> pa.Buffer:
    """The whole Parquet file in memory (same writer settings as atomic_write_parquet)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def _visible(files: list[str]) -> list[str]:
    """Part files (full paths) readers use: per folder, from the newest base part on (all when none)."""
    by_dir: dict[str, list[str]] = {}
    for f in sorted(files):
        by_dir.setdefault(f.rsplit("/", 1)[0], []).append(f)
    out = []
    for d in sorted(by_dir):
        fs = by_dir[d]
        bases = [i for i, f in enumerate(fs) if f.endswith(BASE_SUFFIX)]
        out += fs[bases[-1]:] if bases else fs
    return out


def remote_parts(name: str, r: RemoteLake, partitions: Mapping[str, str] | None = None) -> list[tuple[str, list[str]]]:
    """(object path, [k=v folders]) of the visible part files of table `name` on object storage, optionally only
    the partitions matching `partitions`, in name (write) order."""
    cols = PARTITIONS.get(name, ())
    base = r.key(name)
    partitions = dict(partitions or {})
    found = []
    for info in r.list_files(base):
        rel = info.path[len(base) + 1:].split("/")
        if not rel[-1].endswith(".parquet") or rel[-1].startswith(".") or len(rel) != len(cols) + 1:
            continue
        kvs = rel[:-1]
        if any(not kv.startswith(f"{c}=") or (c in partitions and kv != f"{c}={partitions[c]}")
               for c, kv in zip(cols, kvs)):
            continue
        found.append(info.path)
    return [(f, f[len(base) + 1:].split("/")[:-1]) for f in _visible(found)]


def _remote_write(name: str, tbl: pa.Table, parts: list[str], mode: str, r: RemoteLake) -> str:
    folder = r.key(name, *parts)
    # every part of the folder, hidden ones too (left by an overwrite interrupted before its deletes)
    old = sorted(i.path for i in r.list_files(folder) if i.path.rsplit("/", 1)[0] == folder
                 and i.path.endswith(".parquet")) if mode == "overwrite" else []
    path = f"{folder}/{_part_name(base=mode == 'overwrite')}"
    r.put(path, _parquet_bytes(tbl))
    for p in old:  # hidden from readers by the new base part already; deleted to reclaim space
        r.delete(p)
    return r.uri_of(path)


def write_table(name: str, rows, partitions: Mapping[str, Any] | None = None, *, mode: str = "overwrite",
                root: str | Path | RemoteLake | None = None) -> Path | str:
    """Write rows into a table (or one partition of a partitioned table).

    mode="append" adds one new part file; mode="overwrite" adds it and then removes the older parts of
    that folder (never touching other partitions). Returns the new file's path (its ``s3://`` URI on
    object storage, where an overwrite's part is a base part: see :mod:`clawgym.lake.store`).
    """
    if mode not in ("append", "overwrite"):
        raise ValueError(f"mode must be append|overwrite, got {mode!r}")
    cols = PARTITIONS.get(name, ())
    if is_remote(root):
        parts = _partition_parts(name, partitions) if cols else []
        if cols:
            rows = [{**r, **{c: None for c in cols}}
                    for r in (rows.to_pylist() if isinstance(rows, pa.Table) else rows)]
        return _remote_write(name, to_table(name, rows, for_file=True), parts, mode, as_remote(root))
    d = cast(Path, partition_dir(name, partitions, root) if cols else table_dir(name, root))  # local (remote: above)
    if cols:
        rows = [{**r, **{c: None for c in cols}} for r in (rows.to_pylist() if isinstance(rows, pa.Table) else rows)]
    tbl = to_table(name, rows, for_file=True)
    old = sorted(d.glob("*.parquet")) if d.exists() else []
    if cols:  # parts at the root of a partitioned table (written before it was partitioned): no reader sees them,
        top = cast(Path, table_dir(name, root))  # and DuckDB's hive view cannot mix them with partition folders
        old += sorted(top.glob("*.parquet")) if top.exists() else []
    path = atomic_write_parquet(tbl, d / _part_name())
    for p in old:
        if mode == "overwrite" or p.parent != d:
            p.unlink(missing_ok=True)
    return path


def append_rows(name: str, rows, partitions: Mapping[str, Any] | None = None,
                root: str | Path | RemoteLake | None = None) -> Path | str:
    """Add `rows` to table `name` (or one partition of it) as a new part file; returns its path."""
    return write_table(name, rows, partitions, mode="append", root=root)


def _remote_read(name: str, r: RemoteLake, partitions: Mapping[str, str], attempts: int = 20):
    """[(table, [k=v folders])] of the visible parts; when a listed part vanishes before it is read (a
    concurrent overwrite deleted it) the listing is taken again, after a short growing pause."""
    for attempt in range(attempts):
        if attempt:
            time.sleep(min(0.02 * attempt, 0.5))
        files = remote_parts(name, r, partitions)
        try:
            with ThreadPoolExecutor(max_workers=min(8, len(files) or 1)) as pool:
                tables = list(pool.map(lambda f: pq.read_table(f[0], filesystem=r.fs), files))
            return [(t, kvs) for t, (_, kvs) in zip(tables, files)]
        except OSError as e:  # FileNotFoundError included
            try:
                gone = [p for p, _ in files if r.fs.get_file_info(p).type == pafs.FileType.NotFound]
            except OSError:
                gone = []
            if not gone or attempt == attempts - 1:
                raise r.error(f"reading table {name!r}", e) from None
    raise AssertionError("unreachable")  # pragma: no cover


def read_table(name: str, partitions: Mapping[str, Any] | None = None,
               root: str | Path | RemoteLake | None = None) -> pa.Table:
    """Read a table (optionally only the partitions matching `partitions`, a subset of the partition
    columns) with the full schema; partition columns are filled from the folder names."""
    sch = schema(name)
    d = table_dir(name, root)
    cols = PARTITIONS.get(name, ())
    partitions = {k: str(v) for k, v in (partitions or {}).items()}
    bad = set(partitions) - set(cols)
    if bad:
        raise ValueError(f"table {name!r} has no partition column(s) {sorted(bad)}")
    if is_remote(root):
        read = _remote_read(name, as_remote(root), partitions)
    else:
        d = cast(Path, d)  # a local lake's folder
        pattern = "/".join(f"{c}={partitions.get(c, '*')}" for c in cols)
        files = sorted(d.glob(f"{pattern}/*.parquet" if cols else "*.parquet")) if d.exists() else []
        read = [(pq.read_table(f), f.relative_to(d).parts[:-1]) for f in files]
    parts = []
    for t, rel in read:
        for kv in rel:
            k, v = kv.split("=", 1)
            typ = sch.field(k).type
            val = int(v) if pa.types.is_integer(typ) else v
            t = t.append_column(pa.field(k, typ), pa.array([val] * t.num_rows, type=typ))
        parts.append(t.select([c for c in sch.names if c in t.column_names]))
    if not parts:
        return sch.empty_table()
    out = pa.concat_tables(parts, promote_options="permissive")
    missing = [f for f in sch if f.name not in out.column_names]
    for f in missing:
        out = out.append_column(f, pa.nulls(out.num_rows, f.type))
    return out.select(sch.names).cast(sch)


def read_rows(name: str, partitions: Mapping[str, Any] | None = None, root: str | Path | RemoteLake | None = None,
              *, decode: bool = True) -> list[dict[str, Any]]:
    """Rows as dicts; with decode (default) every string is decoded back to what was written
    (:func:`clawgym.lake.codec.decode_row`): rewrite such rows with :func:`write_table` without double-encoding."""
    rows = read_table(name, partitions, root).to_pylist()
    return [codec.decode_row(r) for r in rows] if decode else rows


def column_values(name: str, column: str, partitions: Mapping[str, Any] | None = None,
                  root: str | Path | RemoteLake | None = None) -> set:
    """Distinct values of one column (e.g. task_ids already written to a trajectories partition)."""
    return set(read_table(name, partitions, root).column(column).to_pylist())


def list_partitions(name: str, root: str | Path | RemoteLake | None = None) -> list[dict[str, str]]:
    """The partitions of table `name` that hold at least one file, as {column: value} dicts."""
    cols = PARTITIONS.get(name, ())
    if cols and is_remote(root):
        seen = sorted({tuple(kvs) for _, kvs in remote_parts(name, as_remote(root))})
        return [dict(kv.split("=", 1) for kv in kvs) for kvs in seen]
    d = cast(Path, table_dir(name, root))  # a local lake's folder (when it is read below)
    if not cols or not d.exists():
        return []
    out = []
    for p in sorted(d.glob("/".join(["*"] * len(cols)))):
        if any(p.glob("*.parquet")):
            out.append(dict(kv.split("=", 1) for kv in p.relative_to(d).parts))
    return out
