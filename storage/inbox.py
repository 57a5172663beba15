"""The batch inbox: a local folder or an S3 prefix where document batches (``*.jsonl``) arrive.

A batch ingested (or already ingested) moves to ``processed/``; a malformed one, or one over
the size limit, moves to ``quarantine/`` beside a ``<name>.error.txt`` report. Either way it
leaves the inbox, so the watcher looks at each file once. Batches are read in bounded pieces
(:mod:`storage.bounded_io`) and moved without being read again.
"""

from __future__ import annotations

from dataclasses import dataclass

from grace_core.errors import InvalidBatch
from grace_core.limits import InputLimits
from storage.bounded_io import move_file, read_bounded
from storage.config import LakeConfig
from storage.filesystem import Store, open_store, waiting_names

PROCESSED = "processed"
QUARANTINE = "quarantine"


@dataclass(frozen=True)
class Inbox:
    """One inbox root, reached like a lake root (same S3 endpoint and credentials)."""

    store: Store

    @classmethod
    def open(cls, uri: str, config: LakeConfig) -> Inbox:
        return cls(open_store(config.model_copy(update={"lake": uri})))

    @property
    def uri(self) -> str:
        return self.store.uri

    def batches(self) -> list[str]:
        """Names of the batch files waiting in the inbox, sorted (arrival order by name). In a
        local inbox, a FIFO, device or folder named ``*.jsonl`` is one too: reading it is
        refused at once, so it goes to quarantine with its reason instead of lying there unseen."""
        return [n for n in waiting_names(self.store, "") if n.endswith(".jsonl")]

    def read(self, name: str, limits: InputLimits) -> bytes:
        """The bytes of batch ``name`` (empty when it vanished meanwhile); :class:`InvalidBatch`
        when it holds more than ``limits.max_batch_bytes`` or is not a regular file (a FIFO
        named ``*.jsonl`` is refused at once, so it goes to quarantine instead of blocking the scan)."""
        return read_bounded(self.store, name, limits.max_batch_bytes, "max_batch_bytes", name, InvalidBatch) or b""

    def mark_processed(self, name: str) -> None:
        """Move ``name`` to ``processed/``."""
        move_file(self.store, name, f"{PROCESSED}/{name}")

    def quarantine(self, name: str, error: str) -> None:
        """Move ``name`` to ``quarantine/`` with ``<name>.error.txt`` saying why."""
        self.store.write_bytes(f"{QUARANTINE}/{name}.error.txt", (error.rstrip() + "\n").encode("utf-8"))
        move_file(self.store, name, f"{QUARANTINE}/{name}")


def batch_location(uri: str, config: LakeConfig) -> tuple[Store, str]:
    """The store of the folder (or S3 prefix) holding the batch file ``uri``, and its name there."""
    parent, _, name = uri.rstrip("/").rpartition("/")
    if not name:
        raise InvalidBatch(f"{uri}: cannot read: not a file")
    folder = parent or ("/" if uri.startswith("/") else ".")
    return open_store(config.model_copy(update={"lake": folder})), name


def read_batch_file(uri: str, config: LakeConfig, limits: InputLimits) -> tuple[str, bytes]:
    """The name and bytes of one batch file: a local path or ``s3://bucket/key``.
    :class:`InvalidBatch` when it holds more than ``limits.max_batch_bytes``, cannot be read, or
    is not a regular file (a FIFO, device or folder is refused at once, never read)."""
    store, name = batch_location(uri, config)
    data = read_bounded(store, name, limits.max_batch_bytes, "max_batch_bytes", uri, InvalidBatch)
    if data is None:
        raise InvalidBatch(f"{uri}: cannot read: no such file")
    return name, data
