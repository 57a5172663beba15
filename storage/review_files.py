"""The review area of a lake: files exchanged with human reviewers, in the lake's own store
(a local folder or an S3 prefix, beside the tables).

- ``review/outbox/<reviewer>.csv`` and ``.jsonl``: the reviewer's packet, every claim still
  waiting for their verdict with its context and empty ``verdict, seconds_spent, note``
  columns; rewritten at each dispatch and by ``grace review export``.
- ``review/inbox/``: verdict files returned by reviewers (``.csv``, ``.jsonl``); the nightly
  round reads them (``grace review ingest FILE`` reads a file from anywhere).
- ``review/processed/<stem>.<hash><suffix>``: inbox files once read (``<hash>``: the first 12
  hex digits of the content's SHA-256, so a later file of the same name never replaces one).
- ``review/quarantine/<name>.<hash>.bad.jsonl``: the rows of a file that were not applied,
  one JSON object per row with ``file, line, reason, row``; and a whole inbox file that is not
  a verdict file, moved there as ``<stem>.<hash><suffix>`` beside ``<that name>.error.txt``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from collections.abc import Iterable, Mapping

import polars as pl

from grace_core.errors import LakeError
from storage.config import LakeConfig
from storage.filesystem import Store, open_store

OUTBOX = "review/outbox"
INBOX = "review/inbox"
PROCESSED = "review/processed"
QUARANTINE = "review/quarantine"


def content_name(name: str, data: bytes) -> str:
    """``name`` with the first 12 hex digits of the SHA-256 of ``data`` before its suffix:
    ``alice.csv`` → ``alice.3f2a1b9c0d11.csv``."""
    stem, dot, suffix = name.rpartition(".")
    digest = hashlib.sha256(data).hexdigest()[:12]
    return f"{stem}.{digest}.{suffix}" if dot and stem else f"{name}.{digest}"


@dataclass(frozen=True)
class ReviewArea:
    """The ``review/`` folder of one lake store."""

    store: Store

    def packet_paths(self, reviewer: str) -> tuple[str, str]:
        """Lake-relative paths of ``reviewer``'s packet: CSV, then JSONL."""
        return f"{OUTBOX}/{reviewer}.csv", f"{OUTBOX}/{reviewer}.jsonl"

    def write_packet(self, reviewer: str, packet: pl.DataFrame) -> list[str]:
        """Replace ``reviewer``'s packet with ``packet`` (flat columns) as CSV and JSONL; the
        locations written (folder paths or ``s3://`` URLs)."""
        csv_path, jsonl_path = self.packet_paths(reviewer)
        self.store.write_bytes(csv_path, packet.write_csv().encode("utf-8"))
        self.store.write_bytes(jsonl_path, packet.write_ndjson().encode("utf-8") if packet.height else b"")
        return [self.store.file_uri(csv_path), self.store.file_uri(jsonl_path)]

    def inbox_names(self) -> list[str]:
        """Files waiting in the inbox, by name."""
        return sorted(self.store.list_names(INBOX))

    def read_inbox(self, name: str) -> bytes:
        """The bytes of inbox file ``name`` (empty when it vanished meanwhile)."""
        return self.store.read_bytes(f"{INBOX}/{name}") or b""

    def mark_processed(self, name: str, data: bytes) -> str:
        """Move inbox file ``name`` (content ``data``) to ``review/processed/``; its new location."""
        path = f"{PROCESSED}/{content_name(name, data)}"
        self.store.write_bytes(path, data)
        self.store.delete(f"{INBOX}/{name}")
        return self.store.file_uri(path)

    def quarantine_file(self, name: str, data: bytes, error: str) -> str:
        """Move inbox file ``name``, unreadable as a whole, to the quarantine with an
        ``.error.txt`` report beside it saying why; its new location."""
        path = f"{QUARANTINE}/{content_name(name, data)}"
        self.store.write_bytes(f"{path}.error.txt", (error.rstrip() + "\n").encode("utf-8"))
        self.store.write_bytes(path, data)
        self.store.delete(f"{INBOX}/{name}")
        return self.store.file_uri(path)

    def quarantine_rows(self, name: str, digest: str, rows: Iterable[Mapping[str, object]]) -> str:
        """Keep the rows of ``name`` (content hash ``digest``) that were not applied, each with
        ``file, line, reason, row``; the same file quarantined twice gives the same object.
        Returns its location."""
        base = name.rsplit("/", 1)[-1]
        path = f"{QUARANTINE}/{base}.{digest[:12]}.bad.jsonl"
        body = "".join(json.dumps(dict(r), ensure_ascii=False) + "\n" for r in rows)
        self.store.write_bytes(path, body.encode("utf-8"))
        return self.store.file_uri(path)


def read_verdict_file(uri: str, config: LakeConfig) -> tuple[str, bytes]:
    """The name and bytes of a verdict file: a local path or ``s3://bucket/key`` (reached with
    the lake's S3 endpoint and credentials)."""
    parent, _, name = uri.rstrip("/").rpartition("/")
    data = open_store(config.model_copy(update={"lake": parent or "."})).read_bytes(name)
    if data is None:
        raise LakeError(f"{uri}: no such verdict file")
    return name, data
