"""Files of unknown size, read and moved in bounded pieces: a batch or verdict file is read
1 MiB at a time and refused as soon as it passes its size limit, so ``/dev/zero``, a FIFO fed
forever or a 50 GB object stop at the limit instead of filling memory; a file too large to
read is moved (rename, or a server-side S3 copy) and hashed as a stream."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from grace_core.errors import GraceError, LakeError
from grace_core.limits import over_limit
from storage.filesystem import LocalStore, Store

PIECE = 1024 * 1024


@contextmanager
def _open(store: Store, rel: str, label: str, error: type[GraceError]) -> Iterator[BinaryIO | None]:
    """``rel`` opened for reading (None when it does not exist); any other failure is ``error``."""
    if isinstance(store, LocalStore):
        path = store.arrow_path(rel)
        if os.path.isdir(path):
            raise error(f"{label}: cannot read: it is a folder")
        try:
            f = open(path, "rb")  # noqa: SIM115 (closed below)
        except FileNotFoundError:
            yield None
            return
        except OSError as exc:
            raise error(f"{label}: cannot read: {exc.strerror or exc}") from None
    else:
        import pyarrow.fs as pafs

        info = store.arrow_fs.get_file_info(store.arrow_path(rel))
        if info.type == pafs.FileType.NotFound:
            yield None
            return
        if info.type == pafs.FileType.Directory:
            raise error(f"{label}: cannot read: it is a folder")
        try:
            f = store.arrow_fs.open_input_stream(store.arrow_path(rel))
        except OSError as exc:
            raise error(f"{label}: cannot read: {exc}") from None
    with f:
        yield f


def read_bounded(store: Store, rel: str, limit: int, field: str, label: str, error: type[GraceError]) -> bytes | None:
    """The content of ``rel`` (None when it does not exist), read in pieces of at most 1 MiB.
    More than ``limit`` bytes raises ``error`` naming ``label``, the limit and its setting
    (``field`` of :class:`~grace_core.limits.InputLimits`) without reading further."""
    with _open(store, rel, label, error) as f:
        if f is None:
            return None
        data = bytearray()
        try:
            while len(data) <= limit:
                piece = f.read(min(PIECE, limit + 1 - len(data)))
                if not piece:
                    return bytes(data)
                data += piece
        except OSError as exc:
            raise error(f"{label}: cannot read: {exc.strerror or exc}") from None
    raise error(f"{label}: " + over_limit(len(data), "bytes", field, limit, at_least=True))


def file_digest(store: Store, rel: str) -> str:
    """SHA-256 of ``rel``'s content, read as a stream (for files too large to hold)."""
    digest = hashlib.sha256()
    with _open(store, rel, rel, GraceError) as f:
        if f is None:
            raise GraceError(f"{rel}: no such file")
        while piece := f.read(PIECE):
            digest.update(piece)
    return digest.hexdigest()


def move_file(store: Store, src: str, dst: str) -> None:
    """Move ``src`` to ``dst`` within ``store`` without reading it: a rename in a local
    folder, a server-side copy then delete on S3."""
    try:
        if isinstance(store, LocalStore):
            target = store.arrow_path(dst)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(store.arrow_path(src), target)
        else:
            store.arrow_fs.copy_file(store.arrow_path(src), store.arrow_path(dst))
            store.delete(src)
    except OSError as exc:
        raise LakeError(f"{store.uri}: cannot move {src} to {dst}: {exc.strerror or exc}") from None
