"""``expansion_round``: the parent flow of one round — ingest returned verdict files and new
batches, build, settle and score (:mod:`grace_core.round`), dispatch — with the metrics per
round as its artifacts."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import polars as pl
from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.task_runners import TaskRunner

from flows.build import build_graphs
from flows.ingest import watch_inbox
from flows.params import InboxOptions, RoundParams, StageParams
from flows.review import dispatch_reviews, ingest_verdicts, publish_deferred
from flows.runtime import open_lake, timestamp
from flows.score import publish_metrics, score_round
from flows.settings import GraceSettings
from grace_core.round import round_to_run
from storage.review_files import OUTBOX


LAST_STAGE = "recheck"
"""The stage whose commit is a round's last (:func:`flows.queries.recheck_queries`, the end of
``dispatch_reviews``): a round with a ``dispatch`` row and none of this one was interrupted."""


def unfinished_round(settings: GraceSettings) -> int | None:
    """The last dispatched round when it never finished (killed between its deferrals and its
    last commit: the verifier may not have answered, packets not been written), else None."""
    stages = open_lake(settings).read("rounds", columns=["round", "stage"])
    dispatched = stages.filter(pl.col("stage") == "dispatch")["round"].max()
    if dispatched is None or stages.filter((pl.col("round") == dispatched) & (pl.col("stage") == LAST_STAGE)).height:
        return None
    return int(dispatched)


def next_round(settings: GraceSettings) -> int:
    """The round to run when none is asked for: an :func:`unfinished_round` first (it is run
    again, which finishes it: every stage it committed is skipped), else the one after the last
    dispatched round (1 for a new lake)."""
    unfinished = unfinished_round(settings)
    if unfinished is not None:
        return unfinished
    rounds = open_lake(settings).read("rounds", columns=["round", "stage"]).filter(pl.col("stage") == "dispatch")
    return int(rounds["round"].max() or 0) + 1


@contextmanager
def subflows_without_heartbeats() -> Iterator[None]:
    """The sub-flows called inside run without Prefect's flow-run heartbeats. A sub-flow runs in
    its parent's process, whose own heartbeats already tell the server it is alive; and when a
    flow run ends, Prefect (3.9) joins its heartbeat thread, which sleeps in steps of one second:
    up to 1 s per sub-flow (2.7 s of a 41 s incremental round at 100,000 documents, four
    sub-flows and the parent). A sub-flow run on its own (its deployment) keeps its heartbeats."""
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


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


def packets_markdown(settings: GraceSettings, round_id: int, packets: dict[str, int]) -> str:
    """Where the round's review packets are: the outbox files and the UI form, per reviewer."""
    if not packets:
        return f"## Round {round_id}: no review packets\nNo human reviewer has claims waiting."
    outbox = f"{settings.lake.rstrip('/')}/{OUTBOX}"
    rows = "\n".join(f"| {name} | {n} | `{outbox}/{name}.csv`, `.jsonl` |" for name, n in sorted(packets.items()))
    return (f"## Round {round_id}: review packets\n"
            "Answer in the file, sign it with your reviewer key (`grace review sign FILE --reviewer NAME`) and drop it in the "
            "lake's `review/inbox/`, run `grace review --reviewer NAME` in a terminal, or run the `review-packet` deployment "
            "with the reviewer's name and answer its form with your key.\n\n"
            f"| reviewer | claims waiting | packet |\n|---|---|---|\n{rows}\n")


@flow(name="expansion_round", log_prints=True)
def expansion_round(params: RoundParams = RoundParams()) -> list[dict]:
    """One expansion round; returns the metrics of every round so far. The run carries a progress
    artifact while it runs, one summary line per stage, the round report (after dispatch, so its
    deferrals are counted) and where the review packets are."""
    settings = params.settings()
    following = next_round(settings)
    round_id = round_to_run(params.round_id, following, settings.lake)
    logger = get_run_logger()
    if params.round_id is None and following == unfinished_round(settings):
        logger.warning("round %d was interrupted before it finished: finishing it (what it committed is kept) before a new round starts",
                       round_id)
    logger.info("expansion round %d on lake %s (%s backend)", round_id, settings.lake, settings.backend)
    stage = StageParams(**params.model_dump(include=set(StageParams.model_fields) - {"round_id", "now"}), round_id=round_id,
                        now=timestamp(params.now))
    progress = create_progress_artifact(0.0, key=f"grace-round-{round_id}-progress", description=f"Round {round_id}: stages done")
    with subflows_without_heartbeats():
        if round_id > 1:
            lines = ingest_verdicts(stage)
            logger.info("verdicts: %s", "; ".join(lines) if lines else "no verdict files returned")
        if settings.inbox:
            lines = watch_inbox(InboxOptions(**params.model_dump(include=set(InboxOptions.model_fields))))
            logger.info("inbox: %s", "; ".join(lines) if lines else "no new batches")
        update_progress_artifact(progress, 20.0)
        with chunk_task_runner(settings) as runner:
            built = build_graphs.with_options(task_runner=runner)(stage)
            logger.info("build: %d documents, %d claims, %d edges", built["documents"], built["claims"], built["edges"])
            if built.get("unprocessable"):
                logger.error("build: %d documents could not be built and wait for the next round: %s", len(built["unprocessable"]),
                             ", ".join(built["unprocessable"]))
            update_progress_artifact(progress, 60.0)
            score_round.with_options(task_runner=runner)(stage)
            logger.info("score: settled and scored round %d", round_id)
            update_progress_artifact(progress, 80.0)
        dispatched = dispatch_reviews(stage)
        logger.info("dispatch: %d claim%s deferred within budget %.2f; packets: %s", dispatched["deferred"],
                    "" if dispatched["deferred"] == 1 else "s", settings.budget,
                    ", ".join(f"{k} {v}" for k, v in sorted(dispatched["packets"].items())) or "none")
        create_markdown_artifact(key="grace-review-packets", markdown=packets_markdown(settings, round_id, dispatched["packets"]),
                                 description=f"Round {round_id}: review packets")
        publish_deferred(settings, round_id)
    metrics = publish_metrics(settings, round_id)  # after dispatch: the round's deferrals are in
    update_progress_artifact(progress, 100.0)
    return metrics
