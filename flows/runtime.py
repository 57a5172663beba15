"""Per-run plumbing shared by the flows: the lake, model roles with the lake's call cache, and
the current time. Nothing here runs at import time."""

from __future__ import annotations

import contextlib
import threading
from datetime import datetime, timezone

import polars as pl

from flows.settings import GraceSettings
from grace_core.models.factory import ModelRoles, build_roles, embeds_offline
from grace_core.models.offline_embedder import OfflineEmbedder
from storage.lake import Lake
from storage.llm_cache import LakeCallCache


def open_lake(settings: GraceSettings) -> Lake:
    return Lake.open(settings)


def roles_with_cache(settings: GraceSettings, lake: Lake, round_id: int) -> tuple[ModelRoles, LakeCallCache]:
    """Model roles whose litellm calls are answered from, and recorded into, the lake; the
    round's spend starts at what its committed calls already cost (the cap is per round)."""
    cache = LakeCallCache(lake)
    roles = build_roles(settings, cache)
    roles.start_round(round_id, cache.spent(round_id) if roles.client is not None and settings.spend_cap_usd is not None else 0.0)
    return roles, cache


def warm_embedder(settings: GraceSettings) -> threading.Thread | None:
    """Start loading the process's offline embedder (≈ 1.5 CPU s: torch and the model) on a thread
    when the round's chunk tasks run in this process (the thread runner) and embed offline, so
    the round's first stages and reads overlap the load; a task that needs the embedder meanwhile
    waits for this load instead of making its own (:func:`~grace_core.models.offline_embedder.load_sentence_model`).
    Returns the thread (None when nothing is loaded here). A failed load is left to the task
    that needs the embedder, which raises it as it would have without the warm-up. The thread is
    not a daemon: the interpreter never exits halfway through loading torch."""
    if not embeds_offline(settings) or settings.task_runner != "thread" or settings.dask_address:
        return None

    def load() -> None:
        with contextlib.suppress(Exception):
            OfflineEmbedder.from_config(settings)

    thread = threading.Thread(target=load, name="grace-embedder-load")
    thread.start()
    return thread


def timestamp(now: datetime | None) -> datetime:
    """``now`` (a parameter, for reproducible runs) or the current UTC time."""
    return (now or datetime.now(timezone.utc)).astimezone(timezone.utc)


def stage_row(round_id: int, stage: str, started: datetime, n_documents: int, detail: str = "{}") -> pl.DataFrame:
    """One ``rounds`` row recording that ``stage`` of ``round_id`` ran from ``started`` until now."""
    finished = timestamp(None)
    return pl.DataFrame({
        "round": [round_id], "stage": [stage], "started_at": [started], "finished_at": [finished],
        "n_documents": [n_documents], "detail_json": [detail],
    }, schema={"round": pl.Int32, "stage": pl.Utf8, "started_at": pl.Datetime("us", "UTC"), "finished_at": pl.Datetime("us", "UTC"),
               "n_documents": pl.Int64, "detail_json": pl.Utf8})
