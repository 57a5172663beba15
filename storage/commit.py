"""Atomic, idempotent commits of rows to lake tables.

A commit is named by a ``key``: the caller's name for one unit of work (``batch/<sha256>``,
``build/round=3/chunk=<hash>``, …). Committing:

1. conforms every table to its declared schema (:func:`storage.schemas.conform`) — any
   problem raises before anything is written;
2. writes one zstd Parquet file per table and round partition (never one per document),
   named by the SHA-256 of its bytes: ``tables/<table>/[round=<r>/]part-<hash>.parquet``,
   each written atomically;
3. creates the commit record (:mod:`storage.manifest`) with create-only semantics. That
   single step publishes all the files at once.

A writer killed before step 3 leaves readers on the previous state: its files, whole or not,
are named by no record. A key already committed is skipped (the first commit wins), and
identical rows give identical file names, so re-running a unit of work never duplicates rows.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Mapping

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from grace_core.errors import InvalidTable, LakeError
from storage.filesystem import Store
from storage.manifest import CommitRecord, FileEntry, Manifest, commit_id, record_path
from storage.schemas import ROUND, conform, table_spec

ROW_GROUP_ROWS = 128 * 1024  # row groups DuckDB can scan in parallel
COMPRESSION = "zstd"


@dataclass(frozen=True)
class CommitResult:
    """Outcome of :func:`commit_tables`: ``created`` is False when ``key`` was already committed
    (then ``files`` are those of the earlier commit and nothing was written)."""

    key: str
    id: str
    created: bool
    files: tuple[FileEntry, ...]

    @property
    def rows(self) -> dict[str, int]:
        """Rows per table in this commit."""
        out: dict[str, int] = {}
        for f in self.files:
            out[f.table] = out.get(f.table, 0) + f.rows
        return out


def parquet_bytes(table: pa.Table, name: str, version: int) -> bytes:
    """``table`` as zstd Parquet bytes carrying the table name and schema version."""
    meta = dict(table.schema.metadata or {})
    meta.update({b"grace.table": name.encode(), b"grace.schema_version": str(version).encode()})
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(meta), sink, compression=COMPRESSION, row_group_size=ROW_GROUP_ROWS)
    return sink.getvalue().to_pybytes()


def _partitions(name: str, table: pa.Table) -> list[tuple[int | None, pa.Table]]:
    if not table_spec(name).partitioned:
        return [(None, table)]
    rounds = pc.unique(table.column(ROUND)).to_pylist()
    if len(rounds) == 1:
        return [(rounds[0], table)]
    return [(r, table.filter(pc.equal(table.column(ROUND), r))) for r in sorted(rounds)]


def _write_table(store: Store, name: str, table: pa.Table) -> list[tuple[FileEntry, bytes]]:
    spec = table_spec(name)
    entries = []
    for rnd, part in _partitions(name, table):
        data = parquet_bytes(part, name, spec.version)
        folder = f"tables/{name}" if rnd is None else f"tables/{name}/round={rnd}"
        path = f"{folder}/part-{hashlib.sha256(data).hexdigest()[:32]}.parquet"
        store.write_bytes(path, data)  # even when present: a fresh write keeps it out of a vacuum's reach
        entries.append((FileEntry(name, path, part.num_rows, len(data), rnd, spec.version), data))
    return entries


def commit_tables(store: Store, manifest: Manifest, key: str, tables: Mapping[str, pl.DataFrame | pa.Table]) -> CommitResult:
    """Commit ``tables`` (table name → rows) under ``key``, all or nothing.

    Empty tables write no file; a commit of only empty tables still records ``key`` as done.
    Raises :class:`InvalidTable` (nothing written) when rows do not fit a table's schema.
    """
    if not key or not key.strip():
        raise InvalidTable("a commit needs a non-empty key naming its unit of work")
    cid = commit_id(key)
    done = manifest.record(key)
    if done is not None:
        return CommitResult(key, cid, False, done.files)
    conformed = {name: conform(name, data) for name, data in tables.items()}
    written: list[tuple[FileEntry, bytes]] = []
    for name, table in conformed.items():
        if table.num_rows:
            written += _write_table(store, name, table)
    rec = CommitRecord(cid, key, datetime.now(timezone.utc).isoformat(), tuple(f for f, _ in written))
    if not store.create_bytes(record_path(cid), rec.to_json()):
        winner = manifest.record(key)
        if winner is None:
            raise LakeError(f"lake {store.uri}: commit {key!r} was both present and absent (record {record_path(cid)})")
        return CommitResult(key, cid, False, winner.files)
    for entry, data in written:
        # a vacuum that listed an identical orphan before this writer rewrote it may have deleted it since
        if not store.exists(entry.path):
            store.write_bytes(entry.path, data)
    manifest.add(rec)
    return CommitResult(key, cid, True, rec.files)
