"""The manifest: which files make up the lake.

A lake's committed state is the set of commit records under ``_manifest/commits/``. Each
record is one small JSON object, created once and never changed, named by the commit id (a
hash of the commit key) and listing the Parquet files that commit added. A file is part of the
lake only when a record names it; anything else under the root (a half-written temporary file,
a whole file of a writer killed before its record) is invisible to every reader.

Reading the state costs one listing plus the records not yet known. To keep that cheap for
lakes with many commits, ``_manifest/checkpoint.json`` holds a copy of many records at once;
it is only a cache (records outside it are still read), so concurrent checkpoint writers can
never lose a commit.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable, Mapping

from grace_core.errors import LakeError
from storage.filesystem import Store
from storage.schemas import TableSpec

FORMAT = 1
COMMITS_DIR = "_manifest/commits"
CHECKPOINT = "_manifest/checkpoint.json"
CHECKPOINT_EVERY = 64  # records outside the checkpoint before a commit rewrites it


def commit_id(key: str) -> str:
    """The id of the commit with ``key``: the first 32 hex digits of its SHA-256."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def record_path(cid: str) -> str:
    """Where the record of commit ``cid`` lives, relative to the lake root."""
    return f"{COMMITS_DIR}/{cid}.json"


@dataclass(frozen=True)
class FileEntry:
    """One committed Parquet file of ``table`` (``round`` is None for unpartitioned tables)."""

    table: str
    path: str
    rows: int
    bytes: int
    round: int | None
    schema_version: int


@dataclass(frozen=True)
class CommitRecord:
    """What one commit added. ``key`` is the caller's name for the unit of work."""

    id: str
    key: str
    committed_at: str
    files: tuple[FileEntry, ...]

    def to_json(self) -> bytes:
        body = {
            "format": FORMAT, "id": self.id, "key": self.key, "committed_at": self.committed_at,
            "files": [vars(f) for f in self.files],
        }
        return json.dumps(body, sort_keys=True).encode("utf-8")

    @classmethod
    def from_obj(cls, obj: Mapping, where: str) -> CommitRecord:
        try:
            if obj.get("format") != FORMAT:
                raise LakeError(f"{where}: manifest format {obj.get('format')!r}, this GRACE reads format {FORMAT}")
            return cls(obj["id"], obj["key"], obj["committed_at"], tuple(FileEntry(**f) for f in obj["files"]))
        except (KeyError, TypeError) as exc:
            raise LakeError(f"{where}: malformed commit record ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class LakeState:
    """The committed state: every commit record by id."""

    records: Mapping[str, CommitRecord]

    @property
    def state_id(self) -> str:
        """A hash of the set of commits; equal ids mean equal lake contents."""
        return hashlib.sha256("\n".join(sorted(self.records)).encode()).hexdigest()[:32]

    def files(self, table: str, rounds: Iterable[int] | None = None) -> list[FileEntry]:
        """The committed files of ``table`` (of the given rounds only, when given), in a
        stable order: by round, then path. A file named by several commits (identical rows
        committed under two keys) counts once."""
        wanted = None if rounds is None else set(rounds)
        out = {
            f.path: f for r in self.records.values() for f in r.files
            if f.table == table and (wanted is None or f.round in wanted)
        }
        return sorted(out.values(), key=lambda f: (f.round if f.round is not None else -1, f.path))


def checked_files(state: LakeState, spec: TableSpec, lake: str, rounds: Iterable[int] | None = None) -> list[FileEntry]:
    """:meth:`LakeState.files` of ``spec``'s table, refusing (:class:`LakeError`) a file
    written with another schema version than this GRACE reads."""
    files = state.files(spec.name, rounds)
    for f in files:
        if f.schema_version != spec.version:
            raise LakeError(
                f"lake {lake}: {f.path} of table {spec.name} has schema version {f.schema_version}, "
                f"this GRACE reads version {spec.version}"
            )
    return files


def _parse(data: bytes, where: str) -> dict:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LakeError(f"{where}: not valid JSON ({exc})") from None


class Manifest:
    """Reads a store's committed state, caching records (they never change once created)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._records: dict[str, CommitRecord] = {}
        self._checkpoint_read = False
        self._checkpointed: frozenset[str] = frozenset()

    def _read_record(self, cid: str) -> CommitRecord:
        rel = record_path(cid)
        data = self.store.read_bytes(rel)
        if data is None:
            raise LakeError(f"lake {self.store.uri}: commit record {rel} vanished while reading")
        return CommitRecord.from_obj(_parse(data, f"{self.store.uri}/{rel}"), f"{self.store.uri}/{rel}")

    def _read_checkpoint(self) -> None:
        data = self.store.read_bytes(CHECKPOINT)
        if data is not None:
            where = f"{self.store.uri}/{CHECKPOINT}"
            obj = _parse(data, where)
            records = [CommitRecord.from_obj(r, where) for r in obj.get("records", [])]
            self._records.update({r.id: r for r in records})
            self._checkpointed = frozenset(r.id for r in records)
        self._checkpoint_read = True

    def state(self) -> LakeState:
        """The current committed state (one listing, plus reads of records not seen before)."""
        ids = {n[: -len(".json")] for n in self.store.list_names(COMMITS_DIR) if n.endswith(".json")}
        if not self._checkpoint_read and ids:
            self._read_checkpoint()
        missing = sorted(ids - self._records.keys())
        if missing:
            with ThreadPoolExecutor(max_workers=min(8, len(missing))) as pool:
                for rec in pool.map(self._read_record, missing):
                    self._records[rec.id] = rec
        return LakeState({cid: self._records[cid] for cid in ids})

    def record(self, key: str) -> CommitRecord | None:
        """The record of the commit named ``key``, or ``None`` if it was never committed."""
        cid = commit_id(key)
        if cid in self._records:
            return self._records[cid]
        data = self.store.read_bytes(record_path(cid))
        if data is None:
            return None
        rec = CommitRecord.from_obj(_parse(data, record_path(cid)), f"{self.store.uri}/{record_path(cid)}")
        self._records[cid] = rec
        return rec

    def add(self, rec: CommitRecord) -> None:
        """Remember a record this process just created."""
        self._records[rec.id] = rec

    def maybe_checkpoint(self, state: LakeState) -> bool:
        """Rewrite the checkpoint when at least :data:`CHECKPOINT_EVERY` records are outside it."""
        if len(state.records.keys() - self._checkpointed) < CHECKPOINT_EVERY:
            return False
        records = sorted(state.records.values(), key=lambda r: r.id)
        body = {"format": FORMAT, "records": [json.loads(r.to_json()) for r in records]}
        self.store.write_bytes(CHECKPOINT, json.dumps(body, sort_keys=True).encode("utf-8"))
        self._checkpointed = frozenset(state.records)
        return True
