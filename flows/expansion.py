"""``expansion_round``: the parent flow of one round — ingest returned verdict files and new
batches, build, settle and score (:mod:`grace_core.round`), dispatch — with the metrics per
round as its artifacts."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import polars as pl
from prefect import flow, get_run_logger
from prefect.task_runners import TaskRunner

from flows.build import build_graphs
from flows.ingest import watch_inbox
from flows.params import InboxOptions, RoundParams, StageParams
from flows.review import dispatch_reviews, ingest_verdicts
from flows.runtime import open_lake, timestamp
from flows.score import publish_metrics, score_round
from flows.settings import GraceSettings


def next_round(settings: GraceSettings) -> int:
    """The round after the last one whose reviews were dispatched (1 for a new lake)."""
    rounds = open_lake(settings).read("rounds", columns=["round", "stage"]).filter(pl.col("stage") == "dispatch")
    return int(rounds["round"].max() or 0) + 1


@contextmanager
def chunk_task_runner(settings: GraceSettings) -> Iterator[TaskRunner | None]:
    """The task runner of the round's chunk tasks (build and score): ``None`` keeps each
    sub-flow's own thread pool; otherwise prefect-dask on the cluster at ``dask_address``, or on
    a LocalCluster started for the round (one single-threaded worker process per core)."""
    if settings.task_runner == "thread" and not settings.dask_address:
        yield None
        return
    from prefect_dask import DaskTaskRunner

    if settings.dask_address:
        yield DaskTaskRunner(address=settings.dask_address)
        return
    from distributed import LocalCluster

    with LocalCluster(threads_per_worker=1) as cluster:
        yield DaskTaskRunner(address=cluster.scheduler_address)


@flow(name="expansion_round", log_prints=True)
def expansion_round(params: RoundParams = RoundParams()) -> list[dict]:
    """One expansion round; returns the metrics of every round so far."""
    settings = params.settings()
    round_id = params.round_id or next_round(settings)
    get_run_logger().info("expansion round %d on lake %s (%s backend)", round_id, settings.lake, settings.backend)
    stage = StageParams(**params.model_dump(include=set(StageParams.model_fields) - {"round_id", "now"}), round_id=round_id, now=timestamp(params.now))
    if round_id > 1:
        ingest_verdicts(stage)
    if settings.inbox:
        watch_inbox(InboxOptions(**params.model_dump(include=set(InboxOptions.model_fields))))
    with chunk_task_runner(settings) as runner:
        build_graphs.with_options(task_runner=runner)(stage)
        score_round.with_options(task_runner=runner)(stage)
    dispatch_reviews(stage)
    return publish_metrics(settings, round_id)  # after dispatch: the round's deferrals are in
