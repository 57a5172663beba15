"""The lake as the flows use it: open it from the settings, commit tables, read them back,
query the catalog.

    lake = Lake.open(settings)                     # settings: any LakeConfig
    lake.commit("build/round=1/chunk=ab12", {"claims": claims_df, "edges": edges_df})
    edges = lake.read("edges", rounds=[0, 1])      # a polars DataFrame
    status = lake.query("SELECT * FROM claim_status")

Commits are atomic and idempotent (:mod:`storage.commit`); the catalog is rebuilt after each new
commit and before any query that finds it behind the lake (:mod:`storage.catalog`). Open the
lake once per task (or pickle it: it travels as its settings).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds

from grace_core.errors import LakeError
from storage.catalog import build_catalog, ensure_catalog
from storage.commit import CommitResult, commit_tables
from storage.config import LakeConfig
from storage.filesystem import LocalStore, Store, open_store
from storage.manifest import LakeState, Manifest, checked_files
from storage.readonly_sql import run_readonly
from storage.schemas import table_spec


class Lake:
    """One lake root (local folder or S3 prefix). Cheap to open; safe to share between tasks
    of one process, and any number of processes may commit to the same lake at once."""

    def __init__(self, store: Store, config: LakeConfig) -> None:
        self.store = store
        self.config = config
        self.manifest = Manifest(store)

    @classmethod
    def open(cls, config: LakeConfig, *, must_exist: bool = False) -> Lake:
        """Open the lake of ``config``. With ``must_exist``, a local lake folder that does not
        exist is an error (readers); writers create it on their first commit."""
        store = open_store(config)
        if must_exist and isinstance(store, LocalStore) and not store.root.is_dir():
            raise LakeError(f"no lake at {store.uri} (the folder does not exist; ingest a batch first)")
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
        """The committed state now."""
        return self.manifest.state()

    def commit(self, key: str, tables: Mapping[str, pl.DataFrame | pa.Table]) -> CommitResult:
        """Commit ``tables`` (name → rows) as the unit of work ``key``, all or nothing; a key
        committed before is skipped (``created`` False). Refreshes the catalog."""
        result = commit_tables(self.store, self.manifest, key, tables)
        if result.created:
            state = self.manifest.state()
            self.manifest.maybe_checkpoint(state)
            build_catalog(self.store, state)
        return result

    def is_committed(self, key: str) -> bool:
        """Whether the unit of work ``key`` has been committed."""
        return self.manifest.record(key) is not None

    def read_arrow(
        self, table: str, *, rounds: Iterable[int] | None = None, columns: Sequence[str] | None = None,
        filter: ds.Expression | None = None,
    ) -> pa.Table:
        """Committed rows of ``table`` as Arrow, optionally only some rounds (pruned by file,
        without opening the others), some ``columns`` and rows matching ``filter``
        (a :mod:`pyarrow.dataset` expression, e.g. ``ds.field("doc_id").isin(ids)``)."""
        spec = table_spec(table)
        files = checked_files(self.manifest.state(), spec, self.uri, rounds)
        dataset = ds.dataset(
            [self.store.arrow_path(f.path) for f in files], schema=spec.schema, format="parquet",
            filesystem=self.store.arrow_fs,
        )
        try:
            return dataset.to_table(columns=list(columns) if columns else None, filter=filter)
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"lake {self.uri}: cannot read table {table}: {str(exc).splitlines()[0]}") from None

    def read(
        self, table: str, *, rounds: Iterable[int] | None = None, columns: Sequence[str] | None = None,
        filter: ds.Expression | None = None,
    ) -> pl.DataFrame:
        """Committed rows of ``table`` as a polars DataFrame (see :meth:`read_arrow`)."""
        return pl.from_arrow(self.read_arrow(table, rounds=rounds, columns=columns, filter=filter))

    def catalog(self) -> Path:
        """Path of the DuckDB catalog file, rebuilt first if it is behind the lake."""
        return ensure_catalog(self.store, self.manifest.state())

    def query_arrow(self, sql: str) -> pa.Table:
        """Run one read-only ``SELECT`` over the catalog's views; the result as Arrow. The statement
        sees only the lake's tables and views, within the ``sql_*`` limits (:mod:`storage.readonly_sql`)."""
        catalog = ensure_catalog(self.store, self.manifest.state())
        return run_readonly(
            catalog, sql, readable=[self.store.file_uri("tables") + "/"],
            filesystem=self.store.duckdb_filesystem(), config=self.config,
        )

    def query(self, sql: str) -> pl.DataFrame:
        """Run one read-only ``SELECT`` over the catalog's views; the result as polars."""
        return pl.from_arrow(self.query_arrow(sql))
