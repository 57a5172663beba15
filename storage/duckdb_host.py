"""One in-memory DuckDB database per process that GRACE attaches its catalog files to, to build
or check them (:mod:`storage.catalog`, :mod:`storage.catalog_seal`), instead of opening each file
as a database of its own: DuckDB sets a new database up (its built-in functions, settings) in
about 15 ms of CPU, while attaching a file to a database already open takes 2 or 3, and a commit
builds the catalog, or a query checks it, several times a round.

One file at a time is attached (a lock): DuckDB's listings of views and tables (what a catalog's
seal covers, :func:`storage.catalog_seal.definitions`) scan every attached database, and a
database another thread's statement still references is not written out when it is detached,
so a build could move an unwritten file into place. The host's ``temp_directory`` is ``''``, as
in GRACE's query sandbox: a view bound there reads a local lake's files at the paths the catalog
names (:func:`storage.catalog._located_sql`). An S3 lake's catalog is built in a database of its
own, with the lake's filesystem registered (a registered filesystem belongs to the whole
database, and one per lake would pile up in the host); its check needs no filesystem."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from grace_core.per_process import PerProcess

def sql_string(text: str) -> str:
    """``text`` as a DuckDB string literal (single quotes, each inner one doubled)."""
    return "'" + text.replace("'", "''") + "'"


_HOST: PerProcess[None, tuple[duckdb.DuckDBPyConnection, threading.RLock]] = PerProcess(
    lambda _: (duckdb.connect(":memory:", config={"temp_directory": ""}), threading.RLock()))


@contextmanager
def catalog_connection(path: Path, *, read_only: bool, filesystem: Any | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose default database is the DuckDB file at ``path`` (created when absent,
    unless ``read_only``), closed when the block ends, the file written out whole (checkpointed)
    when the block ended without an error: a cursor of the process's host with the file attached,
    or, with ``filesystem`` (an S3 lake's), a database of its own with it registered."""
    if filesystem is not None:
        con = duckdb.connect(str(path), read_only=read_only)
        try:
            con.register_filesystem(filesystem)
            yield con
        finally:
            con.close()
        return
    host, lock = _HOST.get(None)
    alias = f"catalog_{uuid.uuid4().hex}"
    with lock:
        con = host.cursor()
        attached = done = False
        try:
            con.execute(f"ATTACH {sql_string(str(path))} AS {alias}" + (" (READ_ONLY)" if read_only else ""))
            attached = True
            con.execute(f"USE {alias}")
            yield con
            done = True
        finally:
            con.close()  # its open results and transaction go with it
            if attached:
                closer = host.cursor()
                try:
                    if done and not read_only:
                        closer.execute(f"CHECKPOINT {alias}")
                finally:
                    closer.execute(f"DETACH {alias}")
                    closer.close()
