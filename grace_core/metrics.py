"""Round metrics (DESIGN §7)."""

from __future__ import annotations

import polars as pl


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
