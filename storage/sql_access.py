"""Where a query of the lake runs: the catalog it reads and the folders its sandbox may open.

``grace sql`` asks this first (:func:`sql_access`). A lake (local or S3) whose own catalog shows
it as it is (:func:`storage.catalog_seal.current_catalog`: its seal, its code and a listing of
the Delta logs) is queried without reading a Delta table; any other state or catalog goes
through :meth:`storage.lake.Lake.sql_access`, which reads the lake (refusing one that lost a
table) and rebuilds the catalog first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage.catalog_seal import current_catalog
from storage.config import LakeConfig
from storage.filesystem import open_store


@dataclass(frozen=True)
class SqlAccess:
    """A catalog to query, the folders a query of it may open (:func:`storage.catalog_seal.table_folders`)
    and the filesystem its files are read through (None: the local one)."""

    catalog: Path
    readable: list[str]
    filesystem: Any | None


def sql_access(config: LakeConfig, *, as_of_round: int | None = None) -> SqlAccess:
    """How to query the lake of ``config`` (as of round ``as_of_round``, else as it is now)."""
    store = open_store(config)
    if as_of_round is None:
        current = current_catalog(store)
        if current is not None:
            return SqlAccess(current[0], current[1], store.duckdb_filesystem())
    from storage.lake import Lake  # here: the Delta reader, polars and pyarrow, for a lake its catalog does not show

    return Lake.open(config, must_exist=True).sql_access(as_of_round)
