"""Retrieval scoring for question answering (DESIGN §6)."""

from __future__ import annotations

import numpy as np
import polars as pl


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


def retrieval_scores(query_emb: np.ndarray, passage_emb: np.ndarray, passage_cc: np.ndarray, alpha: float) -> np.ndarray:
    r"""Score of each candidate passage for one question:

    .. math:: score(p) = \alpha \cos(e_q, e_p) + (1 - \alpha)\, \hat{CC}(p)

    ``passage_cc`` holds :math:`\hat{CC}(p)` (0 for a passage that entails no claim).
    """
    q = np.asarray(query_emb, dtype=float)
    p = np.asarray(passage_emb, dtype=float)
    cos = (p @ q) / np.maximum(np.linalg.norm(p, axis=1) * np.linalg.norm(q), 1e-12)
    return alpha * cos + (1.0 - alpha) * np.asarray(passage_cc, dtype=float)


def top_passages(candidates: pl.DataFrame, k: int = 5) -> pl.DataFrame:
    """The context: candidates (``passage_id, prior_id, score``) deduplicated by source prior
    (best-scoring passage of each prior), top ``k`` by score, ties by passage id."""
    return (
        candidates.sort(["score", "passage_id"], descending=[True, False])
        .unique("prior_id", keep="first", maintain_order=True)
        .head(k)
    )
