"""Questions that drive expansion: what ``grace ask`` could not answer becomes a responder
question for its document in the next round.

- A question is *unanswered* when the answerer abstained or no passage of its context is
  relevant enough: the highest cosine between the question and a context passage is below
  ``ask_min_score`` (:func:`is_unanswered`); ``grace ask`` then records it in the lake's
  ``queries`` table (origin ``ask``), under the document of ``--doc`` or else of its best
  passage.
- Why the cosine and not the retrieval score α·cos + (1 − α)·ĈC that
  ranks the context (DESIGN §6): every candidate is already trusted knowledge (a prior, a
  verified claim or a Grounded claim), so what decides whether the knowledge base can answer
  is whether it holds a passage *about* the question. ĈC measures how central a
  passage sits in its document's graph, not whether it answers anything: with it an off-topic
  claim of the abstract (ĈC = 1, cos 0.3) scores 0.65, above a relevant claim a
  reviewer just confirmed (cos 0.6, but ĈC ≈ 0.1, since knowledge won at the
  frontier sits far from the priors by construction), and the min–max normalisation moves
  every score whenever the document's graph grows. A threshold on that score flagged
  questions by centrality, and the knowledge their responder answers added could not lift it.
- An *open* question is one whose latest check is unanswered (:func:`open_queries`).
- The next round's build samples responses to each open question of a document once (source
  name ``<query_id>#<sample>``), decomposes them and judges the new pairs against the
  document's graph (:func:`grow_with_responses`), so the scoring and review of that round
  see the new claims.
- After the round's dispatch each open question is asked again (origin ``recheck``); one now
  answered is closed, and ``round_metrics`` counts the questions answered in that round.
"""

from __future__ import annotations

import polars as pl

from grace_core.ask import AskResult
from grace_core.build import decompose_sources_with_failures, judge_pairs_with_failures
from grace_core.documents import content_id
from grace_core.edges import EDGE_COLUMNS
from grace_core.errors import ModelCallsFailed
from grace_core.models.factory import ModelRoles
from grace_core.models.failures import describe_failures

QUERY_PREFIX = "q:"
ORIGINS = ("ask", "recheck")





def query_id(question: str, doc_id: str) -> str:
    """A stable id of a question about a document (whitespace and case do not matter)."""
    return QUERY_PREFIX + content_id(doc_id, " ".join(question.lower().split()))


def best_score(result: AskResult) -> float | None:
    """How relevant the answer's best grounded passage is: the highest cosine between the
    question and a passage of its context (``similarity``; None without context). Not the
    retrieval score, which adds the passage's centrality (see the module docstring)."""
    return None if result.context.height == 0 else float(result.context["similarity"].max())


def is_unanswered(result: AskResult, min_score: float) -> bool:
    """Whether the knowledge base could not answer: the answerer abstained, or no passage of
    the context is relevant enough (:func:`best_score` below ``min_score``)."""
    score = best_score(result)
    return result.answer.abstained or score is None or score < min_score


def open_queries(queries: pl.DataFrame) -> pl.DataFrame:
    """``query_id, doc_id, question`` of the questions whose latest row (``round``, a recheck
    after the asking of the same round) is unanswered; ``queries``: rows of the ``queries``
    table."""
    if queries.height == 0:
        return queries.select("query_id", "doc_id", "question")
    latest = (
        queries.with_columns(_o=pl.col("origin").replace_strict({o: i for i, o in enumerate(ORIGINS)}, return_dtype=pl.Int32))
        .sort("round", "_o", "asked_at")
        .unique("query_id", keep="last", maintain_order=True)
    )
    return latest.filter(~pl.col("answerable")).select("query_id", "doc_id", "question").sort("query_id")


def not_sampled(open_rows: pl.DataFrame, responses: pl.DataFrame) -> pl.DataFrame:
    """The open questions no response was sampled for yet (``responses``: ``doc_id, name`` of
    response sources, named ``<question id>#<sample>``)."""
    asked = responses.select("doc_id", pl.col("name").str.split("#").list.first().alias("query_id")).unique()
    return open_rows.join(asked, on=["doc_id", "query_id"], how="anti")


def grow_with_responses(
    new_sources: pl.DataFrame, sources: pl.DataFrame, claims: pl.DataFrame, roles: ModelRoles, *, round_id: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Claims and edges that new responses add to existing document graphs.

    ``new_sources``: ``doc_id, source_id, source_kind, text`` (the new responses);
    ``sources``: the documents' graph sources (prior, verified, response) with ``text``;
    ``claims``: ``doc_id, claim_id, text`` of their claims. The new responses are decomposed
    (each entails its own claims); the judge reads every new response against every claim of its
    document, and every source (old and new) against the claims that are new to the document.
    Returns (claims rows, edge rows) of ``round_id``. A failed or capped model call raises
    :class:`~grace_core.errors.ModelCallsFailed` (nothing partial is returned; the cache
    answers what succeeded when the step is redone)."""
    new_claims, failures = decompose_sources_with_failures(new_sources, roles, round_id=round_id)
    own = new_claims.select("doc_id", "source_id", "source_kind", "claim_id", pl.lit("entails").alias("label"),
                            pl.lit(round_id, pl.Int32).alias("round"))
    known = claims.select("doc_id", "claim_id", pl.col("text").alias("claim_text")).unique(["doc_id", "claim_id"], keep="first")
    fresh = (new_claims.unique(["doc_id", "claim_id"], keep="first", maintain_order=True)
             .select("doc_id", "claim_id", pl.col("text").alias("claim_text")).join(known, on=["doc_id", "claim_id"], how="anti"))
    every_source = pl.concat([sources.select("doc_id", "source_id", "source_kind", "text"),
                              new_sources.select("doc_id", "source_id", "source_kind", "text")]).rename({"text": "source_text"})
    pairs = pl.concat([
        new_sources.select("doc_id", "source_id", "source_kind", pl.col("text").alias("source_text")).join(known, on="doc_id"),
        every_source.join(fresh, on="doc_id"),
    ]).join(own.select("doc_id", "source_id", "claim_id"), on=["doc_id", "source_id", "claim_id"], how="anti")
    judged, more = judge_pairs_with_failures(pairs, roles, round_id=round_id)
    failures = pl.concat([failures, more])
    if failures.height:
        raise ModelCallsFailed(f"round {round_id}: questions: {describe_failures(failures.select('role', 'outcome', 'error').iter_rows())}")
    edges = pl.concat([own, judged.select(own.columns)]).unique(["doc_id", "source_id", "claim_id", "label"], keep="first", maintain_order=True)
    return new_claims, edges.select(*EDGE_COLUMNS, "round")
