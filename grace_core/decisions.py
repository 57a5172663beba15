"""The one decision model (DESIGN §5): raw votes in, one decision per claim out.

Every consumer reads this result: promotion and rejection in a round
(:mod:`grace_core.round`), the evaluation, and — persisted as the lake's ``decisions`` table —
``round_metrics``, ``review_queue``, ``reviewer_stats``, ``verdict_outcomes`` and
``claim_status``. Nothing else aggregates votes.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from grace_core.errors import InvalidVerdicts

VERDICTS = ("confirm", "reject", "abstain")
PENDING = "pending"
DECISIONS = (*VERDICTS, PENDING)
DECISION_SCHEMA = {
    "doc_id": pl.Utf8, "claim_id": pl.Utf8, "n_votes": pl.Int32, "n_confirm": pl.Int32, "n_reject": pl.Int32,
    "n_abstain": pl.Int32, "quorum": pl.Int32, "decision": pl.Utf8,
}


def latest_votes(votes: pl.DataFrame) -> pl.DataFrame:
    """Each reviewer's latest vote per claim. ``votes``: ``doc_id, claim_id, reviewer,
    verdict`` plus, when present, ``round`` and ``created_at`` (later round, then later time,
    wins; without them the last row wins)."""
    order = [c for c in ("round", "created_at") if c in votes.columns]
    ordered = votes.with_row_index("_row").sort([*order, "_row"]) if order else votes.with_row_index("_row")
    return ordered.unique(["doc_id", "claim_id", "reviewer"], keep="last", maintain_order=True).drop("_row")


def waiting_reviewers(votes: pl.DataFrame, assigned: pl.DataFrame) -> pl.DataFrame:
    """``doc_id, claim_id, n_waiting`` per claim of ``assigned`` (deferral rows ``doc_id,
    claim_id, round, reviewer``): the reviewers of the claim's latest deferral who have not
    voted on it in that round (``votes``: ``doc_id, claim_id, round, reviewer``). An adjudicator
    or a reviewer of a claim deferred again counts once they answered that deferral."""
    keys = ["doc_id", "claim_id"]
    latest = assigned.filter(pl.col("round") == pl.col("round").max().over(keys)).select(*keys, "round", "reviewer").unique()
    answered = votes.select(*keys, pl.col("round").cast(latest.schema["round"]), "reviewer").unique()
    return (
        latest.join(answered.with_columns(_voted=pl.lit(True)), on=[*keys, "round", "reviewer"], how="left")
        .group_by(keys).agg(n_waiting=pl.col("_voted").is_null().sum().cast(pl.Int32))
    )


def decide(
    votes: pl.DataFrame, quorum: int = 1, weights: Mapping[str, float] | None = None, assigned: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One decision per claim from raw votes (``doc_id, claim_id, reviewer, verdict`` and
    optionally ``round, created_at``), DESIGN §5 (decisive-vote quorum):

    - each reviewer's latest vote counts once (:func:`latest_votes`), across rounds;
    - once at least ``quorum`` **decisive** (confirm or reject) votes are in, the majority of
      them decides: confirm or reject; abstentions never make a quorum (a confirm and an
      abstain do not meet quorum 2);
    - otherwise the claim is ``pending`` while a reviewer of its latest deferral has not
      answered it (``assigned``: every deferral row ``doc_id, claim_id, round, reviewer``; the
      votes then need their ``round``), and ``abstain`` once they all have (a tie, only
      abstentions, or too few decisive votes): it may be deferred again. A claim with no
      deferral row in ``assigned``, or every claim when ``assigned`` is None, counts as answered
      once ``quorum`` reviewers voted (pending before).

    With ``weights`` (reviewer → weight, e.g. the reliability log-odds of
    :func:`grace_core.reliability.vote_weights`; a reviewer not listed weighs 1) the majority is
    weighted: confirm when the confirm votes' weights sum to more than the reject votes'. The
    vote counts stay counts.

    Returns :data:`DECISION_SCHEMA` columns sorted by ``doc_id, claim_id``. Raises
    :class:`InvalidVerdicts` on a verdict outside confirm | reject | abstain.
    """
    bad = votes.filter(~pl.col("verdict").is_in(VERDICTS))
    if bad.height:
        raise InvalidVerdicts(f"unknown verdict {bad['verdict'][0]!r} for claim {bad['claim_id'][0]!r} (expected one of {', '.join(VERDICTS)})")
    if votes.height == 0:
        return pl.DataFrame(schema=DECISION_SCHEMA)
    weight = pl.col("reviewer").replace_strict(dict(weights), default=1.0, return_dtype=pl.Float64) if weights else pl.lit(1.0)
    agg = latest_votes(votes).with_columns(_w=weight).group_by("doc_id", "claim_id").agg(
        n_votes=pl.len().cast(pl.Int32),
        n_confirm=(pl.col("verdict") == "confirm").sum().cast(pl.Int32),
        n_reject=(pl.col("verdict") == "reject").sum().cast(pl.Int32),
        n_abstain=(pl.col("verdict") == "abstain").sum().cast(pl.Int32),
        _for=pl.col("_w").filter(pl.col("verdict") == "confirm").sum(),
        _against=pl.col("_w").filter(pl.col("verdict") == "reject").sum(),
    )
    if assigned is not None and assigned.height and "round" in votes.columns:
        agg = agg.join(waiting_reviewers(votes, assigned), on=["doc_id", "claim_id"], how="left")
    else:
        agg = agg.with_columns(n_waiting=pl.lit(None, pl.Int32))
    answered = pl.when(pl.col("n_waiting").is_null()).then(pl.col("n_votes") >= quorum).otherwise(pl.col("n_waiting") == 0)
    decisive = (pl.col("n_confirm") + pl.col("n_reject")) >= quorum
    decision = (
        pl.when(decisive & (pl.col("_for") > pl.col("_against"))).then(pl.lit("confirm"))
        .when(decisive & (pl.col("_against") > pl.col("_for"))).then(pl.lit("reject"))
        .when(answered).then(pl.lit("abstain"))
        .otherwise(pl.lit(PENDING))
    )
    return agg.with_columns(quorum=pl.lit(quorum, pl.Int32), decision=decision).select(list(DECISION_SCHEMA)).sort("doc_id", "claim_id")


def settled(decisions: pl.DataFrame, decision: str) -> pl.DataFrame:
    """``doc_id, claim_id`` of the claims whose decision is ``decision``."""
    return decisions.filter(pl.col("decision") == decision).select("doc_id", "claim_id")


def decided(decisions: pl.DataFrame) -> pl.DataFrame:
    """``doc_id, claim_id`` of the claims decided for good (confirm or reject): never deferred again."""
    return decisions.filter(pl.col("decision").is_in(["confirm", "reject"])).select("doc_id", "claim_id")
