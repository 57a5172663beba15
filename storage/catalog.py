"""The DuckDB catalog: one database file of views over the lake's committed Parquet files.

The catalog holds, for every table of :data:`storage.schemas.TABLES`, a view
``SELECT * FROM read_parquet([...committed files...])`` (a typed empty ``SELECT`` while a table
has no file), the derived views of :mod:`storage.views`, a ``lake_files`` table (every
committed file with its table, round, rows and commit key) and ``_grace_catalog`` (which lake
state it shows). Views name files by absolute path (local lakes) or ``s3://`` URL, so the file
opens in any DuckDB client of the same storage version; only committed files are named, so a
half-finished commit is never visible.

It is rebuilt after every commit and whenever a reader finds it behind the lake
(:func:`ensure_catalog`): built in a temporary file beside the old one, then renamed over it,
so a reader always opens a complete catalog. Queries from users run through
:mod:`storage.readonly_sql`, never on a connection of this module.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pyarrow as pa

from grace_core.errors import LakeError
from storage.filesystem import Store
from storage.manifest import LakeState, checked_files
from storage.schemas import TABLES, TableSpec
from storage.views import DERIVED_VIEWS

STATE_TABLE = "_grace_catalog"
FILES_TABLE = "lake_files"


def _sql_type(t: pa.DataType) -> str:
    if pa.types.is_string(t):
        return "VARCHAR"
    if pa.types.is_int32(t):
        return "INTEGER"
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    if pa.types.is_list(t):
        return f"{_sql_type(t.value_type)}[]"
    raise LakeError(f"no DuckDB type for {t}")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def table_view_sql(store: Store, spec: TableSpec, state: LakeState) -> str:
    """The ``SELECT`` behind the view of one table."""
    files = checked_files(state, spec, store.uri)
    if not files:
        cols = ", ".join(f'CAST(NULL AS {_sql_type(f.type)}) AS "{f.name}"' for f in spec.schema)
        return f"SELECT {cols} LIMIT 0"
    paths = ", ".join(_quote(store.file_uri(f.path)) for f in files)
    return f"SELECT * FROM read_parquet([{paths}], hive_partitioning = false)"


def _connect(store: Store, path: Path, *, read_only: bool) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(str(path), read_only=read_only)
    fs = store.duckdb_filesystem()
    if fs is not None:
        con.register_filesystem(fs)
    return con


def build_catalog(store: Store, state: LakeState) -> Path:
    """Build the catalog for ``state`` and move it into place; returns its path."""
    target = store.catalog_path
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        con = _connect(store, tmp, read_only=False)
        try:
            for spec in TABLES.values():
                con.execute(f'CREATE VIEW "{spec.name}" AS {table_view_sql(store, spec, state)}')
            for name, sql in DERIVED_VIEWS.items():
                con.execute(f'CREATE VIEW "{name}" AS {sql}')
            files = pa.table({
                "table_name": [f.table for r in state.records.values() for f in r.files],
                "round": pa.array([f.round for r in state.records.values() for f in r.files], pa.int32()),
                "path": [store.file_uri(f.path) for r in state.records.values() for f in r.files],
                "rows": pa.array([f.rows for r in state.records.values() for f in r.files], pa.int64()),
                "bytes": pa.array([f.bytes for r in state.records.values() for f in r.files], pa.int64()),
                "commit_key": [r.key for r in state.records.values() for _ in r.files],
                "committed_at": [r.committed_at for r in state.records.values() for _ in r.files],
            })
            con.register("_files", files)
            con.execute(f"CREATE TABLE {FILES_TABLE} AS SELECT * FROM _files ORDER BY table_name, round, path")
            con.unregister("_files")
            versions = json.dumps({s.name: s.version for s in TABLES.values()}, sort_keys=True)
            con.execute(
                f"CREATE TABLE {STATE_TABLE} AS SELECT ? AS lake, ? AS state_id, ? AS schema_versions, ? AS built_at",
                [store.uri, state.state_id, versions, datetime.now(timezone.utc).isoformat()],
            )
        finally:
            con.close()
        os.replace(tmp, target)
    except duckdb.Error as exc:
        raise LakeError(f"lake {store.uri}: cannot build the catalog: {str(exc).splitlines()[0]}") from None
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.wal").unlink(missing_ok=True)
    return target


def catalog_is_current(store: Store, state: LakeState) -> bool:
    """Whether the catalog file exists and shows exactly ``state`` of this lake."""
    path = store.catalog_path
    if not path.is_file():
        return False
    versions = json.dumps({s.name: s.version for s in TABLES.values()}, sort_keys=True)
    try:
        con = duckdb.connect(str(path), read_only=True)
        try:
            row = con.execute(f"SELECT lake, state_id, schema_versions FROM {STATE_TABLE}").fetchone()
        finally:
            con.close()
    except duckdb.Error:
        return False
    return row == (store.uri, state.state_id, versions)


def ensure_catalog(store: Store, state: LakeState) -> Path:
    """The catalog path, rebuilt first if it is missing or behind ``state``."""
    if not catalog_is_current(store, state):
        build_catalog(store, state)
    return store.catalog_path
