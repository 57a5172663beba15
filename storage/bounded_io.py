"""Files of unknown size, read and moved in bounded pieces: a batch or verdict file is read
1 MiB at a time and refused as soon as it passes its size limit, so a 50 GB file or object
stops at the limit instead of filling memory; a file too large to read is moved (rename, or a
server-side S3 copy) and hashed as a stream.

Only regular files are read: a FIFO (which blocks forever without a writer, or streams
forever with one), a device (``/dev/zero``, a terminal), a socket or a folder is refused at
once, before any read, in one line saying what it is. The check is made on the opened file
(opened without blocking), so a file swapped for a FIFO after a first look cannot block."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from grace_core.errors import GraceError, LakeError
from grace_core.limits import over_limit
from storage.filesystem import LocalStore, Store

PIECE = 1024 * 1024
_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def _not_regular(mode: int) -> str | None:
    """What a file of ``mode`` is when it is not a regular file (``a FIFO (named pipe)``), else None."""
    return None if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _refusal(label: str, kind: str) -> str:
    return f"{label}: cannot read: it is a folder" if kind == "a folder" else f"{label}: cannot read: it is {kind}, not a regular file"


def _open_local(path: str, label: str, error: type[GraceError]) -> BinaryIO | None:
    """The regular file ``path`` opened for reading (None when it does not exist). Anything
    else is refused before a byte is read; it is opened with O_NONBLOCK and checked by
    ``fstat`` so that a FIFO without a writer cannot block the open."""
    try:
        kind = _not_regular(os.stat(path).st_mode)  # a socket cannot even be opened: say what it is
        if kind:
            raise error(_refusal(label, kind))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise error(f"{label}: cannot read: {exc.strerror or exc}") from None
    kind = _not_regular(os.fstat(fd).st_mode)
    if kind:
        os.close(fd)
        raise error(_refusal(label, kind))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


@contextmanager
def _open(store: Store, rel: str, label: str, error: type[GraceError]) -> Iterator[BinaryIO | None]:
    """``rel`` opened for reading (None when it does not exist); a file that is not a regular
    file, or any other failure, is ``error``."""
    if isinstance(store, LocalStore):
        f = _open_local(store.arrow_path(rel), label, error)
        if f is None:
            yield None
            return
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
    """SHA-256 of ``rel``'s content, read as a stream (for files too large to hold). A local
    FIFO, device or socket, which has no content to read (and is never read), hashes as empty."""
    digest = hashlib.sha256()
    if isinstance(store, LocalStore):
        try:
            if _not_regular(os.stat(store.arrow_path(rel)).st_mode) not in (None, "a folder"):
                return digest.hexdigest()
        except OSError:
            pass  # _open says why
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
