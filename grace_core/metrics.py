"""Round metrics (DESIGN §7)."""

from __future__ import annotations

import polars as pl

from grace_core.status import BOUNDARY, GROUNDED, REFUTED


def _share(num: float, den: float) -> float | None:
    return float(num) / float(den) if den else None


def round_metrics(scores: pl.DataFrame, decisions: pl.DataFrame | None = None, cascaded: pl.DataFrame | None = None,
                  documents: int | None = None) -> dict:
    """Metrics of one round.

    ``scores``: ``doc_id, claim_id, status, from_response`` (``from_response``: the claim was
    decomposed from a sampled response). ``decisions``: ``claim_id, decision`` for this round's
    deferred claims (null decision: pending). ``cascaded``: ``doc_id, claim_id`` of claims that
    turned Grounded this round without review. ``documents``: the number of documents the
    per-document figures divide by (default: those with a scored claim).

    - PCR = grounded response claims / all response claims;
    - KF = mean number of Boundary claims per document;
    - yield = confirmed / deferred (the paper's figure); ``yield_decided`` = confirmed /
      (confirmed + rejected);
    - cascade = claims per document that turned Grounded unreviewed.
    Ratios with an empty denominator are ``None``.
    """
    n_docs = scores["doc_id"].n_unique() if documents is None else documents
    resp = scores.filter(pl.col("from_response"))
    counts = {s: int((scores["status"] == s).sum()) for s in ("grounded", "boundary", "refuted")}
    dec = decisions if decisions is not None else pl.DataFrame(schema={"claim_id": pl.Utf8, "decision": pl.Utf8})
    confirmed = int((dec["decision"] == "confirm").sum())
    rejected = int((dec["decision"] == "reject").sum())
    n_cascade = cascaded.height if cascaded is not None else 0
    return {
        "documents": n_docs,
        "claims": scores.height,
        **counts,
        "pcr": _share((resp["status"] == "grounded").sum(), resp.height),
        "kf": _share(counts["boundary"], n_docs),
        "deferred": dec.height,
        "confirmed": confirmed,
        "rejected": rejected,
        "yield": _share(confirmed, dec.height),
        "yield_decided": _share(confirmed, confirmed + rejected),
        "cascade": _share(n_cascade, n_docs),
    }


def grounding_precision(scores: pl.DataFrame, truth: pl.DataFrame) -> float | None:
    """Share of system-Grounded claims that are true. ``truth``: ``doc_id, claim_id, is_true``;
    grounded claims without a gold label are left out. ``None`` when nothing is grounded."""
    g = scores.filter(pl.col("status") == "grounded").join(truth, on=["doc_id", "claim_id"], how="inner")
    return _share(g["is_true"].sum(), g.height)


SCORING_COUNTS = ("n_claims", "n_grounded", "n_boundary", "n_refuted", "n_response_claims", "n_grounded_response_claims", "n_cascade")
"""The per-scoring counts of :func:`scoring_counts`, stored as the lake's ``scoring_counts``."""


def scoring_counts(scores: pl.DataFrame, response_claims: pl.DataFrame, confirmed: pl.DataFrame) -> pl.DataFrame:
    """What each scoring of a document holds, counted once when it is written so that the
    lake's ``round_metrics`` view sums small rows instead of joining every claim (DESIGN §7).

    ``scores``: ``doc_id, claim_id, round, status`` of one or more consecutive scorings of each
    document (each ``round`` is one scoring of that document). ``response_claims``: ``doc_id,
    claim_id, round`` of the claims' rows decomposed from a sampled response. ``confirmed``:
    ``doc_id, claim_id, round`` of confirm decisions.

    One row per ``doc_id, round`` of ``scores`` with :data:`SCORING_COUNTS`:

    - ``n_claims`` and ``n_<status>``: the scoring's claims, per status;
    - ``n_response_claims``: its claims first decomposed from a response in that round or
      before; ``n_grounded_response_claims``: those of them Grounded (PCR's two terms);
    - ``n_cascade``: its claims Grounded that were Boundary in the document's previous scoring
      given in ``scores`` and have no confirm decision of that round or before: the cascade
      of DESIGN §7, as :func:`grace_core.round.cascaded` (0 for a document's first given scoring).
    """
    keys = ["doc_id", "claim_id"]
    scorings = (scores.select("doc_id", "round").unique().sort("doc_id", "round")
                .with_columns(prev_round=pl.col("round").shift(1).over("doc_id")))
    previous = scores.select(*keys, prev_round=pl.col("round"), prev_status=pl.col("status"))
    first_response = response_claims.group_by(keys).agg(first_response=pl.col("round").min())
    first_confirm = confirmed.group_by(keys).agg(first_confirm=pl.col("round").min())
    rows = (scores.select(*keys, "round", "status")
            .join(scorings, on=["doc_id", "round"])
            .join(previous, on=[*keys, "prev_round"], how="left")
            .join(first_response, on=keys, how="left")
            .join(first_confirm, on=keys, how="left"))
    grounded = pl.col("status") == GROUNDED
    response = (pl.col("first_response") <= pl.col("round")).fill_null(False)
    confirmed_by_now = (pl.col("first_confirm") <= pl.col("round")).fill_null(False)
    return rows.group_by("doc_id", "round").agg(
        n_claims=pl.len(),
        n_grounded=grounded.sum(),
        n_boundary=(pl.col("status") == BOUNDARY).sum(),
        n_refuted=(pl.col("status") == REFUTED).sum(),
        n_response_claims=response.sum(),
        n_grounded_response_claims=(response & grounded).sum(),
        n_cascade=(grounded & (pl.col("prev_status") == BOUNDARY).fill_null(False) & ~confirmed_by_now).sum(),
    ).with_columns(pl.col(c).cast(pl.Int64) for c in SCORING_COUNTS).sort("doc_id", "round")
