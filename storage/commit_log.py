"""The commit log: which units of work are done, with the table versions they left behind.

A commit (:mod:`storage.commit`) writes its tables one Delta transaction each, then adds its
record here, last: a unit of work is done exactly when its record exists. The log is itself a
small Delta table (``<lake>/_grace/commits``), one row per commit key, inserted if absent
(:func:`storage.delta_tables.write_rows`), so of two writers of the same key exactly one
records it.

Each record keeps the commit's ``round`` (the largest ``round`` among its rows; None when its
tables have no round) and, per table written, the table's Delta version right after the write
and the rows it inserted. Time travel (:meth:`CommitLog.versions_as_of_round`) takes, per
table, the largest version recorded by the commits of rounds up to N.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Mapping

import pyarrow as pa
import pyarrow.dataset as ds

from grace_core.errors import LakeError, first_line
from storage.delta_tables import DeltaTables, TableWrite, snapshot_dataset, write_rows
from storage.schemas import TableSpec

LOG_REL = "_grace/commits"
SCHEMA = pa.schema([
    pa.field("key", pa.string(), nullable=False),
    pa.field("id", pa.string(), nullable=False),
    pa.field("round", pa.int32(), nullable=True),
    pa.field("committed_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("tables_json", pa.string(), nullable=False),
])
LOG_SPEC = TableSpec("commit_log", SCHEMA, 1, False, key=("key",))


def commit_id(key: str) -> str:
    """The id of the commit with ``key``: the first 32 hex digits of its SHA-256 (also the
    Delta application-transaction id its table writes carry)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class CommitRecord:
    key: str
    id: str
    round: int | None
    committed_at: datetime
    tables: Mapping[str, TableWrite]

    def row(self) -> dict:
        return {
            "key": self.key, "id": self.id, "round": self.round, "committed_at": self.committed_at,
            "tables_json": json.dumps({t: [w.version, w.rows] for t, w in sorted(self.tables.items())}),
        }

    @classmethod
    def from_row(cls, row: Mapping) -> CommitRecord:
        tables = {t: TableWrite(int(v), int(n)) for t, (v, n) in json.loads(row["tables_json"]).items()}
        return cls(row["key"], row["id"], row["round"], row["committed_at"], tables)


class CommitLog:
    """Reads and appends the commit log of one lake. Records are never changed or removed
    (compaction only rewrites them into fewer files), so each log file is read once per
    process and its records kept, and a log version already read is not listed again."""

    def __init__(self, tables: DeltaTables) -> None:
        self.tables = tables
        self._seen: set[str] = set()
        self._records: dict[str, CommitRecord] = {}
        self._version: int | None = None  # the log version _records are complete for
        self._recorded: tuple[int | None, dict[str, int]] = (None, {})  # latest_versions() of log version …
        self._known: dict[str, int] = {}  # the last latest_versions() this object read or learnt

    def records(self) -> dict[str, CommitRecord]:
        """Every committed unit of work by key."""
        dt = self.tables.checked(LOG_SPEC, self.tables.latest(LOG_REL))
        if dt is None:
            return {}
        if dt.version() == self._version:
            return dict(self._records)
        try:
            full = snapshot_dataset(dt, self.tables.store, LOG_REL, LOG_SPEC)
            new = [f for f in full.files if f not in self._seen]
            if new:
                rows = ds.dataset(new, schema=full.schema, format="parquet", filesystem=full.filesystem).to_table()
                self._records.update((r["key"], CommitRecord.from_row(r)) for r in rows.to_pylist())
                self._seen.update(new)
            self._version = dt.version()
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"lake {self.tables.store.uri}: cannot read the commit log: {first_line(exc)}") from None
        return dict(self._records)

    def record(self, key: str) -> CommitRecord | None:
        """The record of the commit named ``key``, or None if it is not done."""
        return self.records().get(key)

    def add(self, record: CommitRecord) -> bool:
        """Record ``record``; False when its key was recorded already (another writer won)."""
        data = pa.Table.from_pylist([record.row()], schema=SCHEMA)
        done = write_rows(self.tables, LOG_SPEC, data, rel=LOG_REL, metadata={"grace.commit_key": record.key},
                          what=f"lake {self.tables.store.uri}: recording commit {record.key!r}")
        return done.rows == 1

    def latest_versions(self) -> dict[str, int]:
        """Per table, the largest version a commit recorded: the table cannot be older than
        that unless part of it was lost (tables only grow; compaction adds versions)."""
        records = self.records()
        if self._recorded[0] != self._version:
            out: dict[str, int] = {}
            for r in records.values():
                for name, w in r.tables.items():
                    out[name] = max(out.get(name, -1), w.version)
            self._recorded = (self._version, out)
        self._known = dict(self._recorded[1])
        return dict(self._recorded[1])

    @property
    def version(self) -> int | None:
        """The version of the commit log :meth:`records` last read (None: not read yet, or none)."""
        return self._version

    def learn(self, recorded: Mapping[str, int]) -> None:
        """Take ``recorded`` (:meth:`latest_versions` as another lake object of this process read
        it) as what :meth:`known_versions` answers."""
        self._known = dict(recorded)

    def known_versions(self) -> dict[str, int]:
        """:meth:`latest_versions` as last read by this process (by this log object, or learnt,
        :meth:`learn`, whichever came last), without reading the log again (empty before the
        first read): a check that may lag behind, never ahead."""
        return dict(self._known)

    def versions_as_of_round(self, round_: int) -> dict[str, int]:
        """Per table, the largest version recorded by a commit of a round up to ``round_``."""
        rounds = [r.round for r in self.records().values() if r.round is not None]
        if rounds and round_ > max(rounds):
            raise LakeError(f"lake {self.tables.store.uri}: round {round_} is after the lake's last round ({max(rounds)}): "
                            "--as-of-round reaches back, not ahead")
        recs = [r for r in self.records().values() if r.round is not None and r.round <= round_]
        if not recs:
            raise LakeError(f"lake {self.tables.store.uri}: no commit of round {round_} or earlier (nothing to travel back to)")
        out: dict[str, int] = {}
        for r in recs:
            for name, w in r.tables.items():
                out[name] = max(out.get(name, -1), w.version)
        return out
