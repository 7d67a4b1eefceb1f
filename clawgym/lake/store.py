"""Where a lake lives when it is not a local folder: an object-store prefix (``s3://bucket/prefix``) through
``pyarrow.fs.S3FileSystem`` (any S3-compatible server: AWS, MinIO, Ceph, moto).

The library never reads the environment: the endpoint, region and credentials arrive as :class:`S3Options`
(``clawgym_assets.defs.lake.resources.LakeResource`` fills them from dg.EnvVar settings). Secrets are kept out of
``repr`` and scrubbed from every error message this module raises.

Object-store semantics the lake relies on (NOTES "Lake on object storage"):

- **a part file is one object written in one request**: it is serialised in memory first and then uploaded;
  a PUT makes the whole object visible at once or not at all (objects above Arrow's ~10 MB part size go as one
  multipart upload, which S3 also makes visible only on completion), so no reader ever sees half a part file;
- **"replace a partition"** (``write_table(mode="overwrite")``) writes the new part under a name that marks it
  as a *base* (``….base.parquet``) and then deletes the older parts. Part names sort in write order, and
  readers of an object-store lake skip every part older than the newest base of its folder, so a reader
  between the PUT and the deletes sees the new rows only, never old and new mixed;
- a reader that lists a part which a concurrent overwrite deletes before the read lists again and retries.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

SCHEMES = ("s3://",)
BASE_SUFFIX = ".base.parquet"  # an overwrite's part: readers of an object-store lake skip older parts


class LakeStorageError(RuntimeError):
    """The object store behind a lake cannot be used (bad URI, unreachable endpoint, missing bucket, refused
    credentials); the message names the setting to fix and never holds a secret."""


# the settings named in error messages: the LakeResource field and the env var its from_env reads it from
SETTINGS = {
    "uri": "LakeResource.lake_uri ($CLAWGYM_LAKE_URI)",
    "endpoint_url": "LakeResource.s3_endpoint_url ($CLAWGYM_S3_ENDPOINT_URL)",
    "region": "LakeResource.s3_region ($CLAWGYM_S3_REGION)",
    "credentials": "LakeResource.s3_access_key_id / s3_secret_access_key ($AWS_ACCESS_KEY_ID / "
                   "$AWS_SECRET_ACCESS_KEY)",
}


def _setting(key: str) -> str:
    return SETTINGS[key]


@dataclass(frozen=True)
class S3Options:
    """How to reach an S3-compatible store. endpoint_url "" = AWS itself (region decides); credentials "" =
    the AWS SDK's own chain (its env vars, ~/.aws, instance metadata)."""

    endpoint_url: str = ""  # e.g. http://127.0.0.1:9000
    region: str = ""
    access_key_id: str = field(default="", repr=False)
    secret_access_key: str = field(default="", repr=False)
    session_token: str = field(default="", repr=False)
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    max_attempts: int = 3

    def secrets(self) -> list[str]:
        return [s for s in (self.access_key_id, self.secret_access_key, self.session_token) if s]

    def scrub(self, text: str) -> str:
        """`text` with every credential replaced by ***."""
        for s in self.secrets():
            text = text.replace(s, "***")
        return text

    def filesystem(self) -> pafs.S3FileSystem:
        kw: dict[str, Any] = {}
        if self.endpoint_url:
            u = urlsplit(self.endpoint_url if "://" in self.endpoint_url else f"https://{self.endpoint_url}")
            if u.scheme not in ("http", "https") or not u.netloc:
                raise LakeStorageError(f"{_setting('endpoint_url')}: {self.endpoint_url!r} is not an http(s) URL")
            kw.update(endpoint_override=u.netloc + u.path.rstrip("/"), scheme=u.scheme)
        if bool(self.access_key_id) != bool(self.secret_access_key):
            raise LakeStorageError(f"{_setting('credentials')}: set both or neither")
        if self.access_key_id:
            kw.update(access_key=self.access_key_id, secret_key=self.secret_access_key,
                      session_token=self.session_token or None)
        return pafs.S3FileSystem(
            region=self.region or "us-east-1", connect_timeout=self.connect_timeout_s,
            request_timeout=self.request_timeout_s,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=self.max_attempts),
            # a small object goes as ONE PutObject at close (no multipart upload for what fits a part)
            allow_delayed_open=True, **kw)


def is_remote(root: Any) -> bool:
    """True for an object-store lake: a :class:`RemoteLake` or an ``s3://`` string."""
    return isinstance(root, RemoteLake) or (isinstance(root, str) and root.startswith(SCHEMES))


