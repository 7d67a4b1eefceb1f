"""The DuckDB catalog: one view per lake table over its Parquet files (works with zero files too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clawgym.lake.io import data_root, table_dir
from clawgym.lake.schemas import PARTITIONS, TABLES, duckdb_type, schema


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


def refresh_catalog(db_path: str | Path | None = None, root: str | Path | None = None) -> Path:
    """(Re)create one view per table in the DuckDB file. Views read the Parquet at query time, so a
    refresh is needed only when a table goes from zero files to some (or the layout changes).
    `root`: the lake folder (default: the `lake/` folder beside `db_path`, as in <data>/clawgym.duckdb)."""
    import duckdb

    db_path = Path(db_path) if db_path else default_db_path()
    root = root or db_path.parent / "lake"  # the catalog sits in its data root, beside lake/
    db_path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(db_path))
    try:
        for name in TABLES:
            con.execute(view_sql(name, root))
    finally:
        con.close()
    return db_path


def query(sql: str, db_path: str | Path | None = None, refresh: bool = True,
          root: str | Path | None = None) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run SQL against the catalog; returns (column names, rows). `root`: the lake folder the views
    are refreshed over (default: the `lake/` folder beside `db_path`)."""
    import duckdb

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
