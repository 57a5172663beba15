"""``dispatch_reviews`` (budgeted deferrals assigned to the reviewer pool; the verifier answers
its share at once, human reviewers get packets in the lake's review outbox) and
``ingest_verdicts`` (returned verdict files from the review inbox, then verdicts → promotion
and cascade for the next round)."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from flows.params import StageParams
from flows.runtime import open_lake, roles_with_cache, stage_row, timestamp
from flows.settings import GraceSettings
from flows.verdicts import (
    assignments, claim_texts, decisions_before, document_texts, ingest_verdict_file, prior_units, write_packets,
)
from grace_core.assignment import VERIFIER, assign_reviewers, busy_claims, expected_review_seconds, mean_review_seconds
from grace_core.promotion import promote
from grace_core.review import candidate_costs, judge_cascade, verify_claims
from grace_core.selection import select_for_review
from grace_core.verdict_files import InvalidVerdictFile
from storage.review_files import ReviewArea


@task(retries=2, retry_delay_seconds=10, cache_policy=NONE)
def defer_claims(settings: GraceSettings, round_id: int, now: datetime) -> int:
    """Select the round's boundary claims worth review within the budget, assign each to
    ``overlap`` reviewers of the pool and commit the deferrals; returns the claims deferred.

    Claims already decided (confirm or reject) and claims with an assignment still open before
    its deadline stay out; an overdue claim is back in the pool. The review cost counts the
    expected human seconds per claim from the pool's history (DESIGN §4; 0 for the verifier)."""
    started = timestamp(None)  # real start of the work, for the rounds table
    lake = open_lake(settings)
    key = f"dispatch/round={round_id}"
    if lake.is_committed(key):
        return 0
    decided = decisions_before(lake, round_id + 1, settings.quorum).filter(pl.col("decision").is_in(["confirm", "reject"]))
    boundary = (
        lake.read("scores", rounds=[round_id], columns=["doc_id", "claim_id", "status", "priority", "confidence"])
        .filter((pl.col("status") == "boundary") & pl.col("priority").is_not_null())
        .join(decided.select("doc_id", "claim_id"), on=["doc_id", "claim_id"], how="anti")
        .join(busy_claims(assignments(lake, now)), on=["doc_id", "claim_id"], how="anti")
        .join(claim_texts(lake), on=["doc_id", "claim_id"])
    )
    votes = lake.read("verdicts", columns=["doc_id", "claim_id", "reviewer", "seconds_spent"])
    seconds = expected_review_seconds(settings.pool, settings.overlap, mean_review_seconds(votes, settings.reviewers, settings.review_seconds))
    roles, cache = roles_with_cache(settings, lake, round_id)
    candidates = candidate_costs(boundary, prior_units(lake), roles, settings, review_seconds=seconds)
    chosen = select_for_review(candidates, settings.budget)
    assigned = assign_reviewers(chosen, settings.pool, settings.overlap, round_id, answered=votes)
    human_deadline = now + timedelta(hours=settings.deadline_hours)
    deferrals = assigned.select(
        "doc_id", "claim_id", pl.lit(round_id, pl.Int32).alias("round"), "reviewer",
        "priority", "confidence", "cost", "gain", pl.col("rank").cast(pl.Int32),
        # the verifier answers within the dispatch: what it leaves unanswered is back in the pool next round
        pl.when(pl.col("reviewer") == VERIFIER).then(pl.lit(now)).otherwise(pl.lit(human_deadline)).alias("deadline"),
        pl.lit(now).alias("created_at"),
    )
    lake.commit(key, {"deferrals": deferrals, "llm_calls": cache.pending(),
                      "rounds": stage_row(round_id, "dispatch", started, deferrals["doc_id"].n_unique())})
    return chosen.height


@task(retries=2, retry_delay_seconds=10, cache_policy=NONE)
def verify_deferred(settings: GraceSettings, round_id: int, now: datetime) -> dict:
    """The verifier answers the round's deferrals assigned to it; commit its verdicts."""
    started = timestamp(None)  # real start of the work, for the rounds table
    lake = open_lake(settings)
    key = f"verify/round={round_id}"
    if lake.is_committed(key):
        return {}
    deferred = lake.read("deferrals", rounds=[round_id], columns=["doc_id", "claim_id", "reviewer"]).filter(pl.col("reviewer") == VERIFIER)
    roles, cache = roles_with_cache(settings, lake, round_id)
    verdicts = verify_claims(deferred.join(claim_texts(lake), on=["doc_id", "claim_id"]), document_texts(lake), roles)
    rows = verdicts.select(
        "doc_id", "claim_id", pl.lit(round_id, pl.Int32).alias("round"), pl.lit(VERIFIER).alias("reviewer"), "verdict",
        "note", pl.lit(VERIFIER).alias("channel"), pl.lit(now).alias("created_at"),
    )
    lake.commit(key, {"verdicts": rows, "llm_calls": cache.pending(),
                      "rounds": stage_row(round_id, "verify", started, rows["doc_id"].n_unique())})
    return dict(rows.group_by("verdict").len().iter_rows())


