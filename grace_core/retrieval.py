"""Retrieval scoring for question answering (DESIGN §6): relevance first, grounding second.

A question's candidates are the ``retrieval_k`` passages with the highest cosine to it, among
those at or above the relevance floor ``relevance_floor``; only among them does
:math:`score = \\alpha \\cos + (1 - \\alpha)\\hat{CC}` rerank. A passage below the floor is never
in the context, however grounded (:func:`select_context`). The answer abstains when the best
candidate's cosine is below ``abstain_below`` (:func:`weak_evidence`), or when there is none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl


@dataclass(frozen=True)
class Retrieval:
    """The retrieval settings (:class:`grace_core.params.ScoringParams` carries them as
    ``alpha``, ``retrieval_k``, ``relevance_floor`` and ``abstain_below``)."""

    alpha: float
    retrieval_k: int
    relevance_floor: float
    abstain_below: float
    top: int = 5

    @classmethod
    def of(cls, params: object, *, top: int = 5, **overrides: float) -> "Retrieval":
        """The retrieval settings of a settings object (any object with those attributes)."""
        values = {f: getattr(params, f) for f in ("alpha", "retrieval_k", "relevance_floor", "abstain_below")}
        return cls(**{**values, **overrides}, top=top)


def passage_closeness(entails: pl.DataFrame, scores: pl.DataFrame) -> pl.DataFrame:
    r""":math:`\hat{CC}(p)`: the mean normalised closeness of the claims each passage entails.

    ``entails``: ``doc_id, source_id, claim_id`` (entails judgements); ``scores``: ``doc_id,
    claim_id, closeness_norm``. Returns ``doc_id, source_id, passage_cc``; a passage entailing
    no scored claim is absent (callers treat it as 0).
    """
    return (
        entails.join(scores.select("doc_id", "claim_id", "closeness_norm"), on=["doc_id", "claim_id"])
        .group_by("doc_id", "source_id")
        .agg(passage_cc=pl.col("closeness_norm").mean())
    )


def cosines(query_emb: np.ndarray, passage_emb: np.ndarray) -> np.ndarray:
    """Cosine between the question's embedding and each passage's (rows of ``passage_emb``)."""
    q = np.asarray(query_emb, dtype=float)
    p = np.asarray(passage_emb, dtype=float).reshape(-1, q.shape[0])
    return (p @ q) / np.maximum(np.linalg.norm(p, axis=1) * np.linalg.norm(q), 1e-12)


def retrieval_scores(query_emb: np.ndarray, passage_emb: np.ndarray, passage_cc: np.ndarray, alpha: float) -> np.ndarray:
    r"""Score of each candidate passage for one question:

    .. math:: score(p) = \alpha \cos(e_q, e_p) + (1 - \alpha)\, \hat{CC}(p)

    ``passage_cc`` holds :math:`\hat{CC}(p)` (0 for a passage that entails no claim). It ranks
    only the candidates :func:`select_context` gathered by relevance.
    """
    return alpha * cosines(query_emb, passage_emb) + (1.0 - alpha) * np.asarray(passage_cc, dtype=float)


def top_passages(candidates: pl.DataFrame, k: int = 5) -> pl.DataFrame:
    """The context: candidates (``passage_id, prior_id, score``) deduplicated by source prior
    (best-scoring passage of each prior), top ``k`` by score, ties by passage id."""
    return (
        candidates.sort(["score", "passage_id"], descending=[True, False])
        .unique("prior_id", keep="first", maintain_order=True)
        .head(k)
    )


def relevant_candidates(candidates: pl.DataFrame, similarity: np.ndarray, settings: Retrieval) -> pl.DataFrame:
    """The candidates gathered by relevance: ``similarity`` (cosine to the question, one per row
    of ``candidates``) at or above ``relevance_floor``, the ``retrieval_k`` highest (ties by
    passage id), with columns ``similarity`` and ``score`` added, best cosine first."""
    scored = candidates.with_columns(similarity=pl.Series(np.asarray(similarity, dtype=float), dtype=pl.Float64))
    pool = (scored.filter(pl.col("similarity") >= settings.relevance_floor)
            .sort(["similarity", "passage_id"], descending=[True, False]).head(settings.retrieval_k))
    return pool.with_columns(score=settings.alpha * pl.col("similarity") + (1.0 - settings.alpha) * pl.col("passage_cc"))


def select_context(candidates: pl.DataFrame, similarity: np.ndarray, settings: Retrieval) -> pl.DataFrame:
    """The context for one question (DESIGN §6): the relevant candidates
    (:func:`relevant_candidates`) reranked by α·cos + (1 − α)·ĈC, one per source prior, the
    ``top`` best (:func:`top_passages`). Empty when no candidate reaches the floor."""
    return top_passages(relevant_candidates(candidates, similarity, settings), k=settings.top)


def weak_evidence(context: pl.DataFrame, settings: Retrieval) -> bool:
    """Whether the best relevant evidence is too weak to answer from: no context, or its best
    cosine to the question below ``abstain_below``."""
    return context.height == 0 or float(context["similarity"].max()) < settings.abstain_below
