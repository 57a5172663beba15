"""The model-call cache and cost ledger over the lake's ``llm_calls`` table.

:class:`LakeCallCache` answers ``get`` from the ``ok`` calls already committed (loaded once)
and from the ones recorded since; ``put`` buffers records until :meth:`LakeCallCache.pending`
hands them to the caller's commit, so the calls of a unit of work are published with its
results, all or nothing.
"""

from __future__ import annotations

import dataclasses

import polars as pl

from grace_core.models.cache import CallRecord
from storage.lake import Lake

_FIELDS = [f.name for f in dataclasses.fields(CallRecord)]


class LakeCallCache:
    """A :class:`~grace_core.models.cache.CallCache` backed by ``llm_calls``."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self._ok: dict[str, CallRecord] | None = None
        self._new: list[CallRecord] = []

    def _load(self) -> dict[str, CallRecord]:
        if self._ok is None:
            rows = self.lake.read("llm_calls").filter(pl.col("outcome") == "ok").sort("created_at")
            self._ok = {}
            for r in rows.select(_FIELDS).iter_rows(named=True):
                r["attempt"] = r["attempt"] or 0
                r["prompt_tokens"] = r["prompt_tokens"] or 0
                r["completion_tokens"] = r["completion_tokens"] or 0
                r["latency_s"] = r["latency_s"] or 0.0
                self._ok[r["key"]] = CallRecord(**r)
        return self._ok

    def spent(self, round_id: int) -> float:
        """USD of the calls of ``round_id`` committed so far."""
        return float(self.lake.read("llm_calls", rounds=[round_id], columns=["cost_usd"])["cost_usd"].sum() or 0.0)

    def get(self, key: str) -> CallRecord | None:
        """The latest ``ok`` record of ``key``, committed or recorded in this run."""
        return self._load().get(key)

    def put(self, record: CallRecord) -> None:
        """Buffer ``record``; an ``ok`` one answers its key from now on."""
        self._new.append(record)
        if record.outcome == "ok":
            self._load()[record.key] = record

    def pending(self) -> pl.DataFrame:
        """The records buffered since the last call, as ``llm_calls`` rows (and forget them)."""
        rows, self._new = self._new, []
        return pl.DataFrame([dataclasses.asdict(r) for r in rows], schema={
            "key": pl.Utf8, "role": pl.Utf8, "round": pl.Int32, "model": pl.Utf8, "attempt": pl.Int32, "request": pl.Utf8,
            "response": pl.Utf8, "prompt_tokens": pl.Int64, "completion_tokens": pl.Int64, "cost_usd": pl.Float64,
            "latency_s": pl.Float64, "outcome": pl.Utf8, "error": pl.Utf8, "created_at": pl.Datetime("us", "UTC"),
        })
