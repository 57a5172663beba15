"""The model-call cache and cost ledger over the lake's ``llm_calls`` table.

:class:`LakeCallCache` answers ``get`` from the ``ok`` calls already committed and from the
ones recorded since; ``put`` buffers records until :meth:`LakeCallCache.pending` hands them to
the caller's commit, so the calls of a unit of work are published with its results, all or
nothing.

Committed calls are read by key, never as a whole table: the cache first reads one column,
the 64-bit hashes of the keys that have an ``ok`` record (8 bytes per call, in a sorted array),
and then, for a key found there, only that key's rows (a filtered read). A key not in the
index costs no read at all; a hash collision only costs a read that finds nothing.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pyarrow.dataset as ds

from grace_core.models.cache import CallRecord
from storage.lake import Lake

_FIELDS = [f.name for f in dataclasses.fields(CallRecord)]


def _key_hashes(keys: pl.Series) -> np.ndarray:
    return keys.hash(seed=0).to_numpy()


def _record(row: dict) -> CallRecord:
    row = {k: row[k] for k in _FIELDS}
    row["attempt"] = row["attempt"] or 0
    row["prompt_tokens"] = row["prompt_tokens"] or 0
    row["completion_tokens"] = row["completion_tokens"] or 0
    row["latency_s"] = row["latency_s"] or 0.0
    return CallRecord(**row)


class LakeCallCache:
    """A :class:`~grace_core.models.cache.CallCache` backed by ``llm_calls``."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self._index: np.ndarray | None = None  # sorted hashes of the committed keys with an ok record
        self._committed: dict[str, CallRecord | None] = {}  # keys looked up so far
        self._recorded: dict[str, CallRecord] = {}  # ok records of this run
        self._new: list[CallRecord] = []

    def _committed_ok(self, key: str) -> CallRecord | None:
        if key in self._committed:
            return self._committed[key]
        if self._index is None:
            keys = self.lake.read("llm_calls", columns=["key"], filter=ds.field("outcome") == "ok")["key"]
            self._index = np.unique(_key_hashes(keys))
        h = _key_hashes(pl.Series([key], dtype=pl.Utf8))[0]
        at = int(np.searchsorted(self._index, h))
        found = None
        if at < len(self._index) and self._index[at] == h:
            rows = self.lake.read("llm_calls", filter=(ds.field("key") == key) & (ds.field("outcome") == "ok"))
            if rows.height:
                found = _record(rows.sort("created_at", maintain_order=True).row(-1, named=True))
        self._committed[key] = found
        return found

    def spent(self, round_id: int) -> float:
        """USD of the calls of ``round_id`` committed so far."""
        return float(self.lake.read("llm_calls", rounds=[round_id], columns=["cost_usd"])["cost_usd"].sum() or 0.0)

    def get(self, key: str) -> CallRecord | None:
        """The latest ``ok`` record of ``key``, recorded in this run or committed."""
        return self._recorded.get(key) or self._committed_ok(key)

    def put(self, record: CallRecord) -> None:
        """Buffer ``record``; an ``ok`` one answers its key from now on."""
        self._new.append(record)
        if record.outcome == "ok":
            self._recorded[record.key] = record

    def pending(self) -> pl.DataFrame:
        """The records buffered since the last call, as ``llm_calls`` rows (and forget them)."""
        rows, self._new = self._new, []
        return pl.DataFrame([dataclasses.asdict(r) for r in rows], schema={
            "key": pl.Utf8, "role": pl.Utf8, "round": pl.Int32, "model": pl.Utf8, "attempt": pl.Int32, "request": pl.Utf8,
            "response": pl.Utf8, "prompt_tokens": pl.Int64, "completion_tokens": pl.Int64, "cost_usd": pl.Float64,
            "latency_s": pl.Float64, "outcome": pl.Utf8, "error": pl.Utf8, "created_at": pl.Datetime("us", "UTC"),
        })
