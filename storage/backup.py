"""Backup and restore of a lake (``grace backup DEST``, ``grace restore SRC LAKE``).

A backup is a consistent snapshot: every table as of one version of the commit log, taken while
rounds may be running. The commit log is read once, at its latest version ``L``; each table is
taken at the largest version a commit of that log recorded (a running round's table versions
that no record names yet are left out: its unit of work is not done), carried forward over the
compactions that followed it (``OPTIMIZE`` versions add no rows; once vacuumed, the files of the
recorded version may be gone). For each table the backup holds the Delta log entries up to that
version and the data files named by it and by every version a round of the log maps to
(``--as-of-round`` keeps working on the restored lake: :meth:`storage.commit_log.CommitLog.versions_as_of_round`),
and the commit log up to ``L``. Data files are immutable in Delta, so copying them while a writer
adds others is safe; files of an old version that vacuum already removed are counted, not
copied (time travel to it fails on the source too).

The backup is a folder or ``s3://bucket/prefix`` laid out as a lake, plus :data:`MANIFEST`
written last (every file with its size, the table versions, the source): a backup without it is
incomplete and is refused by restore. The destination must be empty. A restore copies the files
into an empty lake (the commit log last: a restore cut short is one ``grace check`` reports),
checks each size, and builds the catalog.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake.exceptions import DeltaError

from grace_core.errors import LakeError, first_line
from storage.commit_log import LOG_REL, LOG_SPEC, CommitRecord
from storage.config import LakeConfig
from storage.delta_tables import snapshot_dataset, table_rel
from storage.filesystem import LocalStore, Store, open_store
from storage.lake import Lake
from storage.log_listing import delta_log
from storage.schemas import TABLES

MANIFEST = "grace-backup.json"
FORMAT = 1
_LOG_ENTRY = re.compile(r"^(\d{20})\.(json|checkpoint(\.\d+\.\d+)?\.parquet)$")


@dataclass
class BackupReport:
    source: str
    dest: str
    log_version: int
    commits: int
    last_round: int | None
    tables: dict[str, int]
    files: int = 0
    bytes: int = 0
    gone: int = 0  # files of older versions vacuum had removed (time travel to them fails on the source too)

    def summary(self) -> str:
        gone = f"; {self.gone} file(s) of older versions were already vacuumed" if self.gone else ""
        last = f", last round {self.last_round}" if self.last_round is not None else ""
        return (f"backed up lake {self.source} to {self.dest}: {len(self.tables)} table(s) at {self.commits} commit(s){last} "
                f"(commit log version {self.log_version}), {self.files} file(s), {self.bytes} bytes{gone}")


@dataclass
class RestoreReport:
    source: str
    lake: str
    manifest: dict = field(repr=False)
    files: int = 0
    bytes: int = 0

    def summary(self) -> str:
        return (f"restored {self.files} file(s), {self.bytes} bytes, of the backup {self.source} (taken of "
                f"{self.manifest['source']} at {self.manifest['created_at']}, {self.manifest['commits']} commit(s)) into lake {self.lake}")


def open_location(config: LakeConfig, uri: str) -> Store:
    """The store at ``uri`` (a folder or ``s3://bucket/prefix``) with ``config``'s S3 settings."""
    if not uri.strip():
        raise LakeError("an empty location: give a folder or s3://bucket/prefix")
    return open_store(LakeConfig(**{**{name: getattr(config, name) for name in LakeConfig.model_fields}, "lake": uri}))


def _is_empty(store: Store) -> bool:
    base = store.arrow_path("").rstrip("/")
    try:
        found = store.arrow_fs.get_file_info(pafs.FileSelector(base, recursive=False, allow_not_found=True))
    except (OSError, pa.ArrowException) as exc:
        raise LakeError(f"cannot list {store.uri}: {first_line(exc)}") from None
    return not found


def _copy(src: Store, dst: Store, rel: str) -> None:
    try:
        if isinstance(dst, LocalStore):  # S3 has no folders to make
            Path(dst.arrow_path(rel)).parent.mkdir(parents=True, exist_ok=True)
        pafs.copy_files(src.arrow_path(rel), dst.arrow_path(rel), source_filesystem=src.arrow_fs,
                        destination_filesystem=dst.arrow_fs)
    except (OSError, pa.ArrowException) as exc:
        raise LakeError(f"cannot copy {rel} from {src.uri} to {dst.uri}: {first_line(exc)}") from None


def _size(store: Store, rel: str) -> int | None:
    try:
        info = store.arrow_fs.get_file_info(store.arrow_path(rel))
    except (OSError, pa.ArrowException) as exc:
        raise LakeError(f"cannot stat {store.uri}/{rel}: {first_line(exc)}") from None
    return None if info.type == pafs.FileType.NotFound else info.size


def _log_records(lake: Lake) -> tuple[int, list[CommitRecord]]:
    """The commit log at its latest version: that version and its records."""
    dt = lake.tables.checked(LOG_SPEC, lake.tables.load(LOG_REL))
    if dt is None:
        raise LakeError(f"lake {lake.uri}: no commit log (nothing committed): nothing to back up")
    try:
        rows = snapshot_dataset(dt, lake.store, LOG_REL, LOG_SPEC).to_table().to_pylist()
    except (OSError, pa.ArrowException) as exc:
        raise LakeError(f"lake {lake.uri}: cannot read the commit log: {first_line(exc)}") from None
    return dt.version(), [CommitRecord.from_row(r) for r in rows]


def _carried_over_compactions(lake: Lake, rel: str, recorded: int) -> int:
    """``recorded``, or the last of the ``OPTIMIZE`` versions that directly follow it."""
    dt = lake.tables.load(rel)
    if dt is None or dt.version() <= recorded:
        return recorded
    try:
        operations = {int(h["version"]): h.get("operation") for h in dt.history() if "version" in h}
    except (DeltaError, OSError) as exc:
        raise LakeError(f"lake {lake.uri}: cannot read the history of {rel}: {first_line(exc)}") from None
    version = recorded
    while operations.get(version + 1) == "OPTIMIZE":
        version += 1
    return version


def _log_entries(store: Store, rel: str, version: int) -> list[str]:
    """The Delta log files of the table at ``rel`` for versions up to ``version`` (commits and
    checkpoints; ``_last_checkpoint`` is left out: a reader lists the log without it)."""
    names = store.list_names(delta_log(rel))
    entries = [n for n in names if (m := _LOG_ENTRY.match(n)) and int(m.group(1)) <= version]
    if f"{version:020d}.json" not in entries:
        raise LakeError(f"lake {store.uri}: {rel} has no log entry for version {version}")
    return sorted(f"{delta_log(rel)}/{n}" for n in entries)


def _data_files(lake: Lake, rel: str, version: int) -> dict[str, int]:
    """The data files the table at ``rel`` names at ``version``: path under the lake → bytes."""
    dt = lake.tables.load(rel, version)
    if dt is None:
        raise LakeError(f"lake {lake.uri}: {rel} has no version {version}")
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    return {f"{rel}/{unquote(a['path'])}": int(a["size_bytes"]) for a in actions}


def _round_versions(records: list[CommitRecord], name: str, rounds: list[int]) -> set[int]:
    """The versions of table ``name`` that ``--as-of-round N`` reads, for each round N."""
    out = set()
    for n in rounds:
        versions = [w.version for r in records if r.round is not None and r.round <= n for t, w in r.tables.items() if t == name]
        if versions:
            out.add(max(versions))
    return out


def backup_lake(lake: Lake, dest: Store) -> BackupReport:
    """Write a consistent snapshot of ``lake`` to the empty location ``dest`` (see the module)."""
    if dest.uri == lake.uri or (isinstance(dest, LocalStore) and isinstance(lake.store, LocalStore)
                                and (dest.root.is_relative_to(lake.store.root) or lake.store.root.is_relative_to(dest.root))):
        raise LakeError(f"backup destination {dest.uri} overlaps the lake {lake.uri}: choose another folder")
    if not _is_empty(dest):
        raise LakeError(f"backup destination {dest.uri} is not empty: a backup goes to a new folder or prefix")
    lake.state()  # a lake that lost a table is refused (restore it first), as every reader does
    log_version, records = _log_records(lake)
    recorded: dict[str, int] = {}
    for r in records:
        for name, w in r.tables.items():
            recorded[name] = max(recorded.get(name, -1), w.version)
    rounds = sorted({r.round for r in records if r.round is not None})
    report = BackupReport(lake.uri, dest.uri, log_version, len(records), rounds[-1] if rounds else None, {})
    needed: dict[str, int] = {}  # data file → bytes
    optional: dict[str, int] = {}  # files of earlier versions, for time travel
    entries: list[str] = []
    for name in TABLES:
        if name not in recorded:
            continue  # never written by a finished commit
        rel = table_rel(name)
        version = _carried_over_compactions(lake, rel, recorded[name])
        report.tables[name] = version
        entries += _log_entries(lake.store, rel, version)
        needed |= _data_files(lake, rel, version)
        for k in sorted(_round_versions(records, name, rounds) - {version}):
            optional |= _data_files(lake, rel, k)
    log_files = _data_files(lake, LOG_REL, log_version)
    log_entries = _log_entries(lake.store, LOG_REL, log_version)
    listed: list[list] = []
    for rel, size in sorted(needed.items()) + sorted((k, v) for k, v in optional.items() if k not in needed):
        found = _size(lake.store, rel)
        if found is None and rel not in needed:
            report.gone += 1
            continue
        if found != size:
            raise LakeError(f"lake {lake.uri}: {rel} is {'missing' if found is None else f'{found} bytes'}, its table "
                            f"version records {size} (run grace check)")
        _copy(lake.store, dest, rel)
        listed.append([rel, size])
    for rel in entries:
        _copy(lake.store, dest, rel)
        listed.append([rel, _size(dest, rel)])
    for rel, size in sorted(log_files.items()):  # the commit log last: a backup cut short has none
        _copy(lake.store, dest, rel)
        listed.append([rel, size])
    for rel in log_entries:
        _copy(lake.store, dest, rel)
        listed.append([rel, _size(dest, rel)])
    report.files, report.bytes = len(listed), sum(size for _, size in listed)
    manifest = {
        "format": FORMAT, "source": lake.uri, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit_log_version": log_version, "commits": len(records), "last_round": report.last_round,
        "tables": report.tables, "files": listed,
    }
    dest.write_bytes(MANIFEST, json.dumps(manifest, indent=1).encode())
    return report


def read_manifest(src: Store) -> dict:
    """The manifest of the backup at ``src``; :class:`LakeError` when there is none (not a
    backup, or one cut short) or it is not one this GRACE reads."""
    data = src.read_bytes(MANIFEST)
    if data is None:
        raise LakeError(f"{src.uri} is not a complete GRACE backup (no {MANIFEST}: not a backup, or one cut short)")
    try:
        manifest = json.loads(data)
        files = [(str(rel), int(size)) for rel, size in manifest["files"]]
        if manifest["format"] != FORMAT:
            raise LakeError(f"{src.uri}: backup format {manifest['format']}, this GRACE reads format {FORMAT}")
    except (ValueError, KeyError, TypeError) as exc:
        raise LakeError(f"{src.uri}: {MANIFEST} is damaged ({type(exc).__name__}: {exc})") from None
    bad = [rel for rel, _ in files if rel.startswith("/") or ".." in rel.split("/")]
    if bad:
        raise LakeError(f"{src.uri}: {MANIFEST} names a file outside the backup ({bad[0]})")
    return manifest


def restore_lake(src: Store, config: LakeConfig) -> tuple[RestoreReport, Lake]:
    """Copy the backup at ``src`` into the empty lake of ``config``, check every size, build
    its catalog; returns the report and the restored lake."""
    manifest = read_manifest(src)
    target = open_store(config)
    if target.uri == src.uri:
        raise LakeError(f"cannot restore {src.uri} onto itself")
    if not _is_empty(target):
        raise LakeError(f"lake {target.uri} is not empty: a backup is restored into a new folder or prefix only")
    report = RestoreReport(src.uri, target.uri, manifest)
    files = [(rel, int(size)) for rel, size in manifest["files"]]
    first = [f for f in files if not f[0].startswith(f"{LOG_REL}/")]
    last = [f for f in files if f[0].startswith(f"{LOG_REL}/")]  # the commit log last: a restore cut short has none
    for rel, size in first + last:
        found = _size(src, rel)
        if found != size:
            raise LakeError(f"backup {src.uri}: {rel} is {'missing' if found is None else f'{found} bytes'}, "
                            f"the manifest records {size}: the backup is damaged")
        _copy(src, target, rel)
        if _size(target, rel) != size:
            raise LakeError(f"lake {target.uri}: {rel} was not copied whole")
        report.files += 1
        report.bytes += size
    lake = Lake.open(config)
    lake.catalog()
    return report, lake
