"""Review stage helpers (DESIGN §4–§5): review costs from embeddings, each claim's nearest prior
(shown to reviewers), and the LLM verifier as an automatic reviewer."""

from __future__ import annotations

import numpy as np
import polars as pl

from grace_core.build import judge_pairs_with_failures
from grace_core.errors import ModelCallsFailed
from grace_core.models.factory import ModelRoles
from grace_core.models.failures import describe_failures
from grace_core.models.roles import Embedder, VerifyRequest
from grace_core.params import ScoringParams
from grace_core.promotion import cascade_candidates, cascade_edges
from grace_core.reach import cascade_reach
from grace_core.selection import prior_distance, review_cost

VERDICT_COLUMNS = {"doc_id": pl.Utf8, "claim_id": pl.Utf8, "verdict": pl.Utf8, "note": pl.Utf8}


REVIEW_INPUTS = {"reach": pl.Int64, "prior_distance": pl.Float64}
"""What the selection needs of a Boundary claim besides its scores, fixed until its document is
rescored: its cascade reach (:func:`grace_core.reach.cascade_reach`) and its embedding distance
to the nearest prior unit (:func:`grace_core.selection.prior_distance`)."""


def prior_distances(claims: pl.DataFrame, priors: pl.DataFrame, embedder: Embedder | None, known: pl.DataFrame | None = None) -> pl.DataFrame:
    """``claims`` (``doc_id, claim_id, text``, …) with ``prior_distance``
    (:func:`grace_core.selection.prior_distance`). ``priors``: ``doc_id, text`` of the prior
    knowledge to measure against. The flows pass the atomic claims of the priors and the
    verified claims rather than whole passages: a sentence embedder reads only the first few
    hundred tokens of a long section, so "nearest prior" is taken unit by unit. The texts of all
    documents are embedded in one call, none of a document without priors (its distances are 1
    whatever the claims say).

    ``known``: ``doc_id, claim_id, prior_distance`` of claims already measured against the same
    priors with the same embedder; those keep their distance and are not embedded again.
    ``embedder`` may be None only when there is nothing left to measure. Rows keep their order."""
    if known is not None and known.height:
        claims = claims.with_row_index("_row").join(known.select("doc_id", "claim_id", "prior_distance"), on=["doc_id", "claim_id"], how="left")
        kept = claims.filter(pl.col("prior_distance").is_not_null())
        measured = prior_distances(claims.filter(pl.col("prior_distance").is_null()).drop("prior_distance"), priors, embedder)
        return pl.concat([kept, measured.select(kept.columns)]).sort("_row").drop("_row")
    units = priors.filter(pl.col("doc_id").is_in(claims["doc_id"].unique().implode()))
    texts = pl.concat([claims.filter(pl.col("doc_id").is_in(units["doc_id"].unique().implode()))["text"], units["text"]]).unique(maintain_order=True)
    if texts.len() and embedder is None:
        raise ValueError("prior_distances: claims left to measure and no embedder")
    # one embedder call for every document: its forward passes spread over the embedder's workers
    emb = embedder.embed(texts.to_list()) if texts.len() else np.empty((0, 0))
    at = {t: i for i, t in enumerate(texts.to_list())}
    units_of = {doc_id: rows["text"].to_list() for (doc_id,), rows in units.group_by("doc_id")}
    parts = []
    for (doc_id,), rows in claims.group_by("doc_id", maintain_order=True):
        prior_texts = units_of.get(doc_id)
        if prior_texts:
            distance = prior_distance(emb[[at[t] for t in rows["text"]]], emb[[at[t] for t in prior_texts]])
        else:
            distance = prior_distance(np.empty((rows.height, 0)), np.empty((0, 0)))
        parts.append(rows.with_columns(prior_distance=pl.Series(distance, dtype=pl.Float64)))
    if not parts:
        return claims.with_columns(prior_distance=pl.lit(None, pl.Float64))
    return pl.concat(parts)


def review_inputs(
    claims: pl.DataFrame, boundary: pl.DataFrame, priors: pl.DataFrame, embedder: Embedder | None, known: pl.DataFrame | None = None
) -> pl.DataFrame:
    """``claims`` (``doc_id, claim_id, text``, …) with :data:`REVIEW_INPUTS`: ``reach`` against
    the Boundary claims of their documents (``boundary``: ``doc_id, claim_id, text``) and
    ``prior_distance`` to ``priors`` (:func:`prior_distances`, keeping the ``known`` ones)."""
    return prior_distances(cascade_reach(claims, boundary), priors, embedder, known)


