"""The DuckDB catalog: one database file of views over the files of the lake's Delta tables.

The catalog holds, for every table of :data:`storage.schemas.TABLES`, a view over the data
files its current Delta version names (``read_parquet([...])`` taking the ``round`` column that
Delta keeps in the folder name from the ``round=N/`` folders, or one branch per round when a
folder above the lake has an ``=`` in its name; a typed empty ``SELECT`` while a table has no file), the derived views of :mod:`storage.views`, a
``lake_files`` table (every file with its table, round, rows, bytes and table version) and
``_grace_catalog`` (which lake state it shows). Only files of committed Delta versions are
named: by ``s3://`` URL for an S3 lake (its catalog is a local cache file, keyed by the lake's
URI: a copy of the bucket prefix is another lake with a catalog of its own), by absolute path
for a local lake.

**Location.** A local lake's catalog travels with the lake (a copy, a move, a restored backup,
a sync to a laptop), and a plain ``duckdb`` session on the copy's ``catalog.duckdb`` must read
the copy's files, never the original's. DuckDB (2.0) gives a view no way to name its files
relative to its database: table-function arguments must be constant (no subquery of
``duckdb_databases()``), relative paths resolve against the process's working directory (or
``file_search_path``, a session setting a catalog cannot carry). One constant does say where
the database lies: ``current_setting('temp_directory')``, whose default is the database file's
absolute path plus ``.tmp``. So each view of a local lake lists its files by absolute path and
places them, when it is bound, under the folder of the ``catalog.duckdb`` the session opened
(:func:`_located_sql`); in GRACE's sandbox (``temp_directory`` ``''``) and in a catalog of
another name (time travel, a private catalog) they stay where they were; a session that cannot
tell (the catalog ATTACHed to an in-memory database, ``temp_directory`` set by hand) fails in
one line naming the lake instead of reading it. GRACE itself still rebuilds a catalog whose
recorded lake is not the one it opens (its state row and seal name the lake) before serving it.
The ``lake_files`` table keeps the absolute paths of the lake the catalog was built for.

It is rebuilt after every commit and whenever a reader finds it behind the lake
(:func:`ensure_catalog`): built in a temporary file beside the old one, then renamed over it,
so a reader always opens a complete catalog. A rebuild starts from a copy of the catalog in place
when that one shows the same lake through the same code, and replaces only the views of the
tables whose Delta version changed (:func:`build_catalog`); a process remembers which state the catalogs it built
or read show, by file identity (inode, size, times), so a query of an unchanged catalog does not
open it twice. Temporary files of builds that were killed are
removed by later builds once they are :data:`STALE_TEMP_SECONDS` old. A reader that cannot
write the catalog's folder (a read-only user, a stale catalog) builds its own in a private
temporary folder; so does a query of the lake as of an earlier round (time travel). Those
private catalogs are a cache: the folder of a lake whose private catalogs were not used for
:data:`PRIVATE_KEEP_SECONDS` (a week) is removed with them (:func:`prune_private_catalogs`), and a
lake whose own folder is writable never gets one. Queries from users run through
:mod:`storage.readonly_sql`, never on a connection of this module.

The catalog is GRACE's own derived artifact, so it is **sealed**: every build records an
HMAC-SHA256 (RFC 2104) of what it serves (each view's and table's SQL as DuckDB holds it, each
table's row count and row-hash sum, and the lake state it shows) under a secret kept beside it
(:data:`~storage.catalog_seal.SEAL_KEY_FILE`, mode 600, outside the table folders the SQL sandbox
may read; :mod:`storage.catalog_seal`). A catalog whose seal does not verify, e.g. one where a
plain ``duckdb`` session redefined a view, or one copied from another lake or built by code
without seals, is never served nor updated in place: the next query rebuilds it whole. The state
it shows includes a listing of the lake's Delta logs, so that ``grace sql`` can tell the catalog
is current without reading a table (:func:`storage.catalog_seal.current_catalog`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pyarrow as pa

from grace_core.errors import LakeError, first_line
from storage.delta_tables import TABLES_DIR, LakeState, TableState
from storage.catalog_seal import (
    PRIVATE_COLUMNS, STATE_COLUMNS, STATE_TABLE, code_id, definitions, file_identity, known_state, remember_shown, seal, seal_key,
    sealed, shown_state, stat_identity,
)
from storage.duckdb_host import catalog_connection, sql_string
from storage.filesystem import CATALOG_FILE, Store
from storage.schemas import ROUND, TABLES, TableSpec
from storage.views import DERIVED_VIEWS

FILES_TABLE = "lake_files"
PRIVATE_CATALOG_FILE = "lake-catalog.duckdb"  # not catalog.duckdb: a session that opens it reads the lake it names (_located_sql)
STALE_TEMP_SECONDS = 600  # a catalog build takes seconds; older temporary files are leftovers of killed builds
PRIVATE_KEEP_SECONDS = 7 * 24 * 3600
"""The private catalogs (time travel, a reader's own) of a lake none of them was used for this
long are removed; the next query that needs one builds it again."""
_PRUNED: set[Path] = set()  # the private catalog folders this process has pruned (once each)


def _sql_type(t: pa.DataType) -> str:
    if pa.types.is_string(t):
        return "VARCHAR"
    if pa.types.is_int32(t):
        return "INTEGER"
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    if pa.types.is_list(t):
        return f"{_sql_type(t.value_type)}[]"
    raise LakeError(f"no DuckDB type for {t}")


_OWN_SUFFIX = f"/{CATALOG_FILE}.tmp"
_TEMP_DIRECTORY = "current_setting('temp_directory')"
_OPEN_AS_OWN = f"ends_with({_TEMP_DIRECTORY}, {sql_string(_OWN_SUFFIX)})"
"""True in a session that opened a file named ``catalog.duckdb`` as its database: DuckDB's
default ``temp_directory`` is the database file's path plus ``.tmp`` (absolute), the one value
a view can read at bind time that tells where its catalog lies (table-function arguments must
be constant: no subquery of ``duckdb_databases()``)."""


def _lake_root(spec: TableSpec, table: TableState) -> str | None:
    """The local lake root (absolute, no trailing ``/``) whose ``tables/<name>/`` holds
    ``table``'s files; None for an S3 lake (its files are named by ``s3://`` URL)."""
    uri = table.files[0].uri
    if "://" in uri:
        return None
    return uri[: uri.rindex(f"/{TABLES_DIR}/{spec.name}/")]


def _located_sql(root: str, path: str) -> str:
    """Where a view of a local lake reads the file ``path`` (an absolute path under the lake
    ``root``, the lake the catalog was built for), decided when the view is bound (a constant
    expression, so a ``read_parquet`` argument; a failure is one line at bind time):

    - under the folder of the catalog file, when the session opened a file named
      ``catalog.duckdb`` as its database (:data:`_OPEN_AS_OWN`): a lake copied, moved or restored
      elsewhere reads its own files, the original's never;
    - ``path`` itself in GRACE's sandbox (an in-memory database that attaches the catalog with
      ``temp_directory`` set to ``''``, :func:`storage.readonly_sql.sandbox`) and in a session
      that opened as its database a catalog of another name (time travel, private catalogs, a
      catalog built elsewhere: their ``temp_directory`` is their path plus ``.tmp``);
    - else an error naming ``root``: a session that attached the catalog to another database
      (DuckDB's in-memory ``temp_directory`` is ``.tmp``) or set ``temp_directory`` by hand
      cannot tell where the catalog lies, and does not guess."""
    skip = len(_OWN_SUFFIX) - 1
    message = (f"this catalog names the files of the lake {root} relative to its own folder, and this session "
               f"cannot tell where it lies: open the lake's {CATALOG_FILE} itself as the database "
               f"(duckdb <lake>/{CATALOG_FILE}, temp_directory left at its default) rather than ATTACH it, "
               "or query through grace sql")
    return (f"CASE WHEN {_OPEN_AS_OWN} THEN left({_TEMP_DIRECTORY}, length({_TEMP_DIRECTORY}) - {skip}) || "
            f"substr({path}, {len(root) + 2}) "
            f"WHEN {_TEMP_DIRECTORY} = '' OR (ends_with({_TEMP_DIRECTORY}, '.tmp') AND {_TEMP_DIRECTORY} <> '.tmp') "
            f"THEN {path} ELSE error({sql_string(message)}) END")


def _paths_sql(uris: list[str], root: str | None) -> str:
    """The ``read_parquet`` file list: the URIs (S3, or local paths placed by
    :func:`_located_sql` under the folder the catalog lies in)."""
    listed = "[" + ", ".join(sql_string(u) for u in uris) + "]"
    return listed if root is None else f"list_transform({listed}, lambda f: {_located_sql(root, 'f')})"


def table_view_sql(spec: TableSpec, table: TableState) -> str:
    """The ``SELECT`` behind the view of one table: its columns in declared order (but its
    :data:`PRIVATE_COLUMNS`), its files smallest first. DuckDB binds a ``read_parquet`` by
    reading the footer of the first file it lists, and a compacted partition's file can hold 87M
    rows in 21,000 row groups (a 13 MB footer): listed first, every query of the table spent
    0.3 s binding, even one whose ``round`` filter skips that file (``edges`` after round 1 of a
    100,000-document lake, 0.28 s against 0.01 s listed last).

    A local lake's files are listed by the absolute paths they had when the catalog was built and
    placed under the catalog's own folder when the view is bound (:func:`_located_sql`): a plain
    ``duckdb`` session on the ``catalog.duckdb`` of a copy of the lake reads the copy, never the
    original."""
    shown = [f for f in spec.schema if f.name not in PRIVATE_COLUMNS.get(spec.name, ())]
    if not table.files:
        cols = ", ".join(f'CAST(NULL AS {_sql_type(f.type)}) AS "{f.name}"' for f in shown)
        return f"SELECT {cols} LIMIT 0"
    root = _lake_root(spec, table)
    if spec.partitioned and all(f.uri.count("=") == 1 and f"/{ROUND}={f.round}/" in f.uri for f in table.files):
        # one scan whose round comes from the round=N/ folders (DuckDB skips the other folders
        # when a query filters on round): a view of one branch binds in a fraction of the time
        # of one branch per round, and every commit rebuilds the catalog
        cols = ", ".join(f'"{f.name}"' for f in shown)
        paths = _paths_sql([f.uri for f in sorted(table.files, key=lambda f: f.bytes)], root)
        return f"SELECT {cols} FROM read_parquet({paths}, hive_partitioning = true, hive_types = {{'{ROUND}': INTEGER}})"
    groups: dict[int | None, list[str]] = {}  # a folder elsewhere in the path has an "=": one branch per round
    for f in sorted(table.files, key=lambda f: f.bytes):
        groups.setdefault(f.round, []).append(f.uri)
    branches = []
    for rnd, uris in sorted(groups.items(), key=lambda g: -1 if g[0] is None else g[0]):
        cols = ", ".join(
            f'CAST({int(rnd)} AS INTEGER) AS "{ROUND}"' if spec.partitioned and f.name == ROUND else f'"{f.name}"'
            for f in shown
        )
        branches.append(f"SELECT {cols} FROM read_parquet({_paths_sql(uris, root)}, hive_partitioning = false)")
    return "\nUNION ALL\n".join(branches)


def _versions_json() -> str:
    return json.dumps({s.name: s.version for s in TABLES.values()}, sort_keys=True)


def remove_stale_temporaries(folder: Path, *, now: float | None = None) -> list[Path]:
    """Delete the temporary files of catalog builds that were killed (``.catalog.duckdb.*.tmp``
    and their ``.wal``) once they are :data:`STALE_TEMP_SECONDS` old; returns those deleted."""
    cutoff = (now if now is not None else time.time()) - STALE_TEMP_SECONDS
    removed = []
    for p in folder.glob(f".{CATALOG_FILE}.*.tmp*"):
        try:
            if p.stat().st_mtime < cutoff:
                p.unlink()
                removed.append(p)
        except FileNotFoundError:  # another build removed it first
            continue
    return removed


def _updatable(store: Store, shown: tuple | None) -> dict[str, int | None] | None:
    """The table versions a (current-state) catalog whose verified state row is ``shown``
    (:func:`~storage.catalog_seal.sealed`; None: its seal does not verify) shows, when it can be
    brought to another state of the same lake by replacing the views of the tables that changed:
    it was built from ``store`` by this code, with these schema versions, not as of a round.
    None otherwise."""
    if shown is None or (shown[0], shown[2], shown[3], shown[4]) != (store.uri, _versions_json(), code_id(), None):
        return None
    return json.loads(shown[5])


def _file_listing(tables: Iterable[TableState]) -> pa.Table:
    files = [(t, f) for t in tables for f in t.files]
    return pa.table({
        "table_name": pa.array([t.name for t, _ in files], pa.string()),
        "round": pa.array([f.round for _, f in files], pa.int32()),
        "path": pa.array([f.uri for _, f in files], pa.string()),
        "rows": pa.array([f.rows for _, f in files], pa.int64()),
        "bytes": pa.array([f.bytes for _, f in files], pa.int64()),
        "table_version": pa.array([t.version for t, _ in files], pa.int64()),
        "modified": pa.array([f.modified for _, f in files], pa.timestamp("us", tz="UTC")),
    })


def _write_catalog(con: duckdb.DuckDBPyConnection, store: Store, state: LakeState, shown: dict[str, int | None] | None,
                   key: bytes) -> tuple:
    """Make the catalog open on ``con`` show ``state``: every view and table created (``shown``
    None: an empty file; a table with :data:`PRIVATE_COLUMNS` is copied, not viewed), or only the
    views and ``lake_files`` rows of the tables whose version differs from ``shown`` replaced (the derived views name the table views, so DuckDB binds
    them to the new ones at query time); then sealed with ``key`` (:func:`~storage.catalog_seal.seal`). Returns
    the state row it sealed (:data:`~storage.catalog_seal.STATE_COLUMNS`). A table counts as
    changed when its data files differ too: a lake made again at the same place reaches the same
    versions with other files."""
    listed = {} if shown is None else dict(
        con.execute(f"SELECT table_name, list(path ORDER BY path) FROM {FILES_TABLE} GROUP BY table_name").fetchall())
    changed = [spec for spec in TABLES.values()
               if shown is None or shown.get(spec.name) != state.versions.get(spec.name)
               or listed.get(spec.name, []) != sorted(f.uri for f in state.table(spec.name).files)]
    for spec in changed:
        kind = "TABLE" if spec.name in PRIVATE_COLUMNS else "VIEW"  # a copy: the sandbox cannot open its files
        con.execute(f'CREATE OR REPLACE {kind} "{spec.name}" AS {table_view_sql(spec, state.table(spec.name))}')
    if shown is None:
        for name, sql in DERIVED_VIEWS.items():
            con.execute(f'CREATE VIEW "{name}" AS {sql}')
    con.register("_files", _file_listing(state.table(spec.name) for spec in changed))
    others = f"table_name NOT IN ({', '.join(sql_string(spec.name) for spec in changed)})" if changed else "TRUE"
    kept = "" if shown is None else f"SELECT * FROM {FILES_TABLE} WHERE {others} UNION ALL "
    con.execute(f"CREATE OR REPLACE TABLE {FILES_TABLE} AS SELECT * FROM ({kept}SELECT * FROM _files) ORDER BY table_name, round, path")
    con.unregister("_files")
    row = (store.uri, state.state_id, _versions_json(), code_id(), state.as_of_round, json.dumps(state.versions, sort_keys=True),
           state.log_fingerprint)
    casts = {"as_of_round": "CAST(? AS INTEGER)"}
    con.execute(
        f"CREATE OR REPLACE TABLE {STATE_TABLE} AS SELECT "
        + ", ".join(f"{casts.get(c, '?')} AS {c}" for c in STATE_COLUMNS) + ", ? AS built_at, ? AS seal",
        [*row, datetime.now(timezone.utc).isoformat(), seal(key, definitions(con), row)],
    )
    return row


def _copy(store: Store, target: Path, tmp: Path) -> dict[str, int | None] | None:
    """Copy the catalog at ``target`` to ``tmp`` and return the table versions it shows, when it
    can be updated (:func:`_updatable`; its state row taken as this process verified or built it
    for the very file copied, else read and verified from the copy); None when there is no
    catalog there or it cannot (the copy is removed: the build starts from an empty file)."""
    try:
        copied = file_identity(target)  # a catalog is replaced whole, never rewritten in place: the same
        shutil.copyfile(target, tmp)  # identity before and after the copy means the copy is of that one file
        known = known_state(target, copied) if file_identity(target) == copied else None
        if known is None:
            with catalog_connection(tmp, read_only=True) as con:  # its views are not bound: no filesystem needed
                known = sealed(con, target)
        shown = _updatable(store, known)
    except (OSError, duckdb.Error):  # none there (or replaced as it was copied), or not a DuckDB file
        shown = None
    if shown is None:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.wal").unlink(missing_ok=True)
    return shown


def build_catalog(store: Store, state: LakeState, target: Path | None = None) -> Path:
    """Build the catalog for ``state`` at ``target`` (default: the lake's catalog path) and
    move it into place; returns its path.

    For the lake's current state, the catalog already at ``target`` is copied and updated when it
    can be (:func:`_updatable`): only the tables a commit changed are written again, so a
    commit does not pay for every view (a third of a second on a lake of 100,000 documents).
    The copy is of a complete file (catalogs are only ever replaced whole), and what it shows is
    read from the copy itself."""
    target = target or store.catalog_path
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(target.parent)
    except OSError as exc:
        raise LakeError(f"lake {store.uri}: cannot write the catalog folder {target.parent}: {exc.strerror}") from None
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        shown = _copy(store, target, tmp) if state.as_of_round is None else None
        with catalog_connection(tmp, read_only=False, filesystem=store.duckdb_filesystem()) as con:
            row = _write_catalog(con, store, state, shown, seal_key(target.parent))
        built = os.open(tmp, os.O_RDONLY)
        try:
            os.replace(tmp, target)
            remember_shown(target, stat_identity(os.fstat(built)), row)  # after the move, which changes its ctime
        finally:
            os.close(built)
    except duckdb.Error as exc:
        raise LakeError(f"lake {store.uri}: cannot build the catalog: {first_line(exc)}") from None
    except OSError as exc:
        raise LakeError(f"lake {store.uri}: cannot write the catalog {target}: {exc.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.wal").unlink(missing_ok=True)
    return target


def catalog_is_current(store: Store, state: LakeState, path: Path | None = None) -> bool:
    """Whether the catalog file at ``path`` (default: the lake's) exists, shows exactly ``state``
    and was built by this code (:func:`~storage.catalog_seal.code_id`: after an upgrade the views are rebuilt before
    the next query, not left as the earlier code defined them until the lake changes), with the
    listing of the lake's Delta logs that ``state`` was read with (its ``log_fingerprint``, which
    :func:`~storage.catalog_seal.current_catalog` checks)."""
    shown = shown_state(path or store.catalog_path)
    expected = (store.uri, state.state_id, _versions_json(), code_id(), state.as_of_round, json.dumps(state.versions, sort_keys=True),
                state.log_fingerprint)
    return shown == expected


def private_catalog_dir(store: Store) -> Path:
    """A folder of this user's own for catalogs of ``store`` it cannot keep at the usual place
    (read-only lake folder, time travel): ``<tmp>/grace-catalogs-<uid>/<lake hash>``, created
    private (mode 700); a folder there that another user owns or can write is refused. Its time
    is set to now (the lake's last use), and the first call of a process prunes the folder
    (:func:`prune_private_catalogs`)."""
    uid = os.getuid()
    base = Path(tempfile.gettempdir()) / f"grace-catalogs-{uid}"
    try:
        base.mkdir(mode=0o700, exist_ok=True)
        st = base.stat()
    except OSError as exc:
        raise LakeError(f"lake {store.uri}: cannot create the private catalog folder {base}: {exc.strerror}") from None
    if st.st_uid != uid or st.st_mode & 0o077:
        raise LakeError(f"lake {store.uri}: the catalog folder {base} is not private to this user (owner or mode); remove it")
    folder = base / hashlib.sha256(store.uri.encode()).hexdigest()[:16]
    folder.mkdir(mode=0o700, exist_ok=True)
    os.utime(folder)
    if base not in _PRUNED:
        _PRUNED.add(base)
        prune_private_catalogs(base)
    return folder


def prune_private_catalogs(base: Path, *, now: float | None = None) -> list[Path]:
    """Remove from ``base`` (``<tmp>/grace-catalogs-<uid>``) the folders of the lakes whose
    private catalogs no process has used for :data:`PRIVATE_KEEP_SECONDS` (a folder's time is
    set at each use: :func:`private_catalog_dir`), with their catalogs; returns the folders
    removed. A folder that vanishes meanwhile (another process pruning) is skipped."""
    cutoff = (now if now is not None else time.time()) - PRIVATE_KEEP_SECONDS
    removed = []
    for folder in sorted(base.iterdir()):
        try:
            if folder.is_symlink() or not folder.is_dir() or folder.stat().st_mtime >= cutoff:
                continue
        except FileNotFoundError:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _writable(folder: Path) -> bool:
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return os.access(probe, os.W_OK | os.X_OK)


def ensure_catalog(store: Store, state: LakeState) -> Path:
    """The path of a catalog showing ``state``, rebuilt first if it is missing or behind.

    The lake's own catalog when ``state`` is the current one and its folder is writable;
    otherwise a catalog in :func:`private_catalog_dir` (a time-travel state has one per
    state there)."""
    if state.as_of_round is not None:
        path = private_catalog_dir(store) / f"asof-round-{state.as_of_round}-{state.state_id[:16]}.duckdb"
        return path if catalog_is_current(store, state, path) else build_catalog(store, state, path)
    main = store.catalog_path
    if catalog_is_current(store, state, main):
        return main
    if _writable(main.parent):
        return build_catalog(store, state, main)
    fallback = private_catalog_dir(store) / PRIVATE_CATALOG_FILE
    return fallback if catalog_is_current(store, state, fallback) else build_catalog(store, state, fallback)
