"""How a lake's Delta logs list, as a digest: the test that tells whether a table, or the whole
lake, changed since it was last read, without reading a Delta table.

A Delta table changes only by a new entry in its ``_delta_log`` folder (a commit, a
checkpoint), by an entry removed (a rollback, a log cut short) or by an entry rewritten. So two
listings of a log that agree on the entry names and on the inode, size and modification time (a local
lake) or ETag (S3: a digest of the content) of its latest version entry and
``_last_checkpoint`` show one and the same table; a table removed and made again at the same
place writes its entries anew, with other times (and other file names inside them, so other
ETags). :func:`log_signature` is that listing for one table (what :class:`storage.delta_tables.DeltaTables`
checks before it reuses a table it opened), :func:`lake_listing` for every log of a lake (its
digest, :func:`lake_fingerprint`, is what a catalog records, :mod:`storage.catalog_seal`, and
what :meth:`storage.lake.Lake.state` checks before it reuses a state it read). Only the latest
version entry and ``_last_checkpoint`` are compared beyond their names: an older entry or a
checkpoint file rewritten in place, keeping its name, is not seen (Delta never does either).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from grace_core.per_process import ForkFresh
from storage.filesystem import LocalStore, S3Store, Store

LOG_DIR = "_delta_log"
"""The folder of a Delta table that holds its log."""
DELTA_LOGS = (f"tables/*/{LOG_DIR}", f"_grace/commits/{LOG_DIR}")
"""The Delta logs of a lake (every table's and the commit log's), relative to its root."""
_LATEST_LOG_ENTRY = re.compile(r"^(\d{20})\.json$")

T = TypeVar("T")

Listing = tuple[list[str], Callable[[str], tuple]]
"""A log folder's sorted entry names, and how to stat one of them (inode, size and time, or size and ETag)."""


def delta_log(rel: str) -> str:
    """The log folder of the Delta table at ``rel`` (relative to the lake root)."""
    return f"{rel}/{LOG_DIR}"


def _local_listing(store: LocalStore, rel: str) -> Listing | None:
    folder = store.root / rel
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return None  # no log there, or removed as it was listed

    def stats(name: str) -> tuple:
        try:
            st = (folder / name).stat()
        except OSError:
            return (None, None, None)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    return names, stats


def _listing(store: Store, rel: str) -> Listing | None:
    """The listing of the log folder ``rel`` of ``store`` (None: no log there); S3: one listing."""
    if isinstance(store, LocalStore):
        return _local_listing(store, rel)
    assert isinstance(store, S3Store)
    entries = store.list_stats(rel)
    return (sorted(entries), entries.__getitem__) if entries else None


def _digest_input(rel: str, listed: Listing) -> bytes:
    names, stats = listed
    latest = [n for n in names if _LATEST_LOG_ENTRY.match(n)][-1:] + [n for n in names if n == "_last_checkpoint"]
    return json.dumps([rel, names, [(n, *stats(n)) for n in latest]]).encode()


def _log_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def _newest(listed: Listing) -> int | None:
    """The highest version whose entry (``NNN.json``) the log lists."""
    versions = [int(m[1]) for n in listed[0] if (m := _LATEST_LOG_ENTRY.match(n))]
    return max(versions) if versions else None


@dataclass(frozen=True)
class LogListing:
    """How one or more Delta logs listed: ``digest`` (see the module docstring) and, per log
    folder, the highest version it lists (``newest``): a read that found exactly those versions
    read what the listing shows, not a commit that landed after it; and per log folder its own
    digest (``logs``): a table read under one of a log's digests is the same table under it."""

    digest: str
    newest: dict[str, int | None]
    logs: dict[str, str]


def log_signature(store: Store, rel: str) -> LogListing | None:
    """How the Delta log folder ``rel`` (``tables/<name>/_delta_log``) of ``store`` lists; None
    when there is no log there. A local folder of a few hundred entries: a fraction of a
    millisecond; S3: one listing."""
    listed = _listing(store, rel)
    if listed is None:
        return None
    digest = _log_digest(_digest_input(rel, listed))
    return LogListing(digest, {rel: _newest(listed)}, {rel: digest})


def log_folders(store: Store) -> list[str]:
    """The Delta log folders of the lake ``store`` (:data:`DELTA_LOGS`, each ``*`` expanded), relative and sorted."""
    folders: list[str] = []
    for pattern in DELTA_LOGS:
        parent, star, rest = pattern.partition("/*/")
        if not star:
            folders.append(pattern)
        elif isinstance(store, LocalStore):
            folders += [str(p.relative_to(store.root)) for p in store.root.glob(pattern)]
        else:
            assert isinstance(store, S3Store)
            folders += [f"{parent}/{name}/{rest}" for name in store.subfolders(parent)]
    return sorted(folders)


def lake_listing(store: Store) -> LogListing:
    """How every Delta log of the lake ``store`` lists (:func:`log_folders`; a folder removed as
    it was listed, or an empty prefix, counts as absent). Every commit, removal or rollback of a
    version, and every rewrite of a latest entry, changes its digest. Local: a folder of a few
    hundred names per log, about a millisecond. S3: one listing per log, eight at a time."""
    folders = log_folders(store)
    if isinstance(store, LocalStore):
        listed = [_listing(store, rel) for rel in folders]
    else:
        with ThreadPoolExecutor(max_workers=8) as pool:
            listed = list(pool.map(lambda rel: _listing(store, rel), folders))
    digest = hashlib.sha256()
    newest, logs = {}, {}
    for rel, one in zip(folders, listed):
        if one is not None:
            data = _digest_input(rel, one)
            digest.update(data)
            newest[rel] = _newest(one)
            logs[rel] = _log_digest(data)
    return LogListing(digest.hexdigest()[:32], newest, logs)


def lake_fingerprint(store: Store) -> str:
    """The digest of :func:`lake_listing`: what a catalog records of the lake state it shows."""
    return lake_listing(store).digest


class ListedCache(ForkFresh[OrderedDict], Generic[T]):
    """What this process read of lakes (a table it opened, a lake's state), each kept with the
    listing it was read under (:func:`log_signature`, :func:`lake_listing`, taken *before* the
    read) and handed out again only while the logs list the same: nothing was added, removed or
    rewritten since, so the same read would find the same. A read is kept only when it found the
    versions the listing shows (the caller checks :attr:`LogListing.newest`): one that a commit
    overtook could otherwise come back after that commit's entry were removed. Thread-safe; at
    most ``size`` entries (the least recently used go); a forked child starts empty
    (:class:`~grace_core.per_process.ForkFresh`). Entries: (S3 endpoint, lake URI, rel) →
    (digest, value)."""

    def __init__(self, size: int) -> None:
        super().__init__(OrderedDict)
        self._size = size

    @staticmethod
    def _key(store: Store, rel: str) -> tuple[str | None, str, str]:
        return (store.endpoint_url if isinstance(store, S3Store) else None, store.uri, rel)

    def get(self, store: Store, rel: str, digest: str) -> T | None:
        """The value kept for ``rel`` (``""``: the lake) of ``store`` if it was read under ``digest``, else None."""
        key = self._key(store, rel)
        with self._lock:
            kept = self._state.get(key)
            if kept is None or kept[0] != digest:
                return None
            self._state.move_to_end(key)
            return kept[1]

    def put(self, store: Store, rel: str, digest: str, value: T) -> None:
        """Keep ``value``, read under ``digest``, for ``rel`` of ``store``."""
        key = self._key(store, rel)
        with self._lock:
            self._state[key] = (digest, value)
            self._state.move_to_end(key)
            while len(self._state) > self._size:
                self._state.popitem(last=False)
