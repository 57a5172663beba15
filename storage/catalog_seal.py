"""What a catalog shows and whether it can be trusted, told without reading a Delta table.

A catalog (:mod:`storage.catalog`) is **sealed**: its state row (the lake, the state it shows,
the code that built it, a listing of the lake's Delta logs) and an HMAC-SHA256 (RFC 2104) of
what it serves, under a secret kept beside it (:data:`SEAL_KEY_FILE`). This module reads and
checks that seal, and answers the question every ``grace sql`` asks first: is the lake's own
catalog current? It is when its seal verifies, this code built it, and the lake's Delta logs
list exactly as they did when the lake state it shows was read (:func:`~storage.log_listing.lake_fingerprint`, taken
before that read). Nothing of a table is read to know it: a listing of a few folders (on S3, one
listing per table's log), no Delta reader, polars or pyarrow (:func:`current_catalog`), so
``grace sql`` answers in a third of a second on a local lake. Any difference (a commit since, a table's log
removed, rolled back or rewritten, another lake at the path) sends the caller the long way:
:class:`storage.lake.Lake` reads the lake, refuses one that lost a table, and rebuilds the
catalog.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import secrets
import time
from pathlib import Path
from stat import S_ISREG

import duckdb

from grace_core.errors import LakeError
from storage.duckdb_host import catalog_connection
from storage.filesystem import Store
from storage.log_listing import lake_fingerprint

STATE_TABLE = "_grace_catalog"
SEAL_KEY_FILE = ".catalog-seal.key"
STATE_COLUMNS = ("lake", "state_id", "schema_versions", "code", "as_of_round", "table_versions", "log_fingerprint")
"""The sealed fields of a catalog's state row, in the order :func:`sealed` returns them."""
PRIVATE_COLUMNS: dict[str, tuple[str, ...]] = {"reviewers": ("salt", "key_hash")}
"""Columns no SQL user sees, by table: the ``reviewers`` table's salt and key hash, which are
signing-equivalent (:mod:`grace_core.reviewer_keys`). Such a table is copied into the catalog
without them, a table rather than a view over its files, so that the SQL sandbox can refuse every
read of its files (:func:`table_folders`); it is a few rows."""


def stat_identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def file_identity(path: Path) -> tuple[int, ...] | None:
    """Device, inode, size and change times of the file at ``path`` (None: no such file). A
    catalog is never rewritten in place, only replaced by a new file
    (:func:`storage.catalog.build_catalog`), so an equal identity means the same catalog."""
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return stat_identity(st) if S_ISREG(st.st_mode) else None


def seal_key(folder: Path) -> bytes:
    """The secret that seals the catalogs of ``folder`` (:data:`SEAL_KEY_FILE` there, mode 600,
    32 random bytes made by the first build; two builds making it at once keep the first)."""
    path = folder / SEAL_KEY_FILE
    for _ in range(50):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "wb") as out:
                out.write(secrets.token_bytes(32))
            continue
        if len(data) == 32:
            return data
        time.sleep(0.01)  # being written by another build
    raise LakeError(f"catalog seal key {path} is damaged (expected 32 bytes): remove it, the next query rebuilds the catalog")


def definitions(con: duckdb.DuckDBPyConnection) -> bytes:
    """What a catalog serves, in a form that changes whenever any of it does: the SQL of every
    view and table of the connection's current database, the catalog (as DuckDB normalises it),
    and, per table, its row count and an order-free sum of row hashes (``lake_files``, the
    private copies); the state row aside."""
    objects = con.execute(
        "SELECT 'view', view_name, sql FROM duckdb_views() WHERE NOT internal AND database_name = current_database() "
        "UNION ALL SELECT 'table', table_name, sql FROM duckdb_tables() WHERE table_name <> ? AND database_name = current_database() "
        "ORDER BY 1, 2",
        [STATE_TABLE]).fetchall()
    parts = [f"{kind} {name} {sql}" for kind, name, sql in objects]
    for kind, name, _ in objects:
        if kind == "table":
            # fetchall, not fetchone: DuckDB 2 keeps a result open until a fetch returns no rows,
            # and register() on a connection with an open result fails (the build that follows)
            ((count, total),) = con.execute(f'SELECT count(*), coalesce(sum(hash(t)), 0) FROM "{name}" t').fetchall()
            parts.append(f"rows {name} {count} {total}")
    return "\n".join(parts).encode("utf-8")


def seal(key: bytes, served: bytes, row: tuple) -> str:
    """HMAC-SHA256 (RFC 2104) under ``key`` of a catalog's :func:`definitions` (``served``) and its state ``row``."""
    return hmac.new(key, json.dumps([list(map(str, row)), hashlib.sha256(served).hexdigest()]).encode(), "sha256").hexdigest()


