"""Split votes go to an adjudicator: a claim whose reviewers split evenly (as many confirm as
reject votes, so the decision model says abstain) is sent to one named reviewer, or the
verifier, whose vote breaks the tie by the ordinary majority (:mod:`grace_core.decisions`).
Without an adjudicator a split claim returns to the pool like any abstention."""

from __future__ import annotations

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from grace_core.errors import InvalidSettings

KEYS = ["doc_id", "claim_id"]


class AdjudicationConfig(BaseModel):
    """Who breaks split votes (env: ``GRACE_ADJUDICATOR``)."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    adjudicator: str | None = Field(
        None, description="Who breaks split votes: a reviewer of GRACE_REVIEWERS, or 'verifier'; unset: a split claim returns to the pool."
    )


def check_adjudicator(adjudicator: str | None, pool: tuple[str, ...]) -> None:
    """Refuse an adjudicator outside the reviewer pool (nobody would answer)."""
    if adjudicator is not None and adjudicator not in pool:
        raise InvalidSettings(f"GRACE_ADJUDICATOR: {adjudicator!r} is not in the reviewer pool ({', '.join(pool) or 'empty'})")


def split_claims(decisions: pl.DataFrame, votes: pl.DataFrame, busy: pl.DataFrame, adjudicator: str) -> pl.DataFrame:
    """``doc_id, claim_id`` of the claims to adjudicate: decided ``abstain`` with as many
    confirm as reject votes (at least one each), on which ``adjudicator`` has not voted and
    that are not waiting on a reviewer (``busy``). ``decisions``: ``doc_id, claim_id, n_confirm,
    n_reject, decision``; ``votes``: ``doc_id, claim_id, reviewer``."""
    voted = votes.filter(pl.col("reviewer") == adjudicator).select(KEYS).unique()
    return (
        decisions.filter((pl.col("decision") == "abstain") & (pl.col("n_confirm") == pl.col("n_reject")) & (pl.col("n_confirm") > 0))
        .select(KEYS)
        .join(voted, on=KEYS, how="anti")
        .join(busy.select(KEYS), on=KEYS, how="anti")
        .sort(KEYS)
    )