@task(retries=2, retry_delay_seconds=10, cache_policy=NONE)
def send_packets(settings: GraceSettings, round_id: int, now: datetime) -> dict[str, int]:
    """Rewrite the outbox packets (CSV and JSONL) of the human reviewers: the claims each still
    has to answer, with their context. Returns claims per reviewer."""
    lake = open_lake(settings)
    roles, _ = roles_with_cache(settings, lake, round_id)
    return {name: out["claims"] for name, out in write_packets(lake, roles, now, list(settings.reviewers)).items()}


@flow(name="dispatch_reviews", log_prints=True)
def dispatch_reviews(params: StageParams) -> dict:
    """Budgeted selection of boundary claims → deferrals assigned to the reviewer pool; the
    verifier answers its share, human reviewers get packets in the review outbox."""
    settings = params.settings()
    now = timestamp(params.now)
    n = defer_claims(settings, params.round_id, now)
    verdicts = verify_deferred(settings, params.round_id, now)
    packets = send_packets(settings, params.round_id, now)
    get_run_logger().info(
        "round %d: deferred %d claims within budget %.2f to %s (overlap %d); verifier: %s; packets: %s", params.round_id, n,
        settings.budget, ", ".join(settings.pool), settings.overlap, verdicts or "nothing new", packets or "none",
    )
    return {"deferred": n, "verdicts": verdicts, "packets": packets}


@task(retries=2, retry_delay_seconds=5, cache_policy=NONE)
def ingest_review_inbox(settings: GraceSettings, now: datetime) -> list[str]:
    """Read every file of the lake's review inbox once: verdict files are recorded (bad rows
    quarantined with file, line and reason) and moved to ``review/processed/``; any other file
    is moved to the quarantine with an error report. Returns one line per file and bad row."""
    lake = open_lake(settings)
    area = ReviewArea(lake.store)
    lines = []
    for name in area.inbox_names():
        data = None
        try:
            data = area.read_inbox(name, settings)
            report = ingest_verdict_file(lake, name, data, now, settings)
        except InvalidVerdictFile as exc:
            lines.append(f"{name}: quarantined: {exc}")
            area.quarantine_file(name, data, str(exc))
            continue
        area.mark_processed(name, data)
        lines += [report.summary(), *map(str, report.bad)]
    return lines


@task(retries=2, retry_delay_seconds=10, cache_policy=NONE)
def promote_and_cascade(settings: GraceSettings, round_id: int, now: datetime) -> dict:
    """Confirmed claims become priors with anchor edges; the claims they entail get anchor
    edges too (cascade). Rejections are applied by scoring. One commit per round."""
    started = timestamp(None)  # real start of the work, for the rounds table
    lake = open_lake(settings)
    key = f"promote/round={round_id}"
    if lake.is_committed(key):
        return {}
    decisions = decisions_before(lake, round_id, settings.quorum)
    verified = lake.read("sources", columns=["doc_id", "claim_id", "source_kind"]).filter(pl.col("source_kind") == "verified")
    fresh = decisions.join(verified.select("doc_id", "claim_id"), on=["doc_id", "claim_id"], how="anti")
    texts = claim_texts(lake)
    promo = promote(fresh, texts)
    new_sources = promo.sources.with_columns(round=pl.lit(round_id, pl.Int32), name=pl.lit("verified claim"))
    latest = lake.read("scores", rounds=[round_id - 1], columns=["doc_id", "claim_id", "status"])
    roles, cache = roles_with_cache(settings, lake, round_id)
    cascaded = judge_cascade(promo.sources, latest, texts, roles, round_id=round_id)
    edges = pl.concat([promo.edges, cascaded]).with_columns(round=pl.lit(round_id, pl.Int32))
    lake.commit(key, {"sources": new_sources, "edges": edges, "llm_calls": cache.pending(),
                      "rounds": stage_row(round_id, "verdicts", started, new_sources["doc_id"].n_unique())})
    labels = cascaded["label"]
    return {"promoted": new_sources.height, "rejected": promo.rejected.height,
            "cascade_entails": int((labels == "entails").sum()), "cascade_contradicts": int((labels == "contradicts").sum())}


@flow(name="ingest_verdicts", log_prints=True)
def ingest_verdicts(params: StageParams) -> dict:
    """The review inbox's verdict files, then the verdicts of earlier rounds → promotion,
    archival and cascade for round ``round_id``."""
    settings = params.settings()
    now = timestamp(params.now)
    logger = get_run_logger()
    for line in ingest_review_inbox(settings, now):
        logger.info(line)
    out = promote_and_cascade(settings, params.round_id, now)
    logger.info("round %d: %s", params.round_id, out or "verdicts already applied")
    return out
