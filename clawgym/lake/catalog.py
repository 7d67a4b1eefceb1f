"""The DuckDB catalog: one view per lake table over its Parquet files (works with zero files too).

A lake on object storage (``s3://…``, a :class:`clawgym.lake.store.RemoteLake`) is read WITHOUT DuckDB's httpfs
extension: :func:`connect` registers one ``pyarrow.dataset`` per table (its visible part files, read through the
lake's ``pyarrow.fs.S3FileSystem``) in a DuckDB connection and puts the typed view over it. Such views live in
that connection only, so :func:`query` opens one per call, and :func:`refresh_catalog` over an object-store lake
removes the lake views from the catalog file instead of pointing them at stale local files.

:func:`query` (what ``clawgym sql`` runs) sees the lake and nothing else: only read statements (SELECT, VALUES,
DESCRIBE, SHOW, SUMMARIZE, EXPLAIN of those), over a connection whose file access is limited to the lake's own
folder (DuckDB's ``enable_external_access=false`` + ``allowed_directories``; no folder at all for an object-store
lake, read through registered datasets) and locked (``lock_configuration``) so the query cannot turn it back on:
``read_text('/etc/shadow')``, ``COPY … TO``, ``ATTACH``, ``INSTALL``/``LOAD`` fail with a :class:`LakeQueryError`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clawgym.lake import modes
from clawgym.lake.io import data_root, lake_root, remote_parts, table_dir
from clawgym.lake.schemas import PARTITIONS, TABLES, duckdb_type, file_schema, schema
from clawgym.lake.store import as_remote, is_remote


class LakeQueryError(ValueError):
    """A query :func:`query` does not run: not a read statement, or it reaches outside the lake."""


# statements a lake query may be made of: reads only (DESCRIBE / SHOW / SUMMARIZE / FROM … parse as SELECT)
READ_STATEMENTS = ("SELECT", "EXPLAIN")


def check_read_only(sql: str) -> None:
    """LakeQueryError unless every statement of `sql` is a read: SELECT (VALUES, DESCRIBE, SHOW, SUMMARIZE,
    FROM …) or EXPLAIN [ANALYZE] of one. COPY, EXPORT, ATTACH, SET, PRAGMA, CALL, INSTALL, LOAD, PREPARE … are
    refused before anything runs (EXPLAIN ANALYZE would run its statement: its inner statement is checked too)."""
    import re

    import duckdb

    try:
        stmts = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise LakeQueryError(str(e)) from None
    for st in stmts:
        kind = str(st.type).rsplit(".", 1)[-1]
        text = st.query.strip().rstrip(";")
        if kind == "EXPLAIN":
            inner = re.sub(r"^\s*explain\s+(analy[sz]e\s+)?", "", text, flags=re.I)
            try:
                inner_kinds = [str(i.type).rsplit(".", 1)[-1] for i in duckdb.extract_statements(inner)]
            except duckdb.Error:
                inner_kinds = []
            if inner != text and inner_kinds == ["SELECT"]:
                continue
        elif kind == "SELECT":
            continue
        raise LakeQueryError(f"only read queries run over the lake (SELECT, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN), "
                             f"not {kind}: {text[:80]!r}")


def restrict(con, allowed_dirs=()) -> Any:
    """Lock `con` down to the lake: no file access except below `allowed_dirs` (its registered datasets and its
    own database file stay readable), no extension install/load, and the configuration locked so a query
    cannot change it back. Returns `con`."""
    dirs = [str(d).rstrip("/") + "/" for d in allowed_dirs]  # a folder, not every name it prefixes
    lit = ", ".join("'" + d.replace("'", "''") + "'" for d in dirs)
    con.execute(f"SET allowed_directories = [{lit}]")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def _run(con, sql: str, where: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    import duckdb

    try:
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description] if cur.description else []
        return cols, cur.fetchall()
    except duckdb.PermissionException as e:
        raise LakeQueryError(f"a lake query reads the lake's own tables only ({where}): {e}") from None
    except duckdb.InvalidInputException as e:
        if "configuration has been locked" in str(e):
            raise LakeQueryError(f"a lake query cannot change DuckDB's settings: {e}") from None
        raise


def default_db_path(data_dir: str | Path | None = None) -> Path:
    """<data root>/clawgym.duckdb (`data_dir` as in :func:`clawgym.lake.io.data_root`)."""
    return data_root(data_dir) / "clawgym.duckdb"


def _empty_select(name: str) -> str:
    cols = ", ".join(f"CAST(NULL AS {duckdb_type(f.type)}) AS \"{f.name}\"" for f in schema(name))
    return f"SELECT {cols} WHERE false"


def view_sql(name: str, root: str | Path | None = None) -> str:
    """The CREATE OR REPLACE VIEW statement for table `name`: a read_parquet over its files, or an empty
    typed SELECT while the table has no files."""
    d = table_dir(name, root)
    assert isinstance(d, Path), "view_sql reads a local lake (object storage goes through _dataset)"
    has_files = d.exists() and any(d.rglob("*.parquet"))
    if not has_files:
        return f'CREATE OR REPLACE VIEW "{name}" AS {_empty_select(name)}'
    glob = str(d / "**" / "*.parquet").replace("'", "''")
    hive = "true" if PARTITIONS.get(name) else "false"
    cols = ", ".join(f'"{f.name}"' for f in schema(name))
    return (f"CREATE OR REPLACE VIEW \"{name}\" AS SELECT {cols} FROM read_parquet('{glob}', "
            f"hive_partitioning={hive}, union_by_name=true)")


def _dataset(name: str, r) -> Any:
    """A pyarrow dataset over the visible part files of table `name` in the object-store lake `r` (None when
    it has none): file columns, plus the hive partition columns typed as in the table schema."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    files = [p for p, _ in remote_parts(name, r)]
    if not files:
        return None
    full = schema(name)
    cols = PARTITIONS.get(name, ())
    part_schema = pa.schema([full.field(c) for c in cols])
    sch = pa.schema(list(file_schema(name)) + list(part_schema))
    kw = dict(partitioning=ds.partitioning(part_schema, flavor="hive"), partition_base_dir=r.key(name)) \
        if cols else {}
    try:
        return ds.dataset(files, schema=sch, format="parquet", filesystem=r.fs, **kw)
    except OSError as e:
        raise r.error(f"opening table {name!r}", e) from None


