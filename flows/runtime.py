"""Per-run plumbing shared by the flows: the lake, model roles with the lake's call cache, and
the current time. Nothing here runs at import time."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from datetime import datetime, timezone

import polars as pl

from flows.run_logs import one_line_errors
from flows.settings import GraceSettings
from grace_core.models.factory import ModelRoles, build_roles, embeds_offline
from grace_core.models.offline_embedder import OfflineEmbedder
from grace_core.scoring import load_compiled
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


def warm_up(settings: GraceSettings, *, kernels: bool = True) -> list[threading.Thread]:
    """Start loading, each on a thread, what a stage's chunk tasks load first when they run in
    this process (the thread runner): the offline embedder when it embeds offline (≈ 1.5 CPU s:
    torch and the model), and with ``kernels`` the scoring kernels
    (:func:`~grace_core.scoring.load_compiled`: numba's compiled functions from its disk cache and
    graph-tool, ≈ 1.5 s). The stage flows call it once they know they have chunks to run, so
    the chunks' reads (Arrow, which releases the GIL) overlap the loads, which otherwise sat on
    the chunks' path; started with the round, the loads' imports held the GIL against Prefect's
    own work and the round gained nothing (see docs/development.md, stop 30). A task that
    needs the embedder meanwhile waits for this load instead of making its own
    (:func:`~grace_core.models.offline_embedder.load_sentence_model`), and imports wait for the
    import in progress. Returns the threads (none when the tasks run elsewhere). A failed load is
    left to the task that needs it, which raises it as it would have without the warm-up. The
    threads are not daemons: the interpreter never exits halfway through loading torch."""
    if settings.task_runner != "thread" or settings.dask_address:
        return []

    def quietly(load: Callable[[], object]) -> None:
        with contextlib.suppress(Exception):
            load()

    loads: dict[str, Callable[[], object]] = {"grace-scoring-load": load_compiled} if kernels else {}
    if embeds_offline(settings):
        loads["grace-embedder-load"] = lambda: OfflineEmbedder.from_config(settings)
    threads = [threading.Thread(target=quietly, args=(load,), name=name) for name, load in loads.items()]
    for thread in threads:
        thread.start()
    return threads


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


one_line_errors()  # a failed run's log is its reason in one line; the traceback at DEBUG (flows/run_logs.py)
