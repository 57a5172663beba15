"""The filesystem DuckDB reads an S3 lake through: fsspec's wrapper of Arrow's S3 client, with
what one request said of a data file kept for the life of the process.

DuckDB asks for the size and time of a Parquet file several times per query (binding a view,
planning, each scan), and fsspec's wrapper makes each ask one HEAD request: four or more
requests for every file a query reads, besides the reads themselves. A data file of a Delta
table is never rewritten under its name (every write makes a new file, named by a new UUID), so
what one HEAD said of it holds while it exists; a file removed or replaced since fails its read.
Only Parquet files are kept (at most :data:`KEPT`, the least recently used go); any other path
is asked afresh."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsspec.implementations.arrow import ArrowFSWrapper

from storage.log_listing import ListedCache

if TYPE_CHECKING:
    from storage.filesystem import S3Store

KEPT = 20_000
"""How many data files' sizes and times a process keeps (a few hundred bytes each)."""
_INFOS: ListedCache[dict[str, Any]] = ListedCache(KEPT)  # under no listing (digest ""): a data file's answer never changes


class DataFileFS(ArrowFSWrapper):
    """The fsspec filesystem DuckDB opens the S3 lake ``store``'s files through, asking S3 once
    per process for a data file's size and time."""

    cachable = False  # one per store, not fsspec's instance per argument list

    def __init__(self, store: S3Store, **kwargs: Any) -> None:
        super().__init__(store.arrow_fs, **kwargs)
        self._store = store

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        if not path.endswith(".parquet"):
            return super().info(path, **kwargs)
        kept = _INFOS.get(self._store, path, "")
        if kept is None:
            kept = super().info(path, **kwargs)  # FileNotFoundError when it is not there: nothing kept
            _INFOS.put(self._store, path, "", kept)
        return dict(kept)

    def modified(self, path: str) -> Any:
        return self.info(path)["mtime"]
