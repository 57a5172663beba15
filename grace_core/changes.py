"""Which documents a round rescores (DESIGN §5, "One round": a document whose state did not
change since its last scoring needs no rescoring).

A nightly round costs what changed, not what exists: the settle-and-score step runs only on the
documents whose state changed since their last scoring. A document not rescored keeps its
latest scores, which is what ``claim_status`` and ``round_metrics`` read.
"""

from __future__ import annotations

import json

import polars as pl

from grace_core.decisions import DECISION_SCHEMA
from grace_core.documents import content_id
from grace_core.params import ScoringParams

# The settings a document's scores depend on: the edge weights, the refutation threshold, the
# priority and confidence constants (DESIGN §1–§4), and how votes are decided (DESIGN §5).
SCORING_FIELDS = ("w_anchor", "w_agree", "w_neutral", "w_contra", "delta_refute", "lambda_c", "lambda_n", "k", "delta")


def scoring_fingerprint(params: ScoringParams, *, quorum: int, weigh_by_reliability: bool) -> str:
    """A stable id of the settings scores depend on (:data:`SCORING_FIELDS`, the quorum and
    whether votes are weighted by reliability). When it differs from the one the last scoring
    recorded, every document is rescored."""
    values = {f: getattr(params, f) for f in SCORING_FIELDS} | {"quorum": quorum, "weigh_by_reliability": weigh_by_reliability}
    return content_id(json.dumps(values, sort_keys=True))


def changed_documents(rounds: pl.DataFrame, decisions_now: pl.DataFrame, decisions_then: pl.DataFrame, *, round_id: int) -> list[str]:
    """The documents round ``round_id`` must settle and rescore, sorted.

    - ``rounds``: one row per document with claims: ``doc_id``, ``grown_round`` (the latest
      round of its claim and edge rows, up to ``round_id``: what a build, a question-driven
      response, a promotion or a cascade adds) and ``scored_round`` (the latest round it was
      scored in; null when never);
    - ``decisions_now``: :func:`grace_core.decisions.decide` of every vote as of now;
    - ``decisions_then``: the decisions each document's latest settle step persisted.

    A document is rescored when it was never scored, when rows were added after its last
    scoring, or when its decisions now differ from the persisted ones in any column of
    :data:`grace_core.decisions.DECISION_SCHEMA` (a new or changed vote, another quorum or vote
    weights): its settle step then promotes, rejects and cascades. A document already scored in
    round ``round_id`` is not scored in it again (a rerun of the round changes nothing).
    """
    columns = list(DECISION_SCHEMA)
    now, then = decisions_now.select(columns), decisions_then.select(columns).cast(DECISION_SCHEMA)
    voted = pl.concat([now.join(then, on=columns, how="anti"), then.join(now, on=columns, how="anti")])["doc_id"]
    due = rounds.filter(
        pl.col("scored_round").is_null() | (pl.col("grown_round") > pl.col("scored_round")) | pl.col("doc_id").is_in(voted.unique().implode())
    ).filter(pl.col("scored_round").is_null() | (pl.col("scored_round") < round_id))
    return sorted(due["doc_id"].unique().to_list())
