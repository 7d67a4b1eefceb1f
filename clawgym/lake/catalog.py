"""The DuckDB catalog: one view per lake table over its Parquet files (works with zero files too).

A lake on object storage (``s3://…``, a :class:`clawgym.lake.store.RemoteLake`) is read WITHOUT DuckDB's httpfs
extension: :func:`connect` registers one ``pyarrow.dataset`` per table (its visible part files, read through the
lake's ``pyarrow.fs.S3FileSystem``) in a DuckDB connection and puts the typed view over it. Such views live in
that connection only, so :func:`query` opens one per call, and :func:`refresh_catalog` over an object-store lake
removes the lake views from the catalog file instead of pointing them at stale local files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clawgym.lake.io import remote_parts, data_root, table_dir
from clawgym.lake.schemas import PARTITIONS, TABLES, duckdb_type, file_schema, schema
from clawgym.lake.store import as_remote, is_remote


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
    db_path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(db_path))
    try:
        for name in TABLES:
            con.execute(f'DROP VIEW IF EXISTS "{name}"' if remote else view_sql(name, root))
    finally:
        con.close()
    return db_path


def query(sql: str, db_path: str | Path | None = None, refresh: bool = True,
          root: str | Path | None = None) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run SQL against the catalog; returns (column names, rows). `root`: the lake folder the views
    are refreshed over (default: the `lake/` folder beside `db_path`); an object-store root is queried
    through :func:`connect` (the catalog file is not used)."""
    import duckdb

    if is_remote(root):
        con = connect(root)
        try:
            cur = con.execute(sql)
            cols = [d[0] for d in cur.description] if cur.description else []
            return cols, cur.fetchall()
        finally:
            con.close()
    db_path = Path(db_path) if db_path else default_db_path()
    if refresh or not db_path.exists():
        refresh_catalog(db_path, root=root)
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description] if cur.description else []
        return cols, cur.fetchall()
    finally:
        con.close()
