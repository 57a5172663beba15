"""Keeping a lake small and fast: compaction and vacuum of its Delta tables.

- :func:`compact` rewrites each table's small files into fewer large ones (per round
  partition); readers keep seeing the same rows, and earlier versions stay readable (time
  travel) until vacuumed. A table keyed by document is rewritten in ``doc_id`` order (Delta
  ``optimize.z_order`` on that one column, sorting within :data:`SORT_MEMORY_BYTES` and spilling
  the rest to disk), as every commit writes its rows: a read by key then opens the few row
  groups of the documents it asks for. Plain ``optimize.compact`` concatenates the files, so a
  row group of the result spans documents from all over the key space and a read of 50
  documents' edges decoded nearly every row group (1.6–1.9 s on a lake of 10,000 documents,
  0.25 s once sorted). Only the partitions whose files' ``doc_id`` ranges overlap, or that hold
  small files to merge, are sorted (a partition sorted before is left alone). The other tables get ``optimize.compact``, which leaves single files alone.
- :func:`vacuum` deletes, per table, the files no version within the retention names: files
  that compaction replaced, and the files of writers killed before their Delta commit (and the
  Parquet files of a migrated earlier-format lake), once they are older than the retention.
  The retention protects running writers (their files are fresh until they commit) and time
  travel: ``grace sql --as-of-round`` reaches back only to versions whose files are kept.
  It also removes temporary files of killed catalog builds.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import pyarrow as pa

from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import DeltaError

from grace_core.errors import LakeError, first_line
from storage.catalog import remove_stale_temporaries
from storage.commit_log import LOG_REL
from storage.config import MIN_RETENTION_HOURS
from storage.delta_tables import retry_conflicts, table_rel, writer_properties
from storage.lake import Lake
from storage.schemas import ROUND, TABLES

TARGET_FILE_BYTES = 100 * 2**20
"""Size of the files compaction aims at (Delta's default target; the files written come out
smaller, compressed)."""
SMALL_FILE_SHARE = 8
"""A file under 1/8 of the target is small: a partition with two of them is compacted again.
(A sort's files come out under the target, by the compression, but not that far under.)"""
SORT_MEMORY_BYTES = 256 * 2**20
"""Memory the sort of a table keyed by document may hold before it spills to disk (a 9M-row
edges partition sorted at a peak RSS of 0.56 GB, 1.2 GB unbounded)."""


def _table_rels(lake: Lake) -> list[str]:
    """Every Delta table of the lake that exists: the tables, then the commit log."""
    rels = [table_rel(name) for name in TABLES] + [LOG_REL]
    return [rel for rel in rels if lake.tables.load(rel) is not None]


@dataclass(frozen=True)
class Compaction:
    table: str
    files_removed: int
    files_added: int

    def summary(self) -> str:
        return f"{self.table}: {self.files_removed} file(s) compacted into {self.files_added}"


def _unsorted_partitions(dt: DeltaTable, partitioned: bool, target_bytes: int) -> list[str]:
    """The round partitions of a table keyed by document to sort (``[""]``: the whole of an
    unpartitioned table): those with two files whose ``doc_id`` ranges overlap, by the statistics
    of the table's log, or with two small files to merge (:data:`SMALL_FILE_SHARE`). Each commit
    writes its rows in document order, and a sort writes its files of about the target size one
    after the other in that order, so any other partition is sorted and compact already and is left
    alone: sorting every partition would rewrite the whole lake each time, and a second run
    would commit again. The log's string statistics are bounds (a long minimum is cut short, a long
    maximum is cut and raised), so the test can only take a sorted partition for an unsorted
    one, never the other way round; a file without statistics counts as overlapping."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    parts = actions.column("partition.round").to_pylist() if partitioned else [""] * actions.num_rows
    names = actions.column_names
    lows = actions.column("min.doc_id").to_pylist() if "min.doc_id" in names else [None] * actions.num_rows
    highs = actions.column("max.doc_id").to_pylist() if "max.doc_id" in names else [None] * actions.num_rows
    sizes = actions.column("size_bytes").to_pylist()
    ranges: dict[str, list[tuple[str | None, str | None]]] = defaultdict(list)
    small: Counter[str] = Counter()
    for part, low, high, size in zip(parts, lows, highs, sizes, strict=True):
        ranges[str(part)].append((low, high))
        small[str(part)] += size * SMALL_FILE_SHARE < target_bytes
    return sorted((p for p, rs in ranges.items() if small[p] > 1 or _overlap(rs)), key=lambda p: int(p or 0))


def _overlap(ranges: list[tuple[str | None, str | None]]) -> bool:
    """Whether two of the ``(min, max)`` ranges overlap (touching ends do not; unknown ends do)."""
    if len(ranges) < 2:
        return False
    if any(low is None or high is None for low, high in ranges):
        return True
    ordered = sorted(ranges)
    return any(low < high_before for (_, high_before), (low, _) in zip(ordered, ordered[1:]))


def compact(lake: Lake, *, target_bytes: int = TARGET_FILE_BYTES) -> list[Compaction]:
    """Compact every table into files of about ``target_bytes`` (see the module docstring);
    retried when a writer commits meanwhile. A second run with no commit in between changes
    nothing."""
    out = []
    by_document = {table_rel(spec.name): spec.partitioned for spec in TABLES.values() if spec.key[:1] == ("doc_id",)}
    for rel in _table_rels(lake):
        def attempt(_: int, rel: str = rel) -> dict:
            dt = lake.tables.load(rel)
            assert dt is not None  # listed just before; tables are never dropped
            done = CommitProperties(custom_metadata={"grace.operation": "compact"})
            if rel not in by_document:
                return dt.optimize.compact(target_size=target_bytes, writer_properties=writer_properties(), commit_properties=done)
            partitioned = by_document[rel]
            unsorted = _unsorted_partitions(dt, partitioned, target_bytes)
            if not unsorted:
                return {"numFilesRemoved": 0, "numFilesAdded": 0}
            return dt.optimize.z_order(["doc_id"], partition_filters=[(ROUND, "in", unsorted)] if partitioned else None, target_size=target_bytes,
                                       writer_properties=writer_properties(), max_spill_size=SORT_MEMORY_BYTES,
                                       commit_properties=done)

        metrics = retry_conflicts(attempt, f"lake {lake.uri}: compacting {rel}")
        out.append(Compaction(rel, int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"])))
    return out


@dataclass(frozen=True)
class VacuumReport:
    """Files deleted (or, in a dry run, that would be) per table, relative to the table."""

    deleted: dict[str, list[str]]
    catalog_temporaries: int
    dry_run: bool

    def summary(self) -> str:
        n = sum(len(v) for v in self.deleted.values())
        verb = "would delete" if self.dry_run else "deleted"
        temporaries = ("leftover catalog build files are removed by a run without --dry-run" if self.dry_run
                       else f"removed {self.catalog_temporaries} leftover catalog build file(s)")
        return f"{verb} {n} file(s) no table version within the retention names, in {len(self.deleted)} table(s); {temporaries}"


def vacuum(lake: Lake, *, retention_hours: int, dry_run: bool = False) -> VacuumReport:
    """Delete the files no version of the last ``retention_hours`` names (see the module
    docstring); ``retention_hours`` is at least :data:`MIN_RETENTION_HOURS`."""
    if retention_hours < MIN_RETENTION_HOURS:
        raise LakeError(f"vacuum keeps at least {MIN_RETENTION_HOURS} hour(s) of files so running writers are safe")
    deleted = {}
    for rel in _table_rels(lake):
        dt: DeltaTable | None = lake.tables.load(rel)
        if dt is None:
            continue
        try:
            files = dt.vacuum(retention_hours=retention_hours, dry_run=dry_run, enforce_retention_duration=False, full=True)
        except (DeltaError, OSError) as exc:
            raise LakeError(f"lake {lake.uri}: cannot vacuum {rel}: {first_line(exc)}") from None
        deleted[rel] = sorted(files)
    temporaries = 0
    if not dry_run and lake.store.catalog_path.parent.is_dir():
        temporaries = len(remove_stale_temporaries(lake.store.catalog_path.parent))
    return VacuumReport(deleted, temporaries, dry_run)


def maintain(lake: Lake, *, retention_hours: int) -> tuple[list[Compaction], VacuumReport]:
    """:func:`compact`, then :func:`vacuum` the files it replaced once older than the retention
    (``grace compact`` and the weekly ``lake-maintenance`` deployment). Safe beside running
    writers, and to run again: a second run with no commit in between changes nothing. A lake
    with no table is an error (a mistyped lake, not one to keep quietly). The catalog is rebuilt
    for the compacted files at the end, not by the next round's first query or a user's (a full
    rebuild at 100,000 documents: about 1.2 s)."""
    if not _table_rels(lake):
        raise LakeError(f"no lake at {lake.uri} (no tables; ingest a batch first)")
    done = compact(lake), vacuum(lake, retention_hours=retention_hours)
    lake.catalog()
    return done
