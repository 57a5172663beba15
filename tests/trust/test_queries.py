"""Questions that drive expansion (grace_core/queries.py): when an answer counts as unanswered,
which questions are open, which still need responses, and the lake's ``queries`` table in
``round_metrics``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from flows.queries import QUERY_SCHEMA
from grace_core.ask import AskResult
from grace_core.models.roles import Answer
from grace_core.queries import best_score, is_unanswered, not_sampled, open_queries, query_id
from storage.lake import Lake

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def result(abstained: bool, similarity: list[float], cc: list[float] | None = None, alpha: float = 0.5) -> AskResult:
    """An answer whose context passages have these cosines to the question (and ĈC, default 0.5)."""
    cc = cc or [0.5] * len(similarity)
    score = [alpha * s + (1 - alpha) * c for s, c in zip(similarity, cc)]
    return AskResult(Answer(None if abstained else "x", None, abstained=abstained),
                     pl.DataFrame({"doc_id": ["d"] * len(score), "similarity": similarity, "passage_cc": cc, "score": score},
                                  schema={"doc_id": pl.Utf8, "similarity": pl.Float64, "passage_cc": pl.Float64, "score": pl.Float64}))


def test_unanswered_means_abstained_or_no_relevant_passage() -> None:
    assert is_unanswered(result(True, [0.9]), 0.0)
    assert not is_unanswered(result(False, [0.2, 0.6]), 0.5)  # the most relevant passage counts
    assert is_unanswered(result(False, [0.2, 0.4]), 0.5)
    assert is_unanswered(result(False, []), 0.0)  # nothing to answer from


def test_answerable_is_about_relevance_not_centrality() -> None:
    """The retrieval score α·cos + (1 − α)·ĈC ranks the context; whether the knowledge base can
    answer is decided by the cosine alone: an off-topic claim of the abstract (ĈC 1) does not
    make a question answerable, and a relevant claim reviewers confirmed at the frontier (ĈC
    near 0) does, whatever its centrality."""
    off_topic_but_central = result(False, [0.3], cc=[1.0])
    assert off_topic_but_central.context["score"][0] == pytest.approx(0.65)
    assert is_unanswered(off_topic_but_central, 0.55)
    relevant_at_the_frontier = result(False, [0.3, 0.8], cc=[1.0, 0.05])
    assert relevant_at_the_frontier.context["score"].to_list() == pytest.approx([0.65, 0.425])  # ranks second
    assert not is_unanswered(relevant_at_the_frontier, 0.55)
    assert best_score(relevant_at_the_frontier) == pytest.approx(0.8)
    assert query_id("What  is X?", "d") == query_id("what is x?", "d") != query_id("What is X?", "e")


def q(qid: str, round_: int, origin: str, answerable: bool, minutes: int = 0) -> dict:
    return {"query_id": qid, "round": round_, "doc_id": "d", "question": f"question {qid}", "origin": origin,
            "answerable": answerable, "best_score": 0.1, "asked_at": T0 + timedelta(minutes=minutes)}


def test_a_question_is_open_while_its_latest_row_is_unanswered() -> None:
    rows = pl.DataFrame([
        q("q:a", 1, "ask", False), q("q:a", 2, "recheck", False),           # still open
        q("q:b", 1, "ask", False), q("q:b", 2, "recheck", True),            # answered in round 2
        q("q:c", 2, "ask", False, minutes=5), q("q:c", 2, "recheck", True),  # recheck of the round comes after the asking
        q("q:d", 2, "recheck", True), q("q:d", 3, "ask", False),            # asked again later and unanswered: open again
    ], schema=QUERY_SCHEMA)
    assert open_queries(rows)["query_id"].to_list() == ["q:a", "q:d"]
    responses = pl.DataFrame({"doc_id": ["d", "d", "e"], "name": ["q:a#0", "Q1#0", "q:d#1"]})
    assert not_sampled(open_queries(rows), responses)["query_id"].to_list() == ["q:d"]  # q:d's response is of another document


def test_round_metrics_count_the_questions_answered_since(small_lake: Lake) -> None:
    rows = pl.DataFrame([q("q:a", 1, "ask", False), q("q:b", 1, "ask", False), q("q:a", 2, "recheck", True),
                         q("q:b", 2, "recheck", False)], schema=QUERY_SCHEMA)
    small_lake.commit("queries", {"queries": rows})
    m = small_lake.query("SELECT round, n_questions_rechecked, n_questions_answered FROM round_metrics ORDER BY round").rows()
    assert m == [(1, 0, 0), (2, 2, 1)]
