"""Single table files named by the user (``grace score IN OUT``): read Parquet/CSV, write
Parquet atomically so a failed run leaves no output file behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import polars as pl

from grace_core.errors import GraceError


class TableFileError(GraceError):
    """A table file cannot be read or written."""


def read_table_file(path: str | Path) -> pl.DataFrame:
    """Read a Parquet (or ``.csv``) file; any failure becomes one :class:`TableFileError` line."""
    p = Path(path)
    if not p.is_file():
        raise TableFileError(f"{p}: no such file")
    try:
        if p.suffix.lower() == ".csv":
            return pl.read_csv(p, infer_schema_length=0)
        return pl.read_parquet(p)
    except (pl.exceptions.PolarsError, OSError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TableFileError(f"{p}: cannot read as {'CSV' if p.suffix.lower() == '.csv' else 'Parquet'}: {reason}") from None


def write_parquet_atomic(df: pl.DataFrame, path: str | Path) -> Path:
    """Write ``df`` as zstd Parquet to a temporary file beside ``path`` and rename it into place."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    os.close(fd)
    try:
        df.write_parquet(tmp, compression="zstd")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p
