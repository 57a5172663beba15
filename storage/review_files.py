"""The review area of a lake: files exchanged with human reviewers, in the lake's own store
(a local folder or an S3 prefix, beside the tables).

- ``review/outbox/<reviewer>.csv`` and ``.jsonl``: the reviewer's packet, every claim still
  waiting for their verdict with its context and empty ``verdict, seconds_spent, note``
  columns; rewritten at each dispatch and by ``grace review export``.
- ``review/inbox/``: verdict files returned by reviewers (``.csv``, ``.jsonl``), each signed
  with its reviewer's key (:mod:`grace_core.reviewer_keys`); the nightly round reads them
  (``grace review ingest FILE`` reads a file from anywhere).
- ``review/processed/<stem>.<hash>.<suffix>``: inbox files once read (``<hash>``: the first 12
  hex digits of the content's SHA-256, so a later file of the same name never replaces one).
- ``review/quarantine/<name>.<hash>.bad.jsonl``: the rows of a unit of verdicts that were not
  applied, one JSON object per row with ``file, line, reason, row`` (``<hash>``: of the unit's
  commit key); and a whole inbox file that is not a verdict file or was refused whole
  (unsigned, forged, changed after signing, of a revoked key, holding another reviewer's rows),
  moved there as ``<stem>.<hash>.<suffix>`` beside ``<that name>.error.txt`` giving the reason.

These names are made from the hash and a short, sanitised form of the received name
(:func:`short_name`: at most 64 characters of ``A-Z a-z 0-9 . _ + @ -``, others as ``_``), never
from the raw name: a 230-character or non-ASCII name would not fit a file system's 255 bytes
(with the temporary name of an atomic write) and the file would fail whole. The received name
stays in what the lake reports: the rows' ``file`` field, the ``.error.txt`` report.

Every path is checked before it is written (defence in depth behind the id checks of
:mod:`grace_core.identifiers`): a reviewer name must be a safe id, a file name one plain path
part, and the resolved target must stay inside the lake's ``review/`` folder. Verdict files
are read in bounded pieces up to ``max_verdict_bytes``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from collections.abc import Iterable, Mapping

import polars as pl

from grace_core.errors import LakeError
from grace_core.identifiers import check_id
from grace_core.limits import InputLimits
from grace_core.verdict_files import InvalidVerdictFile
from storage.bounded_io import file_digest, move_file, read_bounded
from storage.config import LakeConfig
from storage.filesystem import LocalStore, Store, open_store, waiting_names

REVIEW = "review"
OUTBOX = "review/outbox"
INBOX = "review/inbox"
PROCESSED = "review/processed"
QUARANTINE = "review/quarantine"


MAX_NAME_CHARS = 64
MAX_SUFFIX_CHARS = 16
_UNSAFE = re.compile(r"[^A-Za-z0-9._+@-]")


def short_name(name: str) -> str:
    """``name`` as part of a file name the lake writes: every character outside
    ``A-Z a-z 0-9 . _ + @ -`` as ``_``, cut to 64 characters, never hidden (a leading ``.`` as
    ``_``) and never empty."""
    clean = _UNSAFE.sub("_", name)[:MAX_NAME_CHARS]
    return ("_" + clean[1:] if clean.startswith(".") else clean) or "_"


def content_name(name: str, data: bytes | str) -> str:
    """:func:`short_name` of ``name`` with the first 12 hex digits of the SHA-256 of ``data`` (or
    of the hex digest ``data``) before its suffix (when it has one of at most 16 characters):
    ``alice.csv`` → ``alice.3f2a1b9c0d11.csv``."""
    stem, dot, suffix = name.rpartition(".")
    digest = (data if isinstance(data, str) else hashlib.sha256(data).hexdigest())[:12]
    if dot and stem and 0 < len(suffix) <= MAX_SUFFIX_CHARS:
        return f"{short_name(stem)}.{digest}.{short_name(suffix)}"
    return f"{short_name(name)}.{digest}"


def _plain_name(name: str) -> str:
    """``name`` when it is one plain path part (no separator, NUL, or ``.``/``..``)."""
    if not name or name in (".", "..") or any(c in name for c in "/\\\0"):
        raise LakeError(f"review file name {name!r}: not a plain file name")
    return name


@dataclass(frozen=True)
class ReviewArea:
    """The ``review/`` folder of one lake store."""

    store: Store

    def _inside(self, folder: str, name: str) -> str:
        """The lake-relative path ``folder/name``, refused unless ``name`` is one plain part
        and (local lakes) the resolved path stays inside the lake's ``review/`` folder."""
        rel = f"{folder}/{_plain_name(name)}"
        if isinstance(self.store, LocalStore):
            root = os.path.realpath(self.store.arrow_path(REVIEW))
            target = os.path.realpath(self.store.arrow_path(rel))
            if os.path.commonpath([root, target]) != root:
                raise LakeError(f"review file {rel!r}: resolves to {target}, outside the lake's review folder")
        return rel

    def packet_paths(self, reviewer: str) -> tuple[str, str]:
        """Lake-relative paths of ``reviewer``'s packet: CSV, then JSONL (``reviewer`` must be
        a safe id, :func:`grace_core.identifiers.check_id`)."""
        check_id(reviewer, "reviewer")
        return self._inside(OUTBOX, f"{reviewer}.csv"), self._inside(OUTBOX, f"{reviewer}.jsonl")

    def write_packet(self, reviewer: str, packet: pl.DataFrame) -> list[str]:
        """Replace ``reviewer``'s packet with ``packet`` (flat columns) as CSV and JSONL; the
        locations written (folder paths or ``s3://`` URLs)."""
        csv_path, jsonl_path = self.packet_paths(reviewer)
        self.store.write_bytes(csv_path, packet.write_csv().encode("utf-8"))
        self.store.write_bytes(jsonl_path, packet.write_ndjson().encode("utf-8") if packet.height else b"")
        return [self.store.file_uri(csv_path), self.store.file_uri(jsonl_path)]

    def inbox_names(self) -> list[str]:
        """Files waiting in the inbox, by name (a FIFO or device too: reading it is refused at
        once, and it goes to the quarantine: :func:`storage.filesystem.waiting_names`)."""
        return waiting_names(self.store, INBOX)

    def read_inbox(self, name: str, limits: InputLimits = InputLimits()) -> bytes:
        """The bytes of inbox file ``name`` (empty when it vanished meanwhile), read in bounded
        pieces: :class:`InvalidVerdictFile` when it holds more than ``max_verdict_bytes``."""
        rel = self._inside(INBOX, name)
        return read_bounded(self.store, rel, limits.max_verdict_bytes, "max_verdict_bytes", name, InvalidVerdictFile) or b""

    def mark_processed(self, name: str, data: bytes) -> str:
        """Move inbox file ``name`` (content ``data``) to ``review/processed/``; its new location."""
        path = self._inside(PROCESSED, content_name(name, data))
        move_file(self.store, self._inside(INBOX, name), path)
        return self.store.file_uri(path)

    def quarantine_file(self, name: str, data: bytes | None, error: str) -> str:
        """Move inbox file ``name``, unreadable as a whole, to the quarantine with an
        ``.error.txt`` report beside it saying why; its new location. ``data`` is its content,
        or None when it was too large to read (it is then hashed as a stream)."""
        source = self._inside(INBOX, name)
        digest = hashlib.sha256(data).hexdigest() if data is not None else file_digest(self.store, source)
        path = self._inside(QUARANTINE, content_name(name, digest))
        self.store.write_bytes(f"{path}.error.txt", (error.rstrip() + "\n").encode("utf-8"))
        move_file(self.store, source, path)
        return self.store.file_uri(path)

    def quarantine_rows(self, name: str, digest: str, rows: Iterable[Mapping[str, object]]) -> str:
        """Keep the rows of ``name`` (a unit of verdicts with hash ``digest``) that were not
        applied, each with ``file, line, reason, row``, as ``<name>.<hash>.bad.jsonl``
        (:func:`short_name`, the first 12 hex digits of ``digest``); the same unit quarantined
        twice gives the same object. Returns its location; :class:`LakeError` when it cannot be
        written."""
        path = self._inside(QUARANTINE, f"{short_name(name.rsplit('/', 1)[-1])}.{digest[:12]}.bad.jsonl")
        body = "".join(json.dumps(dict(r), ensure_ascii=False) + "\n" for r in rows)
        self.store.write_bytes(path, body.encode("utf-8"))
        return self.store.file_uri(path)


def read_verdict_file(uri: str, config: LakeConfig, limits: InputLimits = InputLimits()) -> tuple[str, bytes]:
    """The name and bytes of a verdict file: a local path or ``s3://bucket/key`` (reached with
    the lake's S3 endpoint and credentials), read in bounded pieces:
    :class:`InvalidVerdictFile` when it holds more than ``limits.max_verdict_bytes``."""
    parent, _, name = uri.rstrip("/").rpartition("/")
    folder = parent or ("/" if uri.startswith("/") else ".")
    data = read_bounded(open_store(config.model_copy(update={"lake": folder})), name, limits.max_verdict_bytes,
                        "max_verdict_bytes", uri, InvalidVerdictFile)
    if data is None:
        raise LakeError(f"{uri}: no such verdict file")
    return name, data