def sealed(con: duckdb.DuckDBPyConnection, path: Path) -> tuple | None:
    """The state row (:data:`STATE_COLUMNS`) of the catalog open on ``con`` (at ``path``), if its
    seal verifies: it holds what a build of GRACE put there. None when it does not (a view
    redefined in plain DuckDB, a catalog copied from elsewhere or built by code without seals, no
    key beside it) or cannot be checked (a reader who may not read the key): the caller rebuilds
    it, or builds its own, and never serves it."""
    try:
        row = con.execute(f"SELECT {', '.join(STATE_COLUMNS)}, seal FROM {STATE_TABLE}").fetchall()
        if len(row) != 1 or not (path.parent / SEAL_KEY_FILE).is_file():
            return None
        *shown, recorded = row[0]
        expected = seal(seal_key(path.parent), definitions(con), tuple(shown))
    except (duckdb.Error, OSError):  # e.g. another user's key: this reader cannot verify, it builds its own
        return None
    return tuple(shown) if hmac.compare_digest(expected, recorded or "") else None


_SHOWN: dict[Path, tuple[tuple[int, ...], tuple | None]] = {}
"""Catalog file → (its identity, the state row it shows) for the catalogs this process built or
read: a query of an unchanged catalog skips opening it to read its state row."""


def remember_shown(path: Path, identity: tuple[int, ...], row: tuple) -> None:
    """Record that the catalog file at ``path`` with ``identity`` shows the state ``row``."""
    _SHOWN[path] = (identity, row)


def forget_shown() -> None:
    """Forget what :func:`shown_state` learnt (the next call opens each catalog again)."""
    _SHOWN.clear()


def known_state(path: Path, identity: tuple[int, ...] | None) -> tuple | None:
    """The state row this process verified (:func:`shown_state`) or built for the catalog at
    ``path`` when the file it saw then has ``identity``, without opening it; else None."""
    known = _SHOWN.get(path)
    return known[1] if identity is not None and known is not None and known[0] == identity else None


def shown_state(path: Path) -> tuple | None:
    """The state row (:data:`STATE_COLUMNS`) of the catalog at ``path``; None when there is none,
    it cannot be read or its seal does not verify (:func:`sealed`)."""
    identity = file_identity(path)
    if identity is None:
        return None
    known = _SHOWN.get(path)
    if known is not None and known[0] == identity:
        return known[1]
    try:
        with catalog_connection(path, read_only=True) as con:
            row = sealed(con, path)
    except duckdb.Error:
        row = None
    _SHOWN[path] = (identity, row)
    return row


@functools.cache
def code_id() -> str:
    """A digest of the modules that decide what a catalog holds (the catalog's, this one, the
    derived views' SQL, the table schemas): a catalog built by other code is rebuilt whole, never
    updated, and its schema versions and table names are this code's when its code id is."""
    here = Path(__file__)
    modules = [here.with_name("catalog.py"), here, here.with_name("views.py"), here.with_name("schemas.py")]
    return hashlib.sha256(b"".join(m.read_bytes() for m in modules)).hexdigest()[:16]


def table_folders(tables_root: str, names: list[str] | tuple[str, ...]) -> list[str]:
    """The folder of each table of ``names`` under the tables folder ``tables_root`` (``…/tables``),
    but those of tables with :data:`PRIVATE_COLUMNS`: the prefixes a query's sandbox may open
    (:func:`storage.readonly_sql.sandbox`; DuckDB's allow-list has no exceptions, and resolves
    ``..`` before matching, so leaving a folder out is what keeps it closed)."""
    return [f"{tables_root.rstrip('/')}/{name}/" for name in names if name not in PRIVATE_COLUMNS]


def current_catalog(store: Store) -> tuple[Path, list[str]] | None:
    """The lake's own catalog, with the table folders a query of it may open, when it shows the
    lake as it is: its seal verifies (:func:`shown_state`), this code built it for this lake as it
    is now (not as of a round), and :func:`~storage.log_listing.lake_fingerprint` is what it was when the state the
    catalog shows was read. None otherwise: the caller reads the lake (:class:`storage.lake.Lake`)."""
    path = store.catalog_path
    shown = shown_state(path)
    if shown is None:
        return None
    row = dict(zip(STATE_COLUMNS, shown))
    if (row["lake"], row["code"], row["as_of_round"]) != (store.uri, code_id(), None) or not row["log_fingerprint"]:
        return None
    if row["log_fingerprint"] != lake_fingerprint(store):
        return None
    return path, table_folders(store.file_uri("tables"), sorted(json.loads(row["table_versions"])))
