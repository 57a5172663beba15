"""Idempotent, concurrency-safe commits of rows to the lake's Delta tables.

A commit is named by a ``key``: the caller's name for one unit of work (``batch/<sha256>``,
``build/round=3/docs=<hash>``, …). Committing:

1. conforms every table to its declared schema (:func:`storage.schemas.conform`) — any
   problem raises before anything is written; a key already in the commit log
   (:mod:`storage.commit_log`) is skipped (``created`` False);
2. writes each table, in :data:`storage.schemas.WRITE_ORDER`, as one Delta transaction
   (zstd Parquet, one file per round partition, never one per document) that carries the
   commit's id as a Delta application transaction:

   - a table with a key gets only the rows whose key is not stored (insert-if-absent,
     :func:`storage.delta_tables.write_rows`), so neither a re-run nor a concurrent writer of
     the same rows duplicates them: the append commits only on the snapshot its stored keys
     came from, and is redone on a fresh one when a concurrent writer got there first;
   - ``conflict`` columns (``documents.content_hash``) are compared with the stored rows of the
     same keys on that same snapshot: another value is :class:`KeyConflict`, and since
     ``documents`` is written first, nothing of the commit is written;
   - a table without a key is appended to;
   - a table already carrying the commit's transaction id was written by an earlier, killed
     run of this unit (or a concurrent twin) and is skipped;
3. records the key in the commit log, last. That marks the unit done.

A writer killed at any point leaves whole Delta versions only (a data file no version names is
invisible, and removed by vacuum); re-running the unit writes the tables it had not written yet
and records it. Conflicts with concurrent writers are retried a bounded number of times with
backoff, then fail with one :class:`LakeError` line.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Mapping

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from grace_core.errors import InvalidTable, LakeError
from storage.commit_log import CommitLog, CommitRecord, commit_id
from storage.delta_tables import DeltaTables, KeyConflict, TableWrite, write_rows
from storage.schemas import ROUND, WRITE_ORDER, TableSpec, conform, table_spec

__all__ = ["CommitResult", "KeyConflict", "commit_tables"]


@dataclass(frozen=True)
class CommitResult:
    """Outcome of :func:`commit_tables`: ``created`` is False when ``key`` was committed
    before (then ``rows`` are those of that commit and nothing was written). ``rows``: rows
    inserted per table (rows whose key was stored already are not counted)."""

    key: str
    id: str
    created: bool
    rows: Mapping[str, int]
    versions: Mapping[str, int]


def _round_of(tables: Mapping[str, pa.Table]) -> int | None:
    rounds = [pc.max(t.column(ROUND)).as_py() for t in tables.values() if ROUND in t.column_names and t.num_rows]
    rounds = [r for r in rounds if r is not None]
    return max(rounds) if rounds else None


def _write_table(
    tables: DeltaTables, spec: TableSpec, data: pa.Table, *, key: str, app_id: str, round_: int | None,
) -> TableWrite:
    return write_rows(
        tables, spec, data, app_id=app_id, what=f"lake {tables.store.uri}: commit {key!r}",
        metadata={"grace.commit_key": key, "grace.round": "" if round_ is None else str(round_)},
    )


def commit_tables(
    tables: DeltaTables, log: CommitLog, key: str, data: Mapping[str, pl.DataFrame | pa.Table], *,
    committed_at: datetime | None = None,
) -> CommitResult:
    """Commit ``data`` (table name → rows) under ``key`` (see the module docstring).

    Empty tables are not written; a commit of only empty tables still records ``key`` as done.
    Raises :class:`InvalidTable` (nothing written) when rows do not fit a table's schema,
    :class:`KeyConflict` (nothing written) when a ``conflict`` column disagrees with the
    stored row of the same key, :class:`LakeError` when concurrent writers keep conflicting.
    """
    if not key or not key.strip():
        raise InvalidTable("a commit needs a non-empty key naming its unit of work")
    cid = commit_id(key)
    done = log.record(key)
    if done is not None:
        return _result(done, created=False)
    conformed = {name: conform(name, rows) for name, rows in data.items()}
    round_ = _round_of(conformed)
    writes = {}
    for name in sorted(conformed, key=WRITE_ORDER.index):
        if conformed[name].num_rows:
            writes[name] = _write_table(tables, table_spec(name), conformed[name], key=key, app_id=f"grace/{cid}", round_=round_)
    record = CommitRecord(key, cid, round_, committed_at or datetime.now(timezone.utc), writes)
    if log.add(record):
        return _result(record, created=True)
    winner = log.record(key)
    if winner is None:
        raise LakeError(f"lake {tables.store.uri}: commit {key!r} was both recorded and absent from the commit log")
    return _result(winner, created=False)


def _result(record: CommitRecord, *, created: bool) -> CommitResult:
    return CommitResult(
        record.key, record.id, created, {t: w.rows for t, w in record.tables.items()},
        {t: w.version for t, w in record.tables.items()},
    )