def with_cost(candidates: pl.DataFrame, params: ScoringParams, review_seconds: float) -> pl.DataFrame:
    """``candidates`` (with ``prior_distance``) plus ``cost`` (:func:`grace_core.selection.review_cost`)."""
    return candidates.with_columns(cost=pl.Series(review_cost(candidates["prior_distance"].to_numpy(), params, review_seconds), dtype=pl.Float64))


def candidate_costs(
    claims: pl.DataFrame, priors: pl.DataFrame, roles: ModelRoles, params: ScoringParams, review_seconds: float
) -> pl.DataFrame:
    """Add ``prior_distance`` and ``cost`` (:func:`grace_core.selection.review_cost`) to
    ``claims`` (``doc_id, claim_id, text``, …), measured against ``priors`` (:func:`prior_distances`)."""
    return with_cost(prior_distances(claims, priors, roles.embedder), params, review_seconds)


def _unit_rows(m: np.ndarray) -> np.ndarray:
    """Rows of ``m`` scaled to unit length (zero rows stay zero)."""
    m = np.asarray(m, dtype=float)
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def nearest_priors(claims: pl.DataFrame, priors: pl.DataFrame, embedder: Embedder) -> pl.DataFrame:
    """The prior nearest to each claim in embedding space (highest cosine), as reviewers see it.

    ``claims``: ``doc_id, claim_id, text``; ``priors``: ``doc_id, text`` (the same prior units
    as the review cost). Returns ``doc_id, claim_id, nearest_prior`` (null when the claim's
    document has no priors). Embeddings are computed per document.
    """
    rows = []
    for (doc_id,), part in claims.group_by("doc_id", maintain_order=True):
        prior_texts = priors.filter(pl.col("doc_id") == doc_id)["text"].to_list()
        if not prior_texts:
            rows += [{"doc_id": doc_id, "claim_id": c, "nearest_prior": None} for c in part["claim_id"]]
            continue
        sims = _unit_rows(embedder.embed(part["text"].to_list())) @ _unit_rows(embedder.embed(prior_texts)).T
        rows += [{"doc_id": doc_id, "claim_id": c, "nearest_prior": prior_texts[j]} for c, j in zip(part["claim_id"], sims.argmax(axis=1))]
    return pl.DataFrame(rows, schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8, "nearest_prior": pl.Utf8})


def verify_claims(deferred: pl.DataFrame, documents: pl.DataFrame, roles: ModelRoles) -> pl.DataFrame:
    """The verifier's verdict on each deferred claim (``doc_id, claim_id, text``) given its whole
    document (``documents``: ``doc_id, text``). Items whose call failed or was capped are left
    out, so they stay pending and can be verified later."""
    if deferred.height == 0:
        return pl.DataFrame(schema=VERDICT_COLUMNS)
    joined = deferred.join(documents.rename({"text": "document"}), on="doc_id", how="left")
    reqs = [VerifyRequest(c, d or "") for c, d in joined.select("text", "document").iter_rows()]
    rows = []
    for (doc_id, cid), v in zip(joined.select("doc_id", "claim_id").iter_rows(), roles.verifier.verify(reqs)):
        if v.outcome == "ok":
            rows.append({"doc_id": doc_id, "claim_id": cid, "verdict": v.verdict, "note": v.reason})
    return pl.DataFrame(rows, schema=VERDICT_COLUMNS)


def judge_cascade(new_sources: pl.DataFrame, scores: pl.DataFrame, texts: pl.DataFrame, roles: ModelRoles, *, round_id: int) -> pl.DataFrame:
    """The cascade of newly verified claims (DESIGN §5): the judge reads each new verified
    source (``doc_id, source_id, text, claim_id``) against the Boundary claims of its document
    (``scores``: ``doc_id, claim_id, status``; ``texts``: ``doc_id, claim_id, text``) and its
    verdicts become edges (:func:`grace_core.promotion.cascade_edges`). Returns ``doc_id,
    source_id, source_kind, claim_id, label``. A judge call that failed or was capped raises
    :class:`~grace_core.errors.ModelCallsFailed`: a partial cascade is never returned (the
    round's settle step is redone whole, the call cache answering what succeeded)."""
    pairs = (
        cascade_candidates(new_sources, scores)
        .join(new_sources.select("doc_id", "source_id", pl.col("text").alias("source_text")), on=["doc_id", "source_id"])
        .join(texts.select("doc_id", "claim_id", pl.col("text").alias("claim_text")), on=["doc_id", "claim_id"])
        .with_columns(source_kind=pl.lit("verified"))
    )
    judged, failures = judge_pairs_with_failures(pairs, roles, round_id=round_id)
    if failures.height:
        raise ModelCallsFailed(f"round {round_id}: cascade: {describe_failures(failures.select('role', 'outcome', 'error').iter_rows())}")
    return cascade_edges(judged)
