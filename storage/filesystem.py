"""Where lake files live: a local folder or an S3 prefix, behind one small interface.

The lake's tables are Delta tables, written and read through delta-rs
(:mod:`storage.delta_tables`); a store gives delta-rs its ``storage_options`` and holds the
lake's other files (review packets and verdict files, the inbox, the earlier format's commit
records). Paths handed to a store are relative to the lake root, with ``/`` separators.
:meth:`Store.write_bytes` is atomic: readers see the old object or the whole new one (local: a
hidden temporary file in the same folder, then ``os.replace``; S3: one PUT, which S3 makes
visible only once complete).

S3 credentials come from the standard AWS chain (environment, profile, SSO, instance role)
through boto3 (small objects, listings; the resolved credentials are handed to delta-rs) and
pyarrow's S3 filesystem (reading Parquet); they are never printed or logged, and error
messages name only the bucket and key. Delta commits on S3 use conditional puts
(``aws_conditional_put=etag``), so concurrent writers need no lock service.

The DuckDB catalog of a local lake is ``<lake>/catalog.duckdb``. An S3 lake's catalog is kept
in a local cache folder (``catalog_cache`` setting, default ``~/.cache/grace/catalogs``), one
subfolder per lake, and rebuilt whenever it is behind the lake; its views name ``s3://`` URLs,
which GRACE reads through pyarrow's S3 filesystem.
"""

from __future__ import annotations

import atexit
import functools
import gc
import hashlib
import os
import uuid
import weakref
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow.fs as pafs

from grace_core.errors import LakeError
from storage.config import LakeConfig

CATALOG_FILE = "catalog.duckdb"
_S3_STORES: weakref.WeakSet[S3Store] = weakref.WeakSet()


class Store(ABC):
    """A lake root. ``uri`` is how the root is shown to people and recorded in the catalog."""

    uri: str
    arrow_fs: pafs.FileSystem

    @abstractmethod
    def arrow_path(self, rel: str) -> str:
        """The path of ``rel`` for :attr:`arrow_fs`."""

    @abstractmethod
    def file_uri(self, rel: str) -> str:
        """The location of ``rel`` as DuckDB names it: an absolute path or an ``s3://`` URL."""

    @abstractmethod
    def arrow_path_of_uri(self, uri: str) -> str:
        """The path for :attr:`arrow_fs` of a location :meth:`file_uri` gives."""

    @abstractmethod
    def read_bytes(self, rel: str) -> bytes | None:
        """The content of ``rel``, or ``None`` when it does not exist."""

    @abstractmethod
    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write ``rel`` atomically, replacing any previous content."""

    @abstractmethod
    def list_names(self, rel_dir: str) -> list[str]:
        """Names of the finished files directly inside ``rel_dir`` (empty if it does not exist)."""

    @abstractmethod
    def any_file(self, rel_dir: str) -> bool:
        """Whether any finished file lies directly inside ``rel_dir`` (one cheap listing)."""

    @abstractmethod
    def exists(self, rel: str) -> bool:
        """Whether the finished file ``rel`` exists."""

    @abstractmethod
    def delete(self, rel: str) -> None:
        """Remove ``rel`` (nothing happens when it does not exist)."""

    @property
    @abstractmethod
    def catalog_path(self) -> Path:
        """Local path of this lake's DuckDB catalog file."""

    def duckdb_filesystem(self) -> Any | None:
        """An fsspec filesystem DuckDB must register to read this lake's files, if any."""
        return None

    def delta_storage_options(self) -> dict[str, str]:
        """The ``storage_options`` delta-rs needs to open this lake's tables."""
        return {}


