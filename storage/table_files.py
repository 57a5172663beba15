"""Single table files named by the user (``grace score IN OUT``), larger than memory if need
be: an edge table read in chunks of whole documents (Parquet, or ``.csv`` read as text), and a
Parquet file written chunk by chunk, atomically, so a failed run leaves no output file behind.

Chunks come in ``doc_id`` order, each holding whole documents and their rows in file order,
with every row's 1-based row number in the file, so a chunk reads exactly like the same
documents cut out of the whole table. A file of at most ``rows_per_chunk`` rows is one chunk
read directly; a larger one is split in one streaming pass into a temporary folder (Parquet
files partitioned by chunk number) and read back chunk by chunk, so memory holds one chunk.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl

from grace_core.errors import GraceError, first_line


class TableFileError(GraceError):
    """A table file cannot be read or written."""


ROW = "_file_row"


def _scan(p: Path) -> pl.LazyFrame:
    if p.suffix.lower() == ".csv":
        return pl.scan_csv(p, infer_schema_length=0)
    return pl.scan_parquet(p)


def _cannot_read(p: Path, exc: Exception) -> TableFileError:
    return TableFileError(f"{p}: cannot read as {'CSV' if p.suffix.lower() == '.csv' else 'Parquet'}: {first_line(exc)}")


def document_chunks(path: str | Path, rows_per_chunk: int) -> Iterator[tuple[pl.DataFrame, pl.Series]]:
    """Yield ``(rows, file_rows)`` per chunk of whole documents of the table file ``path``
    (Parquet, or ``.csv`` read as text): the chunk's rows in file order and their 1-based row
    numbers in the file. Documents are cut into chunks of about ``rows_per_chunk`` rows (a
    larger document is a chunk of its own); rows without a ``doc_id`` go to the first chunk."""
    p = Path(path)
    if not p.is_file():
        raise TableFileError(f"{p}: no such file")
    try:
        lf = _scan(p)
        if "doc_id" not in lf.collect_schema().names():
            whole = lf.collect()
            yield whole, pl.Series(ROW, range(1, whole.height + 1))
            return
        sizes = (lf.group_by(pl.col("doc_id").cast(pl.Utf8)).len().sort("doc_id", nulls_last=False)
                 .collect(engine="streaming"))
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise _cannot_read(p, exc) from None
    ends = sizes["len"].cum_sum()
    chunk = ((ends - sizes["len"]) // max(1, rows_per_chunk)).rle_id()  # a document starts its chunk by its first row
    n_chunks = int(chunk.max()) + 1 if len(chunk) else 1
    numbered = lf.with_row_index(ROW, offset=1)
    if n_chunks == 1:
        try:
            whole = numbered.collect()
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise _cannot_read(p, exc) from None
        yield whole.drop(ROW), whole[ROW]
        return
    chunk_of = sizes.select("doc_id", chunk=chunk.cast(pl.UInt32))
    folder = Path(tempfile.mkdtemp(prefix=".grace-chunks-", dir=p.parent if os.access(p.parent, os.W_OK) else None))
    try:
        try:
            (numbered.with_columns(_doc=pl.col("doc_id").cast(pl.Utf8))
             .join(chunk_of.lazy(), left_on="_doc", right_on="doc_id", how="left", nulls_equal=True)
             .drop("_doc")
             .with_columns(pl.col("chunk").fill_null(0))
             .sink_parquet(pl.PartitionBy(folder, key="chunk", include_key=False)))
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise _cannot_read(p, exc) from None
        for i in range(n_chunks):
            part = folder / f"chunk={i}"
            rows = pl.read_parquet(part).sort(ROW)
            shutil.rmtree(part)
            yield rows.drop(ROW), rows[ROW]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def parquet_chunk_writer(path: str | Path) -> Iterator:
    """A function that appends a DataFrame to the zstd Parquet file ``path``; the file appears
    (renamed from a temporary file beside it) only when the block ends without an error.
    pyarrow is imported with the first DataFrame, not with the module (``grace score`` imports
    it on its kernel loading thread meanwhile, off its start-up)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    os.close(fd)
    writer: list = []  # the pq.ParquetWriter, made with the first DataFrame's schema

    def write(df: pl.DataFrame) -> None:
        table = df.to_arrow()
        if not writer:
            import pyarrow.parquet as pq

            writer.append(pq.ParquetWriter(tmp, table.schema, compression="zstd"))
        writer[0].write_table(table)

    try:
        yield write
        if writer:
            writer.pop().close()
        os.replace(tmp, p)
    except BaseException:
        for w in writer:
            w.close()
        Path(tmp).unlink(missing_ok=True)
        raise
