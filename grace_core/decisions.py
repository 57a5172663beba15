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


def decide(votes: pl.DataFrame, quorum: int = 1, weights: Mapping[str, float] | None = None) -> pl.DataFrame:
    """One decision per claim from raw votes (``doc_id, claim_id, reviewer, verdict`` and
    optionally ``round, created_at``):

    - each reviewer's latest vote counts once (:func:`latest_votes`), across rounds;
    - below ``quorum`` answering reviewers (abstentions count as answers) → ``pending``;
    - otherwise the majority of the non-abstain votes; a tie or only abstentions → ``abstain``.
      With ``weights`` (reviewer → weight, e.g. the reliability log-odds of
      :func:`grace_core.reliability.vote_weights`; a reviewer not listed weighs 1) the majority
      is weighted: confirm when the confirm votes' weights sum to more than the reject votes'.
      The vote counts stay counts.

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
    decision = (
        pl.when(pl.col("n_votes") < quorum).then(pl.lit(PENDING))
        .when(pl.col("_for") > pl.col("_against")).then(pl.lit("confirm"))
        .when(pl.col("_against") > pl.col("_for")).then(pl.lit("reject"))
        .otherwise(pl.lit("abstain"))
    )
    return agg.with_columns(quorum=pl.lit(quorum, pl.Int32), decision=decision).select(list(DECISION_SCHEMA)).sort("doc_id", "claim_id")


def settled(decisions: pl.DataFrame, decision: str) -> pl.DataFrame:
    """``doc_id, claim_id`` of the claims whose decision is ``decision``."""
    return decisions.filter(pl.col("decision") == decision).select("doc_id", "claim_id")


def decided(decisions: pl.DataFrame) -> pl.DataFrame:
    """``doc_id, claim_id`` of the claims decided for good (confirm or reject): never deferred again."""
    return decisions.filter(pl.col("decision").is_in(["confirm", "reject"])).select("doc_id", "claim_id")