class LocalStore(Store):
    """A lake in a local folder (created on first write)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root).expanduser().resolve()
        if self.root.exists() and not self.root.is_dir():
            raise LakeError(f"lake {self.root}: exists and is not a folder")
        self.uri = str(self.root)

    @functools.cached_property
    def arrow_fs(self) -> pafs.FileSystem:  # type: ignore[override]
        import pyarrow.fs as pafs  # here: a catalog check (grace sql) needs no Arrow

        return pafs.LocalFileSystem()

    def _path(self, rel: str) -> Path:
        return self.root.joinpath(*rel.split("/"))

    def arrow_path(self, rel: str) -> str:
        return str(self._path(rel))

    def file_uri(self, rel: str) -> str:
        return str(self._path(rel))

    def arrow_path_of_uri(self, uri: str) -> str:
        return uri

    def read_bytes(self, rel: str) -> bytes | None:
        try:
            return self._path(rel).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LakeError(f"lake {self.uri}: cannot read {rel}: {exc.strerror}") from None

    def _temp(self, final: Path, data: bytes) -> Path:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def write_bytes(self, rel: str, data: bytes) -> None:
        final = self._path(rel)
        try:
            tmp = self._temp(final, data)
            os.replace(tmp, final)
        except OSError as exc:
            raise LakeError(f"lake {self.uri}: cannot write {rel}: {exc.strerror}") from None

    def list_names(self, rel_dir: str) -> list[str]:
        try:
            with os.scandir(self._path(rel_dir)) as it:
                return [e.name for e in it if e.is_file() and not e.name.startswith(".")]
        except FileNotFoundError:
            return []

    def any_file(self, rel_dir: str) -> bool:
        try:
            with os.scandir(self._path(rel_dir)) as it:
                return any(e.is_file() and not e.name.startswith(".") for e in it)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def exists(self, rel: str) -> bool:
        return self._path(rel).is_file()

    def delete(self, rel: str) -> None:
        try:
            self._path(rel).unlink(missing_ok=True)
        except OSError as exc:
            raise LakeError(f"lake {self.uri}: cannot delete {rel}: {exc.strerror}") from None

    @property
    def catalog_path(self) -> Path:
        return self.root / CATALOG_FILE


class S3Store(Store):
    """A lake under ``s3://bucket/prefix`` of AWS S3 or any S3-compatible endpoint.

    The bucket must exist; GRACE never creates or deletes buckets."""

    def __init__(self, uri: str, *, endpoint_url: str | None, region: str | None, cache_dir: Path) -> None:
        import boto3
        from botocore.config import Config

        rest = uri[len("s3://"):]
        self.bucket, _, prefix = rest.partition("/")
        if not self.bucket:
            raise LakeError(f"lake {uri}: no bucket name (expected s3://bucket/prefix)")
        self.prefix = prefix.strip("/")
        self.uri = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        session = boto3.session.Session()
        self._session = session
        self.region = region or session.region_name or self._bucket_region(endpoint_url)
        self.endpoint_url = endpoint_url
        self._s3 = session.client(
            "s3", endpoint_url=endpoint_url, region_name=self.region,
            config=Config(retries={"max_attempts": 5, "mode": "standard"}),
        )
        import pyarrow.fs as pafs  # before the handler below is registered (see _release_s3)

        self.arrow_fs = pafs.S3FileSystem(endpoint_override=endpoint_url, region=self.region)
        if not _S3_STORES:  # again after every store was collected: the handler below runs once per registration
            atexit.register(_release_s3)  # registered after pyarrow.fs's own handler, so it runs before it
        _S3_STORES.add(self)
        lake_hash = hashlib.sha256(f"{endpoint_url or 'aws'}|{self.uri}".encode()).hexdigest()[:16]
        self._catalog = cache_dir / lake_hash / CATALOG_FILE

    def _bucket_region(self, endpoint_url: str | None) -> str:
        """The bucket's own region when none is configured (AWS); us-east-1 for other endpoints."""
        if endpoint_url:
            return "us-east-1"
        import pyarrow.fs as pafs

        try:
            return pafs.resolve_s3_region(self.bucket)
        except OSError as exc:
            raise LakeError(f"lake {self.uri}: cannot find the region of bucket {self.bucket!r} (set GRACE_S3_REGION): {exc}") from None

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def arrow_path(self, rel: str) -> str:
        return f"{self.bucket}/{self._key(rel)}"

    def file_uri(self, rel: str) -> str:
        return f"s3://{self.bucket}/{self._key(rel)}"

    def arrow_path_of_uri(self, uri: str) -> str:
        return uri.removeprefix("s3://")

    def _fail(self, action: str, rel: str, exc: Exception) -> LakeError:
        from botocore.exceptions import ClientError, NoCredentialsError

        if isinstance(exc, NoCredentialsError):
            return LakeError(f"lake {self.uri}: no AWS credentials found (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE)")
        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "NoSuchBucket":
                return LakeError(f"lake {self.uri}: bucket {self.bucket!r} does not exist")
            return LakeError(f"lake {self.uri}: cannot {action} {rel}: {code or exc}")
        return LakeError(f"lake {self.uri}: cannot {action} {rel}: {type(exc).__name__}: {exc}")

    def read_bytes(self, rel: str) -> bytes | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return self._s3.get_object(Bucket=self.bucket, Key=self._key(rel))["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise self._fail("read", rel, exc) from None
        except BotoCoreError as exc:
            raise self._fail("read", rel, exc) from None

    def write_bytes(self, rel: str, data: bytes) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._s3.put_object(Bucket=self.bucket, Key=self._key(rel), Body=data)
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("write", rel, exc) from None

    def _listing(self, rel_dir: str) -> tuple[list[dict], list[str]]:
        """The objects directly inside ``rel_dir`` (their listing entries, ``Key`` relative to it)
        and the names of the folders there."""
        from botocore.exceptions import BotoCoreError, ClientError

        prefix = self._key(rel_dir).rstrip("/") + "/"
        objects: list[dict] = []
        folders: list[str] = []
        try:
            for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
                objects += [o | {"Key": o["Key"][len(prefix):]} for o in page.get("Contents", [])]
                folders += [p["Prefix"][len(prefix):].rstrip("/") for p in page.get("CommonPrefixes", [])]
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("list", rel_dir, exc) from None
        return objects, folders

    def list_names(self, rel_dir: str) -> list[str]:
        return [o["Key"] for o in self._listing(rel_dir)[0]]

    def list_stats(self, rel_dir: str) -> dict[str, tuple[int, str]]:
        """Name → (size, ETag) of every object directly inside ``rel_dir``: an object rewritten
        in place gets another ETag (S3's digest of its content)."""
        return {o["Key"]: (o["Size"], o["ETag"]) for o in self._listing(rel_dir)[0]}

    def subfolders(self, rel_dir: str) -> list[str]:
        """Names of the folders directly inside ``rel_dir`` (the prefixes one ``/`` deeper)."""
        return self._listing(rel_dir)[1]

    def any_file(self, rel_dir: str) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        prefix = self._key(rel_dir).rstrip("/") + "/"
        try:
            page = self._s3.list_objects_v2(Bucket=self.bucket, Prefix=prefix, Delimiter="/", MaxKeys=1)
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("list", rel_dir, exc) from None
        return bool(page.get("Contents"))

    def exists(self, rel: str) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._s3.head_object(Bucket=self.bucket, Key=self._key(rel))
            return True
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return False
            raise self._fail("read", rel, exc) from None
        except BotoCoreError as exc:
            raise self._fail("read", rel, exc) from None

    def delete(self, rel: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._s3.delete_object(Bucket=self.bucket, Key=self._key(rel))
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("delete", rel, exc) from None

    def check_bucket(self) -> None:
        """Fail early, with one clear line, when the bucket is missing or unreachable."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._s3.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                raise LakeError(f"lake {self.uri}: bucket {self.bucket!r} does not exist") from None
            raise self._fail("open", "the bucket", exc) from None
        except BotoCoreError as exc:
            raise self._fail("open", "the bucket", exc) from None

    @property
    def catalog_path(self) -> Path:
        return self._catalog

    def duckdb_filesystem(self) -> Any:
        from storage.duckdb_s3 import DataFileFS

        return DataFileFS(self)

    def delta_storage_options(self) -> dict[str, str]:
        """Region, endpoint, conditional puts (``etag``: safe concurrent commits without a
        lock service) and the credentials boto3 resolves from the standard AWS chain
        (environment, profile, SSO, instance role), so delta-rs uses the same identity."""
        options = {"AWS_REGION": self.region, "aws_conditional_put": "etag"}
        if self.endpoint_url:
            options["AWS_ENDPOINT_URL"] = self.endpoint_url
            if self.endpoint_url.startswith("http://"):
                options["AWS_ALLOW_HTTP"] = "true"
        creds = self._session.get_credentials()
        if creds is not None:
            frozen = creds.get_frozen_credentials()
            options["AWS_ACCESS_KEY_ID"] = frozen.access_key
            options["AWS_SECRET_ACCESS_KEY"] = frozen.secret_key
            if frozen.token:
                options["AWS_SESSION_TOKEN"] = frozen.token
        return options


def waiting_names(store: Store, rel_dir: str) -> list[str]:
    """Names of the files waiting directly inside ``rel_dir`` of ``store`` (an inbox), sorted:
    its finished files and, in a local store, every other entry not hidden, a FIFO, device or
    folder too, so that reading it is refused at once and it goes to quarantine with its reason
    instead of lying there unseen."""
    names = set(store.list_names(rel_dir))
    if isinstance(store, LocalStore):
        try:
            with os.scandir(store.arrow_path(rel_dir)) as entries:
                names.update(e.name for e in entries if not e.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            pass
    return sorted(names)


def _release_s3() -> None:
    """At exit, before pyarrow's handler shuts its S3 subsystem down (atexit runs the handlers
    last registered first): drop the stores' S3 filesystems and collect the garbage that still
    holds Arrow objects, such as the traceback of a refused command (its frames hold datasets,
    streams and scans). Left to the interpreter's last collection, after the shutdown, an S3
    client or a scan's thread can abort the process ("terminate called without an active
    exception", exit -6) after the command had printed its result; apache/arrow#34314."""
    for store in list(_S3_STORES):
        store.__dict__.pop("arrow_fs", None)  # an earlier registration of this handler may have dropped it already
    gc.collect()


def default_catalog_cache() -> Path:
    """``$XDG_CACHE_HOME/grace/catalogs`` (``~/.cache/grace/catalogs`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "grace" / "catalogs"


def open_store(config: LakeConfig) -> Store:
    """The store for ``config.lake``: ``s3://bucket/prefix`` or a local folder."""
    root = config.lake.strip()
    if root.startswith("s3://"):
        cache = Path(config.catalog_cache).expanduser() if config.catalog_cache else default_catalog_cache()
        store = S3Store(root, endpoint_url=config.s3_endpoint_url, region=config.s3_region, cache_dir=cache)
        store.check_bucket()
        return store
    if "://" in root:
        raise LakeError(f"lake {root}: unsupported location (use a local folder or s3://bucket/prefix)")
    return LocalStore(root)