@dataclass(frozen=True, eq=False)
class RemoteLake:
    """A lake under ``s3://bucket/prefix``: `fs` paths are ``bucket/prefix/<table>/…``."""

    uri: str
    bucket: str
    prefix: str
    options: S3Options = field(repr=False)
    fs: pafs.FileSystem = field(repr=False, compare=False)

    def __str__(self) -> str:
        return self.uri

    def key(self, *parts: str) -> str:
        """The filesystem path (``bucket/prefix/parts…``) of `parts` below the lake root."""
        return "/".join(p for p in (self.bucket, self.prefix, *parts) if p)

    def __truediv__(self, other):
        raise LakeStorageError(f"lake {self.uri}: this step reads the lake as local files ({other!r}), which an "
                               f"object-store lake cannot do; set {_setting('uri')} to a folder (or \"\") for it")

    def uri_of(self, path: str) -> str:
        return f"s3://{path}"

    def where(self) -> str:
        return f"{self.uri} at {self.options.endpoint_url or 'AWS S3'}"

    def error(self, what: str, e: BaseException) -> LakeStorageError:
        """A LakeStorageError for a failed operation, naming the setting that is most likely wrong."""
        msg = self.options.scrub(str(e))
        low = msg.lower()
        if "nosuchbucket" in low or "bucket does not exist" in low or "no_such_bucket" in low:
            hint = f"bucket {self.bucket!r} does not exist: check {_setting('uri')}"
        elif any(s in low for s in ("access denied", "accessdenied", "invalidaccesskeyid", "signaturedoesnotmatch",
                                    "forbidden", "credentials")):
            hint = f"access refused: check {_setting('credentials')}"
        elif any(s in low for s in ("curl", "connect", "network", "resolve", "timed out", "timeout")):
            hint = f"cannot reach the endpoint: check {_setting('endpoint_url')}"
        else:
            hint = f"check {_setting('uri')} and {_setting('endpoint_url')}"
        return LakeStorageError(f"lake {self.where()}: {what} failed ({hint}): {msg}")

    def check(self) -> None:
        """The bucket exists and answers (one HEAD); raises LakeStorageError naming the setting otherwise."""
        try:
            info = self.fs.get_file_info(self.bucket)
        except OSError as e:
            raise self.error(f"HEAD bucket {self.bucket!r}", e) from None
        if info.type == pafs.FileType.NotFound:
            raise LakeStorageError(f"lake {self.where()}: bucket {self.bucket!r} does not exist: check "
                                   f"{_setting('uri')} (and {_setting('endpoint_url')})")

    def list_files(self, path: str) -> list[pafs.FileInfo]:
        """Every object below `path` (recursive; [] when there is none)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        except OSError as e:
            raise self.error(f"listing {self.uri_of(path)}", e) from None
        return [i for i in infos if i.type == pafs.FileType.File]

    def get(self, path: str) -> bytes:
        """The bytes of the object `path`."""
        try:
            with self.fs.open_input_stream(path) as f:
                return f.read()
        except OSError as e:
            raise self.error(f"reading {self.uri_of(path)}", e) from None

    def put(self, path: str, data) -> None:
        """Upload `data` (bytes or a pyarrow Buffer, already complete in memory) as the object `path`:
        one request, so the object appears whole or not at all."""
        try:
            out = self.fs.open_output_stream(path)
            out.write(data)
            out.close()
        except OSError as e:
            raise self.error(f"writing {self.uri_of(path)}", e) from None

    def delete(self, path: str) -> None:
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise self.error(f"deleting {self.uri_of(path)}", e) from None


_lock = threading.Lock()


def parse_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix) of ``s3://bucket/prefix``; LakeStorageError naming the setting when malformed."""
    if not uri.startswith(SCHEMES):
        raise LakeStorageError(f"{_setting('uri')}: {uri!r} is not an s3://bucket/prefix URI")
    rest = uri.split("://", 1)[1].strip("/")
    bucket, _, prefix = rest.partition("/")
    if not bucket or any(not p or p in (".", "..") for p in prefix.split("/") if prefix):
        raise LakeStorageError(f"{_setting('uri')}: {uri!r} must look like s3://bucket[/prefix]")
    return bucket, prefix.strip("/")


@functools.lru_cache(maxsize=32)
def _open(uri: str, options: S3Options) -> RemoteLake:
    bucket, prefix = parse_uri(uri)
    lake = RemoteLake(uri=f"s3://{bucket}" + (f"/{prefix}" if prefix else ""), bucket=bucket, prefix=prefix,
                      options=options, fs=options.filesystem())
    lake.check()  # a failure is not cached: the next call checks again
    return lake


def open_lake(uri: str, options: S3Options | None = None) -> RemoteLake:
    """The object-store lake at `uri` (``s3://bucket/prefix``), checked once per process: its bucket must
    exist (LakeStorageError naming the setting otherwise). Handles are cached per (uri, options)."""
    with _lock:
        return _open(uri, options or S3Options())


def as_remote(root: Any) -> RemoteLake:
    """`root` itself when a RemoteLake, else the lake at the ``s3://`` URI `root` (AWS SDK defaults)."""
    return root if isinstance(root, RemoteLake) else open_lake(str(root))
