"""The lake as the flows use it: open it from the settings, commit tables, read them back,
query the catalog.

    lake = Lake.open(settings)                     # settings: any LakeConfig
    lake.commit("build/round=1/chunk=ab12", {"claims": claims_df, "edges": edges_df})
    edges = lake.read("edges", rounds=[0, 1])      # a polars DataFrame
    status = lake.query("SELECT * FROM claim_status")
    before = lake.query("SELECT * FROM claim_status", as_of_round=1)   # time travel

Tables are Delta tables (:mod:`storage.delta_tables`); commits are idempotent and safe
between concurrent writers (:mod:`storage.commit`); the catalog is rebuilt after each new
commit and before any query that finds it behind the lake (:mod:`storage.catalog`). Open the
lake once per task (or pickle it: it travels as its settings).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
from deltalake.exceptions import DeltaError

from grace_core.errors import InvalidTable, LakeError, first_line
from storage.catalog import ensure_catalog
from storage.catalog_seal import table_folders
from storage.commit import CommitResult, commit_tables
from storage.commit_log import LOG_REL, CommitLog
from storage.config import LakeConfig
from storage.delta_tables import DeltaTables, LakeState, read_by_key, snapshot_dataset, table_rel
from storage.filesystem import LocalStore, Store, open_store
from storage.log_listing import ListedCache, delta_log, lake_listing
from storage.migrate import refuse_unmigrated
from storage.readonly_sql import run_readonly
from storage.schemas import ROUND, TABLES, table_spec
from storage.sql_access import SqlAccess

_STATES: ListedCache[tuple[LakeState, dict[str, int]]] = ListedCache(16)
"""Per lake, the last state this process read of it and the table versions its commit log
recorded then, under the lake's listing (:func:`~storage.log_listing.lake_listing`, whose digest
tells a catalog current), shared by every lake object: a lake whose Delta logs list as they did
then holds what it held then."""
LOST_CHECKS = 3
"""How many times :meth:`Lake.state` reads a table that is behind the commit log before it
refuses the lake (each under a new listing: a commit may land between a listing and the read of
the commit log that follows it)."""


class Lake:
    """One lake root (local folder or S3 prefix). Cheap to open; safe to share between tasks
    of one process, and any number of processes may commit to the same lake at once."""

    def __init__(self, store: Store, config: LakeConfig) -> None:
        self.store = store
        self.config = config
        self.tables = DeltaTables(store)
        self.log = CommitLog(self.tables)

    @classmethod
    def open(cls, config: LakeConfig, *, must_exist: bool = False, migrating: bool = False) -> Lake:
        """Open the lake of ``config``. With ``must_exist``, a local lake folder that does not
        exist is an error (readers); writers create it on their first commit. A lake written
        in the format of earlier GRACE versions is refused until ``grace migrate`` converted it
        (``migrating``: the migration's own lake)."""
        store = open_store(config)
        if must_exist and isinstance(store, LocalStore) and not store.root.is_dir():
            raise LakeError(f"no lake at {store.uri} (the folder does not exist; ingest a batch first)")
        if not migrating:
            refuse_unmigrated(store)
        return cls(store, LakeConfig(**{name: getattr(config, name) for name in LakeConfig.model_fields}))

    def __reduce__(self) -> tuple:
        """Pickled as its settings, so a lake can be handed to tasks in other processes (Dask
        workers): it is reopened there, with that machine's credentials."""
        return (Lake.open, (self.config,))

    @property
    def uri(self) -> str:
        """The lake root as shown to people: an absolute folder or ``s3://bucket/prefix``."""
        return self.store.uri

    def state(self) -> LakeState:
        """Every table at its current version; :class:`LakeError` naming the table when one is
        older than the commit log says it is (:meth:`lost_tables`). The tables are read as the
        listing of their logs taken first showed them, and the commit log after it: a table
        behind the commit log may be one a commit wrote in between, so it is read again under a
        new listing, and refused only when it is behind :data:`LOST_CHECKS` times."""
        for _ in range(LOST_CHECKS):
            # the listing first: a catalog of this state must not vouch for a commit that lands as it is read
            listed = lake_listing(self.store)
            known = _STATES.get(self.store, "", listed.digest)
            if known is not None:
                self.log.learn(known[1])  # what read_arrow checks a table against (lost_tables)
                return known[0]
            recorded = self.log.latest_versions()  # read first: a commit records a version after writing it
            state = self.tables.state(listed=listed)
            if not self._lost(recorded, state.versions):
                break
        else:
            self._refuse_lost(recorded, state.versions)
        state = dataclasses.replace(state, log_fingerprint=listed.digest)
        found = {delta_log(LOG_REL): self.log.version} | {delta_log(table_rel(name)): v for name, v in state.versions.items()}
        if all(listed.newest.get(log) == version for log, version in found.items()):  # not a commit that landed since the listing
            _STATES.put(self.store, "", listed.digest, (state, recorded))
        return state

    def lost_tables(self) -> dict[str, str]:
        """Tables the commit log says were written that are missing or older than their last
        recorded version (their ``_delta_log``, or the whole folder, removed or rolled back),
        with what was found: ``{name: reason}``. Every reader and writer refuses such a lake
        (:meth:`state`, which every query and commit takes; :meth:`read_arrow`, against the
        commit log as this process last read it), where a missing table would otherwise read as
        empty and a round would run on as if nothing had been stored."""
        recorded = self.log.latest_versions()
        return self._lost(recorded, self.tables.state().versions)

    @staticmethod
    def _lost(recorded: Mapping[str, int], versions: Mapping[str, int | None]) -> dict[str, str]:
        out = {}
        for name, version in sorted(recorded.items()):
            if name not in versions:
                continue  # a table of a later GRACE: refused elsewhere
            now = versions[name]
            if now is None:
                out[name] = f"missing (its Delta log or folder is gone; the commit log records version {version})"
            elif now < version:
                out[name] = f"at version {now}, older than version {version} the commit log records (part of its Delta log is gone)"
        return out

    def _refuse_lost(self, recorded: Mapping[str, int], versions: Mapping[str, int | None]) -> None:
        lost = self._lost(recorded, versions)
        if lost:
            name, reason = next(iter(lost.items()))
            more = f" (and {len(lost) - 1} more table{'s' if len(lost) > 2 else ''})" if len(lost) > 1 else ""
            raise LakeError(f"lake {self.uri}: table {name} is {reason}{more}: nothing is read or written until it is "
                            "restored from a backup (grace check lists the damage)")

    def state_as_of_round(self, round_: int) -> LakeState:
        """The tables as they were when round ``round_``'s last commit landed (later rounds'
        partitions left out)."""
        return self.tables.state_at(self.log.versions_as_of_round(round_), round_)

    def commit(self, key: str, tables: Mapping[str, pl.DataFrame | pa.Table]) -> CommitResult:
        """Commit ``tables`` (name → rows) as the unit of work ``key``; a key committed before
        is skipped (``created`` False). Refreshes the catalog. A lake that lost a table
        (:meth:`lost_tables`) is refused before anything is written."""
        self.state()  # a lake that lost a table takes no new rows (LakeError naming it)
        result = commit_tables(self.tables, self.log, key, tables)
        if result.created:
            ensure_catalog(self.store, self.state())
        return result

    def is_committed(self, key: str) -> bool:
        """Whether the unit of work ``key`` has been committed."""
        return self.log.record(key) is not None

    def version_before(self, table: str, key: str) -> int | None:
        """The version of ``table`` that the unit of work ``key`` found: the latest version a
        commit made before ``key``'s recorded (None: no commit before it wrote the table).
        Commits are ordered by the time they were recorded (``committed_at``, kept by
        ``grace migrate``), so this is what a reader saw when ``key``'s work began, give or take
        a commit landing while that work ran."""
        records = self.log.records()
        if key not in records:
            raise LakeError(f"lake {self.uri}: no commit {key!r}")
        mark = (records[key].committed_at, key)
        found = [r.tables[table].version for r in records.values() if table in r.tables and (r.committed_at, r.key) < mark]
        return max(found) if found else None

    def read_arrow(
        self, table: str, *, rounds: Iterable[int] | None = None, columns: Sequence[str] | None = None,
        filter: ds.Expression | None = None, doc_ids: Iterable[str] | Mapping[int, Iterable[str]] | None = None,
        before: str | None = None,
    ) -> pa.Table:
        """Rows of ``table`` at its current version as Arrow (with ``before``, a commit key: as that
        unit of work found it, :meth:`version_before`), optionally only some rounds
        (pruned by partition, without opening the others), some ``columns``, rows matching
        ``filter`` (a :mod:`pyarrow.dataset` expression, e.g. ``ds.field("source_kind") == "prior"``)
        and rows of the documents ``doc_ids``, read by key
        (:func:`storage.delta_tables.read_by_key`: only the files and row groups that may hold them).
        ``doc_ids`` may map rounds to the documents sought in each (the rounds default to its
        keys); rows of other documents in the same files may come too (:meth:`read_at` keeps
        the pairs asked for)."""
        if isinstance(doc_ids, Mapping) and rounds is None:
            rounds = doc_ids.keys()
        spec = table_spec(table)
        names = list(columns) if columns else spec.schema.names
        unknown = [c for c in names if c not in spec.schema.names]
        if unknown:
            raise InvalidTable(f"table {table}: unknown column(s) {', '.join(unknown)} (columns: {', '.join(spec.schema.names)})")
        schema = pa.schema([spec.schema.field(c) for c in names])
        wanted = None
        if rounds is not None:
            if not spec.partitioned:
                raise InvalidTable(f"table {table} is not stored by round; read it without rounds=")
            wanted = sorted({int(r) for r in rounds})
            if not wanted:
                return schema.empty_table()
        if before is not None:
            version = self.version_before(table, before)
            if version is None:
                return schema.empty_table()
            dt = self.tables.table(spec, version)
            if dt is None:
                raise LakeError(f"lake {self.uri}: table {table} is missing, the commit log records version {version}")
        else:
            dt = self.tables.table(spec)
            if dt is None:  # never written, or lost: the commit log tells. It is read before a second look at
                recorded = self.log.latest_versions()  # the table: a writer may have made and recorded it meanwhile
                dt = self.tables.table(spec)
                if dt is None:
                    self._refuse_lost(recorded, {spec.name: None})
                    return schema.empty_table()
            self._refuse_lost(self.log.known_versions(), {spec.name: dt.version()})  # older than the log said when last read
        try:
            dataset = snapshot_dataset(dt, self.store, table_rel(spec.name), spec, rounds=wanted)
            if doc_ids is not None:
                return read_by_key(dt, dataset, "doc_id", doc_ids, columns=names, filter=filter).cast(schema)
            return dataset.to_table(columns=names, filter=filter).cast(schema)
        except (OSError, pa.ArrowException, DeltaError) as exc:
            raise LakeError(f"lake {self.uri}: cannot read table {table}: {first_line(exc)}") from None

    def read(
        self, table: str, *, rounds: Iterable[int] | None = None, columns: Sequence[str] | None = None,
        filter: ds.Expression | None = None, doc_ids: Iterable[str] | None = None, before: str | None = None,
    ) -> pl.DataFrame:
        """Rows of ``table`` as a polars DataFrame (see :meth:`read_arrow`)."""
        return pl.from_arrow(self.read_arrow(table, rounds=rounds, columns=columns, filter=filter, doc_ids=doc_ids, before=before))

    def read_at(self, table: str, at: pl.DataFrame, *, columns: Sequence[str]) -> pl.DataFrame:
        """``columns`` of the rows of ``table`` (stored by round) of each ``doc_id`` of ``at``
        (``doc_id, round``) at its ``round``: each document's rows of that partition only, read
        by key without opening the files of the document's other rounds (a document's latest
        scores cost one partition, however long its history)."""
        names = list(dict.fromkeys([*columns, "doc_id", ROUND]))
        by_round = {int(r): group["doc_id"].to_list() for (r,), group in at.group_by(ROUND)}
        rows = self.read(table, columns=names, doc_ids=by_round)
        pairs = at.select("doc_id", pl.col(ROUND).cast(rows.schema[ROUND])).unique()
        return rows.join(pairs, on=["doc_id", ROUND], how="semi").select(columns)

    def catalog(self) -> Path:
        """Path of the DuckDB catalog file, rebuilt first if it is behind the lake."""
        return ensure_catalog(self.store, self.state())

    def sql_access(self, as_of_round: int | None = None) -> SqlAccess:
        """The catalog a query of the lake reads (as it was when round ``as_of_round``'s last commit
        landed, else as it is; rebuilt first if behind) and the folders its sandbox may open."""
        state = self.state() if as_of_round is None else self.state_as_of_round(as_of_round)
        return SqlAccess(ensure_catalog(self.store, state), table_folders(self.store.file_uri("tables"), tuple(TABLES)),
                         self.store.duckdb_filesystem())

    def query_arrow(self, sql: str, *, as_of_round: int | None = None) -> pa.Table:
        """Run one read-only ``SELECT`` over the catalog's views; the result as Arrow. The statement
        sees only the lake's tables and views, within the ``sql_*`` limits (:mod:`storage.readonly_sql`).
        With ``as_of_round``, over the lake as it was when that round's last commit landed. (A query a
        person types runs in a child process the OS bounds: ``grace sql``, :func:`~storage.readonly_sql.run_isolated`.)"""
        access = self.sql_access(as_of_round)
        return run_readonly(access.catalog, sql, readable=access.readable, filesystem=access.filesystem, config=self.config)

    def query(self, sql: str, *, as_of_round: int | None = None) -> pl.DataFrame:
        """Run one read-only ``SELECT`` over the catalog's views; the result as polars (see :meth:`query_arrow`)."""
        return pl.from_arrow(self.query_arrow(sql, as_of_round=as_of_round))
