"""Reading the review state of the lake: every raw vote, and the decision per claim."""

from __future__ import annotations

import polars as pl

from grace_core.promotion import aggregate_verdicts
from storage.lake import Lake


def decisions_before(lake: Lake, round_id: int, quorum: int) -> pl.DataFrame:
    """Decision per claim from all votes of deferral rounds before ``round_id`` (each
    reviewer's latest vote on a claim counts once): ``doc_id, claim_id, …, decision``."""
    votes = lake.read("verdicts", rounds=range(1, round_id), columns=["doc_id", "claim_id", "reviewer", "verdict", "created_at"])
    latest = votes.sort("created_at").unique(["doc_id", "claim_id", "reviewer"], keep="last")
    return aggregate_verdicts(latest.select("doc_id", "claim_id", "reviewer", "verdict"), quorum)
