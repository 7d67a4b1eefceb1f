"""The lake: table schemas, atomic Parquet writes, hive partitions, the DuckDB catalog."""

from clawgym.lake import codec, modes  # noqa: F401
from clawgym.lake.catalog import (  # noqa: F401
    LakeQueryError,
    check_read_only,
    connect,
    default_db_path,
    query,
    refresh_catalog,
    restrict,
    view_sql,
)
from clawgym.lake.io import (  # noqa: F401
    DEFAULT_DATA_DIR,
    REPO_ROOT,
    append_rows,
    atomic_write_parquet,
    column_values,
    data_root,
    lake_root,
    list_partitions,
    partition_dir,
    read_rows,
    read_table,
    table_dir,
    to_table,
    write_table,
)
from clawgym.lake.records import (  # noqa: F401
    BENCH_RESULT_KEY,
    FINISHED,
    SCORED_CLASSES,
    TRAJECTORY_KEY,
    UNSCORED_CLASSES,
    effective_rows,
    finished_keys,
    is_finished,
    outcome,
    outcome_counts,
)
from clawgym.lake.schemas import (  # noqa: F401
    PARTITIONS,
    SCHEMAS,
    TABLES,
    TRAIN_SOURCES,
    RejectedBy,
    Table,
    TaskSource,
    bench_source,
    file_schema,
    schema,
)
from clawgym.lake.store import LakeStorageError, RemoteLake, S3Options, is_remote, open_lake  # noqa: F401
from clawgym.lake.tables import Lake, LakeTables  # noqa: F401
