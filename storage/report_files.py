"""Evaluation report folders named by the user (``grace eval … --out DIR``): each file is
written to a temporary name beside its target and renamed into place, so a failed run never
leaves a half-written report."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from grace_core.errors import GraceError


class ReportWriteError(GraceError):
    """A report file cannot be written."""


def write_report_folder(out: str | Path, files: dict[str, bytes]) -> list[Path]:
    """Write ``files`` (name → bytes) into the folder ``out`` (created if needed)."""
    folder = Path(out)
    written = []
    umask = os.umask(0)
    os.umask(umask)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            target = folder / name
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.chmod(tmp, 0o666 & ~umask)  # as a plain open() would create it (mkstemp makes 0600)
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            written.append(target)
    except OSError as exc:
        raise ReportWriteError(f"{exc.filename or folder}: cannot write the report ({exc.strerror or exc})") from None
    return written
