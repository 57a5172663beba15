"""The grounded-claim retriever (DESIGN §6): gather the passages of a document base most relevant
to a question, rerank them by grounding, keep the best one per source prior, and let the
answerer answer from them, or abstain when the best relevant evidence is weak.

Candidates are the priors (document passages and verified claims) and, in expansion mode, the
grounded claims. A prior's :math:`\\hat{CC}` is the mean normalised closeness of the claims it
entails; a grounded claim's is its own, and it is deduplicated under the prior that anchors it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from grace_core.models.factory import ModelRoles
from grace_core.models.roles import Answer, AnswerRequest
from grace_core.params import ScoringParams
from grace_core.retrieval import Retrieval, cosines, passage_closeness, select_context, weak_evidence

CANDIDATE_COLUMNS = ("doc_id", "passage_id", "prior_id", "kind", "text", "passage_cc")


@dataclass(frozen=True)
class AskResult:
    """The answer (or abstention) and the context it came from: ``context`` has
    :data:`CANDIDATE_COLUMNS` plus ``similarity`` and ``score``, best first."""

    answer: Answer
    context: pl.DataFrame
    best_relevance: float | None = None
    """The highest cosine between the question and any candidate (None without candidates)."""
    best_grounding: float | None = None
    """The highest ĈC in the context (None when no candidate reaches the floor)."""
    weak: bool = False
    """Abstained before asking the answerer: the best relevant evidence is weak (:func:`grace_core.retrieval.weak_evidence`)."""

    def why_abstained(self, settings: Retrieval) -> str:
        """One line: why the answer abstained, with the best relevance and the best grounding."""
        rel = "none" if self.best_relevance is None else f"{self.best_relevance:.3f}"
        grd = "none relevant" if self.best_grounding is None else f"{self.best_grounding:.3f}"
        if self.weak:
            cause = (f"no passage reaches the relevance floor {settings.relevance_floor:g}" if self.context.height == 0
                     else f"the best relevant evidence is below {settings.abstain_below:g}")
        else:
            cause = "the answerer found no answer in the context"
        return f"abstained: {cause} (best relevance cos {rel}, best grounding ĈC {grd})"


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


def ask(question: str, candidates: pl.DataFrame, roles: ModelRoles, *, alpha: float | None = None, k: int = 5,
        options: tuple[str, ...] | None = None, retrieval: Retrieval | None = None,
        embeddings: np.ndarray | None = None) -> AskResult:
    """Answer ``question`` from its context (:func:`grace_core.retrieval.select_context`): the
    ``retrieval_k`` candidates of highest cosine at or above the relevance floor, reranked by
    :math:`\\alpha \\cos(e_q, e_p) + (1-\\alpha)\\hat{CC}(p)`, one per source prior, the top ``k``.
    Abstains without asking the answerer when the best relevant evidence is weak
    (:func:`grace_core.retrieval.weak_evidence`). ``retrieval`` holds the settings (the
    :class:`~grace_core.params.ScoringParams` defaults when None); ``alpha`` and ``k``, when
    given, override its α and context size. ``embeddings`` holds the candidates' vectors (row
    *i* of ``candidates``: :func:`grace_core.stored_embeddings.embeddings_of`), so that only the
    question is embedded; the candidates are embedded when None."""
    settings = retrieval or Retrieval.of(ScoringParams())
    settings = replace(settings, top=k, **({} if alpha is None else {"alpha": alpha}))
    if candidates.height == 0:
        empty = candidates.with_columns(similarity=pl.lit(None, pl.Float64), score=pl.lit(None, pl.Float64))
        return AskResult(Answer(None, None, abstained=True), empty, weak=True)
    q = roles.embedder.embed([question])[0]
    p = roles.embedder.embed(candidates["text"].to_list()) if embeddings is None else embeddings
    if len(p) != candidates.height:
        raise ValueError(f"{len(p)} embeddings for {candidates.height} candidates")
    sim = cosines(q, p)
    ranked = select_context(candidates, sim, settings)
    best_relevance = float(sim.max())
    best_grounding = float(ranked["passage_cc"].max()) if ranked.height else None
    if weak_evidence(ranked, settings):
        return AskResult(Answer(None, None, abstained=True), ranked, best_relevance, best_grounding, weak=True)
    context = "\n\n".join(ranked["text"].to_list())
    answer = roles.answerer.answer([AnswerRequest(question, context, options)])[0]
    return AskResult(answer, ranked, best_relevance, best_grounding)