def connect(root, con=None):
    """A DuckDB connection (in-memory unless `con` is given) with one view per table over the object-store
    lake `root` (``s3://…`` or a RemoteLake): each a typed SELECT over a registered pyarrow dataset, no httpfs.
    The file list is taken now: parts written later need a new connect."""
    import duckdb

    r = as_remote(root)
    con = con if con is not None else duckdb.connect()
    for name in TABLES:
        d = _dataset(name, r)
        if d is None:
            con.execute(f'CREATE OR REPLACE TEMP VIEW "{name}" AS {_empty_select(name)}')
            continue
        src = f"__lake_{name}"
        con.register(src, d)
        cols = ", ".join(f'CAST("{f.name}" AS {duckdb_type(f.type)}) AS "{f.name}"' for f in schema(name))
        con.execute(f'CREATE OR REPLACE TEMP VIEW "{name}" AS SELECT {cols} FROM "{src}"')
    return con


def refresh_catalog(db_path: str | Path | None = None, root: str | Path | None = None) -> Path:
    """(Re)create one view per table in the DuckDB file. Views read the Parquet at query time, so a
    refresh is needed only when a table goes from zero files to some (or the layout changes).
    `root`: the lake folder (default: the `lake/` folder beside `db_path`, as in <data>/clawgym.duckdb).
    An object-store `root` is checked (its bucket answers) and the lake views are dropped from the file:
    such views are per connection (:func:`connect`)."""
    import duckdb

    db_path = Path(db_path) if db_path else default_db_path()
    remote = is_remote(root)
    if remote:
        as_remote(root)  # reachable, bucket exists (LakeStorageError naming the setting otherwise)
    root = root or db_path.parent / "lake"  # the catalog sits in its data root, beside lake/
    modes.make_dirs(db_path.parent)
    con = duckdb.connect(str(db_path))
    try:
        for name in TABLES:
            con.execute(f'DROP VIEW IF EXISTS "{name}"' if remote else view_sql(name, root))
    finally:
        con.close()
        for p in (db_path, db_path.with_name(db_path.name + ".wal")):  # owner-only (clawgym.lake.modes)
            modes.chmod_private(p)
    return db_path


def query(sql: str, db_path: str | Path | None = None, refresh: bool = True,
          root: str | Path | None = None) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run read-only SQL against the catalog; returns (column names, rows). `root`: the lake folder the views
    are refreshed over (default: the `lake/` folder beside `db_path`); an object-store root is queried
    through :func:`connect` (the catalog file is not used). The query sees the lake and nothing else
    (:func:`check_read_only`, :func:`restrict`): anything else raises LakeQueryError."""
    import duckdb

    check_read_only(sql)
    if is_remote(root):
        con = restrict(connect(root))  # registered datasets only: no file at all
        try:
            return _run(con, sql, f"lake {as_remote(root).uri}")
        finally:
            con.close()
    db_path = Path(db_path) if db_path else default_db_path()
    if refresh or not db_path.exists():
        refresh_catalog(db_path, root=root)
    lake = lake_root(root or db_path.parent / "lake")
    con = restrict(duckdb.connect(str(db_path), read_only=True), [lake])
    try:
        return _run(con, sql, f"files below {lake}")
    finally:
        con.close()
