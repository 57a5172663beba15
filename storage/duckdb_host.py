"""One in-memory DuckDB database per process that GRACE attaches a local lake's catalog files to,
to build or check them (:mod:`storage.catalog`, :mod:`storage.catalog_seal`), instead of
opening each file as a database of its own: DuckDB sets a new database up (its built-in
functions, settings) in about 15 ms of CPU, while attaching a file to a database already open
takes 2 or 3, and a commit builds the catalog, or a query checks it, several times a round.

The host's ``temp_directory`` is ``''``, as in GRACE's query sandbox: a view bound there reads a
local lake's files at the paths the catalog names (:func:`storage.catalog._located_sql`). An S3
lake's catalog is opened as a database of its own, with the lake's filesystem registered: a
registered filesystem belongs to the whole database, and one per lake would pile up in the host."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from grace_core.per_process import PerProcess

_HOST: PerProcess[None, duckdb.DuckDBPyConnection] = PerProcess(lambda _: duckdb.connect(":memory:", config={"temp_directory": ""}))


@contextmanager
def catalog_connection(path: Path, *, read_only: bool, filesystem: Any | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose default database is the DuckDB file at ``path`` (created when absent,
    unless ``read_only``), closed (the file written out whole) when the block ends: a cursor of
    the process's host with the file attached, or, with ``filesystem`` (an S3 lake's), a database
    of its own with it registered."""
    if filesystem is not None:
        con = duckdb.connect(str(path), read_only=read_only)
        try:
            con.register_filesystem(filesystem)
            yield con
        finally:
            con.close()
        return
    con = _HOST.get(None).cursor()
    alias = f"catalog_{uuid.uuid4().hex}"
    try:
        quoted = "'" + str(path).replace("'", "''") + "'"
        con.execute(f"ATTACH {quoted} AS {alias}" + (" (READ_ONLY)" if read_only else ""))
        try:
            con.execute(f"USE {alias}")
            yield con
        finally:
            con.execute("USE memory")
            con.execute(f"DETACH {alias}")
    finally:
        con.close()
