"""Converting a lake written by earlier GRACE versions into Delta tables (``grace migrate``).

Before Delta, a lake's state was the set of commit records under ``_manifest/commits/``: one
JSON object per commit (``format`` 1) naming the Parquet files it added under
``tables/<table>/[round=N/]part-<hash>.parquet``. Files no record names (writers killed before
their record) were never part of the lake and are not migrated.

The migration replays every record, oldest first, as a commit of the new lake under the same
key (:func:`storage.commit.commit_tables`, with the record's ``committed_at``), so:

- it is idempotent: a key already in the commit log is skipped, and a migration killed half
  way completes on the next run without duplicating rows (MERGE on the tables' keys);
- keys keep working: a flow re-run after the migration still finds its unit of work done;
- time travel covers the migrated rounds.

Every file a record names must exist with the row count the record gives; otherwise the
migration stops with an error naming the file (nothing is guessed). When every record is
migrated, ``_manifest/MIGRATED.json`` is written: from then on the lake opens normally. The
old files are left in place; ``grace vacuum`` removes them once past its retention, since no
Delta version names them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from grace_core.errors import LakeError, first_line
from storage.commit import commit_tables
from storage.filesystem import Store
from storage.schemas import table_spec

if TYPE_CHECKING:
    from storage.lake import Lake

OLD_COMMITS = "_manifest/commits"
OLD_FORMAT = 1
MARKER = "_manifest/MIGRATED.json"


def refuse_unmigrated(store: Store) -> None:
    """Raise :class:`LakeError` if ``store`` holds a lake of the earlier format not migrated yet."""
    if store.any_file(OLD_COMMITS) and not store.exists(MARKER):
        raise LakeError(
            f"lake {store.uri} was written by an earlier GRACE (commit records under {OLD_COMMITS}/); "
            f"convert it to Delta tables first: grace migrate --lake {store.uri}"
        )


@dataclass(frozen=True)
class OldFile:
    table: str
    path: str
    rows: int
    schema_version: int


@dataclass(frozen=True)
class OldRecord:
    key: str
    committed_at: datetime
    files: tuple[OldFile, ...]


@dataclass
class MigrationReport:
    """``migrated``: records replayed now; ``skipped``: records migrated by an earlier run;
    ``rows``: rows inserted per table now."""

    lake: str
    migrated: int = 0
    skipped: int = 0
    rows: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        if not (self.migrated or self.skipped):
            return f"lake {self.lake}: nothing to migrate (no commit records of the earlier format: it is in the current format)"
        rows = ", ".join(f"{t} {n}" for t, n in sorted(self.rows.items())) or "none"
        return (f"lake {self.lake}: migrated {self.migrated} commit(s) of the earlier format to Delta tables "
                f"({self.skipped} migrated before); rows inserted: {rows}")


def _parse_record(data: bytes, where: str) -> OldRecord:
    try:
        obj = json.loads(data)
        if obj.get("format") != OLD_FORMAT:
            raise LakeError(f"{where}: commit record format {obj.get('format')!r}, grace migrate reads format {OLD_FORMAT}")
        files = tuple(OldFile(f["table"], f["path"], int(f["rows"]), int(f["schema_version"])) for f in obj["files"])
        when = datetime.fromisoformat(obj["committed_at"])
        return OldRecord(obj["key"], when if when.tzinfo else when.replace(tzinfo=timezone.utc), files)
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise LakeError(f"{where}: malformed commit record ({type(exc).__name__}: {exc})") from None


def old_records(store: Store) -> list[OldRecord]:
    """Every commit record of the earlier format, oldest first."""
    out = []
    for name in sorted(n for n in store.list_names(OLD_COMMITS) if n.endswith(".json")):
        rel = f"{OLD_COMMITS}/{name}"
        data = store.read_bytes(rel)
        if data is None:
            raise LakeError(f"lake {store.uri}: commit record {rel} vanished while migrating")
        out.append(_parse_record(data, f"{store.uri}/{rel}"))
    return sorted(out, key=lambda r: (r.committed_at, r.key))


def _read_old_file(store: Store, f: OldFile, key: str) -> pa.Table:
    where = f"lake {store.uri}: {f.path} (table {f.table}, commit {key!r})"
    spec = table_spec(f.table)
    if f.schema_version != spec.version:
        raise LakeError(f"{where}: schema version {f.schema_version}, this GRACE migrates version {spec.version}")
    try:
        table = pq.read_table(store.arrow_path(f.path), filesystem=store.arrow_fs)
    except FileNotFoundError:
        raise LakeError(f"{where}: the file is missing; the lake is damaged, nothing of this commit was migrated") from None
    except (OSError, pa.ArrowException) as exc:
        raise LakeError(f"{where}: cannot read it: {first_line(exc)}") from None
    if table.num_rows != f.rows:
        raise LakeError(f"{where}: {table.num_rows} rows, its commit record says {f.rows}")
    return table.replace_schema_metadata(None)


def migrate_lake(lake: Lake) -> MigrationReport:
    """Replay every commit record of the earlier format into ``lake``'s Delta tables (see the
    module docstring); returns what was done (nothing, on a lake of the current format)."""
    store = lake.store
    records = old_records(store)
    report = MigrationReport(store.uri)
    if not records:  # a lake of the current format: nothing to do, as a re-run (safe to run at any time)
        return report
    for rec in records:
        if lake.is_committed(rec.key):
            report.skipped += 1
            continue
        parts: dict[str, list[pa.Table]] = {}
        for f in rec.files:
            parts.setdefault(f.table, []).append(_read_old_file(store, f, rec.key))
        tables = {t: pa.concat_tables(ps, promote_options="permissive") for t, ps in parts.items()}
        result = commit_tables(lake.tables, lake.log, rec.key, tables, committed_at=rec.committed_at)
        report.migrated += 1
        for t, n in result.rows.items():
            report.rows[t] = report.rows.get(t, 0) + n
    body = {"migrated_at": datetime.now(timezone.utc).isoformat(), "records": len(records)}
    store.write_bytes(MARKER, json.dumps(body, sort_keys=True).encode("utf-8"))
    return report
