"""``expansion_round``: the parent flow of one round — ingest the last round's verdicts, ingest
new batches, build, score, dispatch."""

from __future__ import annotations

import polars as pl
from prefect import flow, get_run_logger

from flows.build import build_graphs
from flows.ingest import watch_inbox
from flows.params import RoundParams, RunOptions, StageParams
from flows.review import dispatch_reviews, ingest_verdicts
from flows.runtime import open_lake, timestamp
from flows.score import score_round
from flows.settings import GraceSettings


def next_round(settings: GraceSettings) -> int:
    """The round after the last one whose reviews were dispatched (1 for a new lake)."""
    rounds = open_lake(settings).read("rounds", columns=["round", "stage"]).filter(pl.col("stage") == "dispatch")
    return int(rounds["round"].max() or 0) + 1


@flow(name="expansion_round", log_prints=True)
def expansion_round(params: RoundParams = RoundParams()) -> list[dict]:
    """One expansion round; returns the metrics of every round so far."""
    settings = params.settings()
    round_id = params.round_id or next_round(settings)
    get_run_logger().info("expansion round %d on lake %s (%s backend)", round_id, settings.lake, settings.backend)
    stage = StageParams(**params.model_dump(exclude={"round_id", "now"}), round_id=round_id, now=timestamp(params.now))
    if round_id > 1:
        ingest_verdicts(stage)
    if settings.inbox:
        watch_inbox(RunOptions(**params.model_dump(include=set(RunOptions.model_fields))))
    build_graphs(stage)
    metrics = score_round(stage)
    dispatch_reviews(stage)
    return metrics
