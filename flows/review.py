"""``dispatch_reviews`` (budgeted deferrals, answered here by the verifier) and
``ingest_verdicts`` (verdicts → promotion and cascade for the next round)."""

from __future__ import annotations

from datetime import datetime

import polars as pl
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from flows.params import StageParams
from flows.runtime import open_lake, roles_with_cache, stage_row, timestamp
from flows.settings import GraceSettings
from flows.verdicts import decisions_before
from grace_core.build import judge_pairs
from grace_core.promotion import cascade_candidates, cascade_edges, promote
from grace_core.review import candidate_costs, verify_claims
from grace_core.selection import select_for_review
from storage.lake import Lake

VERIFIER = "verifier"


def claim_texts(lake: Lake) -> pl.DataFrame:
    """One text per (doc_id, claim_id): the first decomposition's."""
    return lake.read("claims", columns=["doc_id", "claim_id", "round", "text"]).sort("round").unique(["doc_id", "claim_id"], keep="first").drop("round")


def document_texts(lake: Lake) -> pl.DataFrame:
    """The whole text of each document: its passages in order, with their names."""
    passages = lake.read("sources", rounds=[0], columns=["doc_id", "name", "ord", "text"])
    return passages.sort("doc_id", "ord").group_by("doc_id", maintain_order=True).agg(
        text=pl.concat_str([pl.col("name").fill_null(""), pl.col("text")], separator="\n").str.join("\n\n")
    )


@task(retries=2, retry_delay_seconds=10, cache_policy=NONE)
def defer_claims(settings: GraceSettings, round_id: int, now: datetime) -> int:
    """Select the round's boundary claims worth review within the budget; commit the deferrals."""
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
        .join(claim_texts(lake), on=["doc_id", "claim_id"])
    )
    prior_units = pl.concat([  # the atomic claims of the priors, and verified claims
        lake.read("claims", columns=["doc_id", "source_kind", "text"]).filter(pl.col("source_kind") == "prior"),
        lake.read("sources", columns=["doc_id", "source_kind", "text"]).filter(pl.col("source_kind") == "verified"),
    ]).select("doc_id", "text").unique()
    roles, cache = roles_with_cache(settings, lake, round_id)
    candidates = candidate_costs(boundary, prior_units, roles, settings, review_seconds=0.0)
    chosen = select_for_review(candidates, settings.budget)
    deferrals = chosen.select(
        "doc_id", "claim_id", pl.lit(round_id, pl.Int32).alias("round"), pl.lit(VERIFIER).alias("reviewer"),
        "priority", "confidence", "cost", "gain", pl.col("rank").cast(pl.Int32), pl.lit(now).alias("created_at"),
    )
    lake.commit(key, {"deferrals": deferrals, "llm_calls": cache.pending(),
                      "rounds": stage_row(round_id, "dispatch", started, deferrals["doc_id"].n_unique())})
    return deferrals.height


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


@flow(name="dispatch_reviews", log_prints=True)
def dispatch_reviews(params: StageParams) -> dict:
    """Budgeted selection of boundary claims → deferrals, answered by the verifier."""
    settings = params.settings()
    now = timestamp(params.now)
    n = defer_claims(settings, params.round_id, now)
    verdicts = verify_deferred(settings, params.round_id, now)
    get_run_logger().info("round %d: deferred %d claims within budget %.2f; verifier: %s", params.round_id, n, settings.budget, verdicts or "nothing new")
    return {"deferred": n, "verdicts": verdicts}


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
    pairs = (
        cascade_candidates(promo.sources, latest)
        .join(promo.sources.select("doc_id", "source_id", pl.col("text").alias("source_text")), on=["doc_id", "source_id"])
        .join(texts.rename({"text": "claim_text"}), on=["doc_id", "claim_id"])
        .with_columns(source_kind=pl.lit("verified"))
    )
    roles, cache = roles_with_cache(settings, lake, round_id)
    cascaded = cascade_edges(judge_pairs(pairs, roles, round_id=round_id))
    edges = pl.concat([promo.edges, cascaded]).with_columns(round=pl.lit(round_id, pl.Int32))
    lake.commit(key, {"sources": new_sources, "edges": edges, "llm_calls": cache.pending(),
                      "rounds": stage_row(round_id, "verdicts", started, new_sources["doc_id"].n_unique())})
    return {"promoted": new_sources.height, "rejected": promo.rejected.height, "cascade_edges": cascaded.height}


@flow(name="ingest_verdicts", log_prints=True)
def ingest_verdicts(params: StageParams) -> dict:
    """Verdicts of earlier rounds → promotion, archival and cascade for round ``round_id``."""
    out = promote_and_cascade(params.settings(), params.round_id, timestamp(params.now))
    get_run_logger().info("round %d: %s", params.round_id, out or "verdicts already applied")
    return out
