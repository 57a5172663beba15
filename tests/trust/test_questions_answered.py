"""Questions that drive expansion, the whole loop through real rounds: a question ``grace ask``
cannot answer becomes a responder question for its document; the claims of its answers enter
the graph, the verifier confirms them, the next settle step promotes them, and the recheck after
that round's dispatch answers the question from them.

On the first bundled QASPER paper (priors Abstract + Introduction, offline models) the question
below is about the speech corpus, which only the paper's "Corpus Description" section describes.
Before the loop the closest grounded passage has cosine ≈ 0.43 to it; the verified answer claim
("Our speech corpus consists of approximately 3000 hours of speech data …") has ≈ 0.85.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from flows.expansion import expansion_round
from flows.params import RoundParams
from grace_core.queries import query_id
from tests.grace_cli import run_grace
from tests.one_paper import one_paper_after_round_1

pytestmark = [pytest.mark.usefixtures("prefect_server"), pytest.mark.slow, pytest.mark.e2e]

COMMON = dict(prior_sections=["Abstract", "Introduction"], hallucination_rate=0.2)
QUESTION = "How many hours of speech data does the corpus contain?"
MIN_COSINE = "0.6"  # GRACE_ASK_MIN_SCORE: no passage of the knowledge base before the loop is this close to the question


def queries(lake) -> dict[tuple[int, str], tuple[bool, float]]:
    return {(r, o): (a, s) for r, o, a, s in lake.read("queries").select("round", "origin", "answerable", "best_score").iter_rows()}


def test_an_unanswered_question_becomes_answerable_from_the_claims_its_answers_added(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("GRACE_ASK_MIN_SCORE", MIN_COSINE)
    root, lake = one_paper_after_round_1(tmp_path, **COMMON)
    doc = lake.read("documents")["doc_id"][0]
    qid = query_id(QUESTION, doc)

    code, out, err = run_grace(monkeypatch, capsys, "ask", QUESTION, "--lake", root, "--doc", doc)
    assert code == 0, err
    assert f"Recorded as open question {qid}" in " ".join(out.split())
    asked = queries(lake)
    assert asked[(1, "ask")][0] is False and asked[(1, "ask")][1] < float(MIN_COSINE)

    # round 2: responses to the question, their claims in the graph; the verifier confirms the answer
    expansion_round(RoundParams(round_id=2, lake=root, **COMMON))
    ours = lake.read("sources", rounds=[2]).filter(pl.col("name").str.starts_with(qid + "#"))["source_id"].to_list()
    answer_claims = set(lake.read("edges", rounds=[2]).filter(pl.col("source_id").is_in(ours) & (pl.col("label") == "entails"))["claim_id"])
    assert answer_claims
    confirmed = lake.read("verdicts", rounds=[2]).filter(pl.col("claim_id").is_in(list(answer_claims)) & (pl.col("verdict") == "confirm"))
    assert confirmed.height >= 1
    assert queries(lake)[(2, "recheck")][0] is False  # votes of round 2 are settled in round 3
    assert lake.query("SELECT n_questions_rechecked, n_questions_answered FROM round_metrics WHERE round = 2").row(0) == (1, 0)

    # round 3: the confirmed answer claims are promoted (Grounded); the recheck answers the question
    expansion_round(RoundParams(round_id=3, lake=root, **COMMON))
    status = lake.query("SELECT claim_id, status FROM claim_status").filter(pl.col("claim_id").is_in(confirmed["claim_id"].to_list()))
    assert set(status["status"]) == {"grounded"}
    answerable, score = queries(lake)[(3, "recheck")]
    assert answerable and score >= float(MIN_COSINE)
    assert lake.query("SELECT n_questions_rechecked, n_questions_answered FROM round_metrics WHERE round = 3").row(0) == (1, 1)

    # and grace ask now answers it from a passage the loop added: a claim of the question's responses
    code, out, err = run_grace(monkeypatch, capsys, "ask", QUESTION, "--lake", root, "--doc", doc)
    assert code == 0, err
    assert "Recorded as open question" not in out and "3000 hours" in " ".join(out.split())
    texts = set(lake.query("SELECT claim_id, text FROM claim_texts").filter(pl.col("claim_id").is_in(list(answer_claims)))["text"])
    assert any("3000 hours" in t for t in texts)
    assert lake.read("queries").height == 3  # asked, rechecked twice: an answered question is not recorded again
