"""The lake resource: where the lake lives (a folder or object storage) and typed readers of its tables. Every
domain uses it; the resources that need data paths nest this one. Its settings come from the environment here
(`LakeResource.from_env`); the object-store credentials are bound as dg.EnvVar, resolved when used and never
stored or logged."""

import os
from collections.abc import Mapping
from pathlib import Path

import dagster as dg

from clawgym import lake
from clawgym.lake.tables import Lake, LakeTables


class LakeResource(LakeTables, dg.ConfigurableResource):
    """Where the lake lives (data_dir "" = <repo>/data; default_resources() sets it from $CLAWGYM_DATA), with
    typed readers of every table (LakeTables: lake.tasks(source), lake.trajectories(policy, shard), …).
    Resources that need data paths nest this one, so data_dir is set once.

    lake_uri "" keeps the lake in <data_dir>/lake; ``s3://bucket/prefix`` puts the tables on an S3-compatible
    object store (pyarrow.fs) while caches, checkpoints and the DuckDB file stay under data_dir. The s3_* fields
    say how to reach it; `from_env` fills them from $CLAWGYM_LAKE_URI, $CLAWGYM_S3_ENDPOINT_URL,
    $CLAWGYM_S3_REGION (else $AWS_REGION / $AWS_DEFAULT_REGION) and, as dg.EnvVar (resolved when used, never
    stored or logged), $AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY / $AWS_SESSION_TOKEN."""

    data_dir: str = ""
    lake_uri: str = ""  # "" = <data_dir>/lake; a folder; or s3://bucket/prefix
    s3_endpoint_url: str = ""  # "" = AWS S3; e.g. http://127.0.0.1:9000 for MinIO / moto
    s3_region: str = ""
    s3_access_key_id: str = ""  # "" = the AWS SDK's own credential chain
    s3_secret_access_key: str = ""
    s3_session_token: str = ""
    # False: the lake, catalog, caches, checkpoints and logs are owner-only (0700 / 0600); True: readable by the
    # owning group too (0750 / 0640), for a team sharing one data root ($CLAWGYM_SHARED_GROUP=1)
    shared_group: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "LakeResource":
        """The lake of the environment: CLAWGYM_DATA, CLAWGYM_LAKE_URI, CLAWGYM_S3_ENDPOINT_URL, CLAWGYM_S3_REGION
        (else AWS_REGION / AWS_DEFAULT_REGION); the AWS_* credentials as dg.EnvVar when set and the lake is on
        object storage (a local lake never depends on them)."""
        env = os.environ if env is None else env
        remote = lake.is_remote(env.get("CLAWGYM_LAKE_URI", ""))
        secret = {f: dg.EnvVar(v) for f, v in (("s3_access_key_id", "AWS_ACCESS_KEY_ID"),
                                                ("s3_secret_access_key", "AWS_SECRET_ACCESS_KEY"),
                                                ("s3_session_token", "AWS_SESSION_TOKEN")) if remote and env.get(v)}
        return cls(data_dir=env.get("CLAWGYM_DATA", ""), lake_uri=env.get("CLAWGYM_LAKE_URI", ""),
                   s3_endpoint_url=env.get("CLAWGYM_S3_ENDPOINT_URL", ""),
                   s3_region=env.get("CLAWGYM_S3_REGION") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
                   or "", shared_group=lake.modes.shared_from_env(env), **secret)

    def setup_for_execution(self, context) -> None:
        # the definitions' entry point in every run process: the data root and what the run writes in it (lake,
        # catalog, caches, checkpoints, logs) are owner-only, or group-readable with shared_group (lake.modes)
        lake.modes.push(self.shared_group)
        lake.modes.protect(self.root(), self.shared_group)

    def teardown_after_execution(self, context) -> None:
        lake.modes.pop()

    def root(self) -> Path:
        return lake.data_root(self.data_dir or None)

    def _value(self, v: str) -> str:
        # a dg.EnvVar left unresolved (the resource used outside a run, e.g. by the CLI): its value now
        return v.get_value() or "" if isinstance(v, dg.EnvVar) else v

    def s3_options(self) -> lake.S3Options:
        """How to reach the object store (credentials resolved here, in memory only)."""
        return lake.S3Options(endpoint_url=self._value(self.s3_endpoint_url), region=self._value(self.s3_region),
                              access_key_id=self._value(self.s3_access_key_id),
                              secret_access_key=self._value(self.s3_secret_access_key),
                              session_token=self._value(self.s3_session_token))

    @property
    def remote(self) -> bool:
        """True when the lake is on object storage (lake_uri s3://…)."""
        return lake.is_remote(self._value(self.lake_uri))

    def tables(self) -> Lake:
        """A Dagster-free handle on the same lake (for library code)."""
        return Lake(self.lake_dir)

    @property
    def lake_dir(self):
        """The lake folder (a Path), or the checked clawgym.lake.RemoteLake when lake_uri is s3://… — both are
        what the clawgym.lake functions take as `root`."""
        uri = self._value(self.lake_uri)
        if lake.is_remote(uri):
            return lake.open_lake(uri, self.s3_options())
        return Path(uri).resolve() if uri else self.root() / "lake"

    @property
    def db_path(self) -> Path:
        return self.root() / "clawgym.duckdb"

    def path(self, *parts: str) -> Path:
        return self.root().joinpath(*parts)

    def write(self, table: lake.Table, rows, partitions=None, mode: str = "overwrite"):
        return lake.write_table(table, rows, partitions, mode=mode, root=self.lake_dir)

    def append(self, table: lake.Table, rows, partitions=None):
        return lake.append_rows(table, rows, partitions, root=self.lake_dir)

    def read(self, table: lake.Table, partitions=None):
        return lake.read_table(table, partitions, root=self.lake_dir)

    def values(self, table: lake.Table, column: str, partitions=None) -> set:
        return lake.column_values(table, column, partitions, root=self.lake_dir)

    def refresh_catalog(self) -> Path:
        return lake.refresh_catalog(self.db_path, root=self.lake_dir)

    def query(self, sql: str):
        """(column names, rows) of `sql` over the lake's views (DuckDB; object storage read through pyarrow)."""
        return lake.query(sql, self.db_path, root=self.lake_dir)
