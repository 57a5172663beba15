"""Integrity check of a lake (``grace check``): every table the commit log says was written is
there, at least at the version it recorded (:meth:`storage.lake.Lake.lost_tables`); every file
the current version of each Delta table names exists, has the size the table's log records and,
as Parquet, the row count its statistics record; the commit log is there when tables are. A
mismatch is reported naming the table or file, never read as silently wrong data."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from grace_core.errors import first_line
from storage.commit_log import LOG_REL
from storage.delta_tables import DeltaFile, data_files, table_rel
from storage.lake import Lake
from storage.schemas import TABLES


@dataclass(frozen=True)
class Problem:
    table: str
    uri: str
    reason: str

    def __str__(self) -> str:
        return f"{self.uri} (table {self.table}): {self.reason}"


@dataclass(frozen=True)
class CheckReport:
    tables: int
    files: int
    problems: tuple[Problem, ...]

    def summary(self) -> str:
        if not self.problems:
            return f"checked {self.files} file(s) of {self.tables} table(s): all present, sizes and row counts match"
        return f"checked {self.files} file(s) of {self.tables} table(s): {len(self.problems)} problem(s)"


def _check_file(lake: Lake, table: str, f: DeltaFile) -> Problem | None:
    fs, path = lake.store.arrow_fs, lake.store.arrow_path_of_uri(f.uri)
    try:
        info = fs.get_file_info(path)
    except (OSError, pa.ArrowException) as exc:
        return Problem(table, f.uri, f"cannot stat: {first_line(exc)}")
    if info.type == pafs.FileType.NotFound:
        return Problem(table, f.uri, "missing")
    if info.size != f.bytes:
        return Problem(table, f.uri, f"{info.size} bytes, the table version records {f.bytes}")
    try:
        rows = pq.ParquetFile(path, filesystem=fs).metadata.num_rows
    except (OSError, pa.ArrowException) as exc:
        return Problem(table, f.uri, f"not a readable Parquet file: {first_line(exc)}")
    if f.rows is not None and rows != f.rows:
        return Problem(table, f.uri, f"{rows} rows, the table version records {f.rows}")
    return None


def check_lake(lake: Lake) -> CheckReport:
    """Check every file of the current version of every table and of the commit log."""
    targets = [(name, table_rel(name), spec.partitioned) for name, spec in TABLES.items()] + [("commit log", LOG_REL, False)]
    problems = [Problem(name, lake.tables.uri(table_rel(name)), reason) for name, reason in lake.lost_tables().items()]
    if lake.tables.load(LOG_REL) is None and any(lake.tables.load(table_rel(name)) is not None for name in TABLES):
        problems.append(Problem("commit log", lake.tables.uri(LOG_REL), "missing while tables hold data: which work is done is unknown"))
    n_files, n_tables = 0, 0
    for name, rel, partitioned in targets:
        dt = lake.tables.load(rel)
        if dt is None:
            continue
        n_tables += 1
        for f in data_files(dt, lake.tables.uri(rel), partitioned, None):
            n_files += 1
            problem = _check_file(lake, name, f)
            if problem is not None:
                problems.append(problem)
    return CheckReport(n_tables, n_files, tuple(problems))
