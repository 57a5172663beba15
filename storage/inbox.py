"""The batch inbox: a local folder or an S3 prefix where document batches (``*.jsonl``) arrive.

A batch ingested (or already ingested) moves to ``processed/``; a malformed one moves to
``quarantine/`` beside a ``<name>.error.txt`` report. Either way it leaves the inbox, so the
watcher looks at each file once.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.config import LakeConfig
from storage.filesystem import Store, open_store

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
        """Names of the batch files waiting in the inbox, sorted (arrival order by name)."""
        return sorted(n for n in self.store.list_names("") if n.endswith(".jsonl"))

    def read(self, name: str) -> bytes:
        return self.store.read_bytes(name) or b""

    def _move(self, name: str, folder: str, data: bytes) -> None:
        self.store.write_bytes(f"{folder}/{name}", data)
        self.store.delete(name)

    def mark_processed(self, name: str, data: bytes) -> None:
        """Move ``name`` to ``processed/``."""
        self._move(name, PROCESSED, data)

    def quarantine(self, name: str, data: bytes, error: str) -> None:
        """Move ``name`` to ``quarantine/`` with ``<name>.error.txt`` saying why."""
        self.store.write_bytes(f"{QUARANTINE}/{name}.error.txt", (error.rstrip() + "\n").encode("utf-8"))
        self._move(name, QUARANTINE, data)


def read_batch_file(uri: str, config: LakeConfig) -> tuple[str, bytes]:
    """The name and bytes of one batch file: a local path or ``s3://bucket/key``."""
    from grace_core.errors import LakeError

    parent, _, name = uri.rstrip("/").rpartition("/")
    store = open_store(config.model_copy(update={"lake": parent or "."}))
    data = store.read_bytes(name)
    if data is None:
        raise LakeError(f"{uri}: no such batch file")
    return name, data
