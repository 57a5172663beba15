"""Removing files no commit names: the Parquet files and temporary files of writers killed
before their commit record (see :mod:`storage.commit`). They are invisible to readers, so they
only cost space; vacuum deletes them once they are older than a grace period.

The grace period protects writers at work: a writer writes its files, then creates its
record, and rewrites a file even when identical bytes already exist, so a file that a running
writer is about to commit is always fresh. Files are listed *before* the committed state is
read, so a commit that completes in between is seen and its files are kept; each file's age
is checked again just before it is deleted. The one remaining race (a writer rewrites an old
orphan after that check and commits it before the delete lands) is healed by the writer: after
creating its record it checks that every file it names exists and rewrites any that does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from storage.filesystem import StoredFile
from storage.lake import Lake

TABLES_DIR = "tables"


@dataclass(frozen=True)
class VacuumReport:
    """``orphans``: unnamed files past the grace period (deleted unless a dry run);
    ``recent``: unnamed files still inside it (kept); ``committed``: files the lake names."""

    orphans: tuple[StoredFile, ...]
    recent: int
    committed: int
    dry_run: bool

    def summary(self) -> str:
        size = sum(f.size for f in self.orphans)
        amount = f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"
        verb = "would delete" if self.dry_run else "deleted"
        return (f"{verb} {len(self.orphans)} orphaned file(s), {amount}; kept {self.committed} committed file(s) "
                f"and {self.recent} recent unnamed file(s) that a running writer may still commit")


def vacuum(lake: Lake, *, grace: timedelta, now: datetime, dry_run: bool = False) -> VacuumReport:
    """Delete the files under ``tables/`` that no commit names and that were last modified
    more than ``grace`` before ``now``."""
    listed = lake.store.list_tree(TABLES_DIR)
    named = {f.path for rec in lake.manifest.state().records.values() for f in rec.files}
    unnamed = [f for f in listed if f.rel not in named]
    cutoff = now - grace
    old = [f for f in unnamed if f.modified < cutoff]
    if dry_run:
        orphans = tuple(old)
    else:
        deleted = []
        for f in old:
            current = lake.store.modified(f.rel)
            if current is not None and current < cutoff:  # not rewritten since the listing
                lake.store.delete(f.rel)
                deleted.append(f)
        orphans = tuple(deleted)
    return VacuumReport(orphans, len(unnamed) - len(orphans), len(listed) - len(unnamed), dry_run)
