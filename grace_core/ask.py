"""The grounded-claim retriever (DESIGN §6): score candidate passages of a document base for a
question, keep the best one per source prior, and let the answerer answer from them or abstain.

Candidates are the priors (document passages and verified claims) and, in expansion mode, the
grounded claims. A prior's :math:`\\hat{CC}` is the mean normalised closeness of the claims it
entails; a grounded claim's is its own, and it is deduplicated under the prior that anchors it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from grace_core.models.factory import ModelRoles
from grace_core.models.roles import Answer, AnswerRequest
from grace_core.retrieval import passage_closeness, retrieval_scores, top_passages

CANDIDATE_COLUMNS = ("doc_id", "passage_id", "prior_id", "kind", "text", "passage_cc")


@dataclass(frozen=True)
class AskResult:
    """The answer (or abstention) and the context it came from: ``context`` has
    :data:`CANDIDATE_COLUMNS` plus ``similarity`` and ``score``, best first."""

    answer: Answer
    context: pl.DataFrame


def candidate_passages(priors: pl.DataFrame, entails: pl.DataFrame, scores: pl.DataFrame, claims: pl.DataFrame,
                       *, expansion: bool = True) -> pl.DataFrame:
    """Build the candidate table.

    ``priors``: ``doc_id, source_id, text`` (kinds prior and verified); ``entails``: ``doc_id,
    source_id, claim_id`` judgements of those priors; ``scores``: ``doc_id, claim_id, status,
    closeness_norm`` (latest); ``claims``: ``doc_id, claim_id, text``.
    """
    pcc = passage_closeness(entails, scores)
    prior_rows = priors.join(pcc, on=["doc_id", "source_id"], how="left").select(
        "doc_id", pl.col("source_id").alias("passage_id"), pl.col("source_id").alias("prior_id"), pl.lit("prior").alias("kind"),
        "text", pl.col("passage_cc").fill_null(0.0),
    )
    if not expansion:
        return prior_rows
    anchor = entails.sort("source_id").unique(["doc_id", "claim_id"], keep="first").select("doc_id", "claim_id", pl.col("source_id").alias("prior_id"))
    grounded = (
        scores.filter(pl.col("status") == "grounded")
        .join(claims, on=["doc_id", "claim_id"])
        .join(anchor, on=["doc_id", "claim_id"], how="left")
        .select("doc_id", pl.col("claim_id").alias("passage_id"), pl.coalesce("prior_id", "claim_id").alias("prior_id"),
                pl.lit("grounded claim").alias("kind"), "text", pl.col("closeness_norm").alias("passage_cc"))
    )
    return pl.concat([prior_rows, grounded])


def ask(question: str, candidates: pl.DataFrame, roles: ModelRoles, *, alpha: float, k: int = 5,
        options: tuple[str, ...] | None = None) -> AskResult:
    """Answer ``question`` from the top ``k`` candidates by
    :math:`\\alpha \\cos(e_q, e_p) + (1-\\alpha)\\hat{CC}(p)`, one per source prior."""
    if candidates.height == 0:
        return AskResult(Answer(None, None, abstained=True), candidates.with_columns(similarity=pl.lit(None, pl.Float64), score=pl.lit(None, pl.Float64)))
    q = roles.embedder.embed([question])[0]
    p = roles.embedder.embed(candidates["text"].to_list())
    cc = candidates["passage_cc"].to_numpy()
    score = retrieval_scores(q, p, cc, alpha)
    sim = (p @ q) / np.maximum(np.linalg.norm(p, axis=1) * np.linalg.norm(q), 1e-12)
    ranked = top_passages(candidates.with_columns(similarity=pl.Series(sim), score=pl.Series(score)), k=k)
    context = "\n\n".join(ranked["text"].to_list())
    answer = roles.answerer.answer([AnswerRequest(question, context, options)])[0]
    return AskResult(answer, ranked)
