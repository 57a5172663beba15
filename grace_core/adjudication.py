"""Split votes go to an adjudicator: a claim whose reviewers split evenly (as many confirm as
reject votes, so the decision model says abstain) is sent to one named reviewer, or the
verifier, whose vote breaks the tie by the ordinary majority (:mod:`grace_core.decisions`).
Without an adjudicator a split claim returns to the pool like any abstention."""

from __future__ import annotations

import polars as pl

from grace_core.errors import InvalidSettings

KEYS = ["doc_id", "claim_id"]





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


def adjudication_assignments(splits: pl.DataFrame, scores: pl.DataFrame, adjudicator: str | None, after_rank: int) -> pl.DataFrame:
    """Assignments of the ``splits`` (``doc_id, claim_id``) to the ``adjudicator`` alone, ranked
    after ``after_rank`` (the round's other review items), outside the budgets (cost and gain
    0); priority and confidence from ``scores`` (0 and 0.5 for a claim not scored). ``scores``
    may be every document's latest scores (millions of rows): only the splits' rows are taken
    from it (a semi join, hashing the few splits) before the left join (which would hash it all)."""
    scored = scores.join(splits.select(KEYS), on=KEYS, how="semi").select(*KEYS, "priority", "confidence")
    return splits.join(scored, on=KEYS, how="left").select(
        "doc_id", "claim_id", pl.col("priority").fill_null(0.0), pl.col("confidence").fill_null(0.5), cost=pl.lit(0.0), gain=pl.lit(0.0),
        rank=pl.int_range(after_rank + 1, after_rank + 1 + pl.len()), reviewer=pl.lit(adjudicator),
    )
