"""Questions that drive expansion, through real rounds: ``grace ask`` records a question the
knowledge base cannot answer; the next round samples responses to it for its document, whose
claims enter that round's graph, and asks it again after the dispatch."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from flows.expansion import expansion_round
from flows.params import RoundParams
from grace_core.queries import query_id
from tests.one_paper import one_paper_after_round_1
from tests.grace_cli import run_grace

pytestmark = [pytest.mark.usefixtures("prefect_server"), pytest.mark.slow, pytest.mark.e2e]

COMMON = dict(prior_sections=["Abstract", "Introduction"], hallucination_rate=0.2, budget=1.0)
QUESTION = "Which hardware was used to train the decoders, and how long did training take?"


def test_an_unanswered_question_becomes_a_responder_question_next_round(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("GRACE_ASK_MIN_SCORE", "0.99")  # nothing this small lake holds scores that high: the question stays open
    root, lake = one_paper_after_round_1(tmp_path, **COMMON)
    doc = lake.read("documents")["doc_id"][0]

    code, out, err = run_grace(monkeypatch, capsys, "ask", QUESTION, "--lake", root, "--doc", doc)
    qid = query_id(QUESTION, doc)
    assert code == 0, err
    assert f"Recorded as open question {qid}" in " ".join(out.split())
    asked = lake.read("queries")
    assert asked.select("query_id", "round", "doc_id", "origin", "answerable").rows() == [(qid, 1, doc, "ask", False)]
    run_grace(monkeypatch, capsys, "ask", QUESTION, "--lake", root, "--doc", doc)
    assert lake.read("queries").height == 1  # the same question again is not recorded twice

    expansion_round(RoundParams(round_id=2, lake=root, **COMMON))
    responses = lake.read("sources", rounds=[2]).filter(pl.col("source_kind") == "response")
    ours = responses.filter(pl.col("name").str.starts_with(qid + "#"))
    assert ours.height >= 1 and set(ours["doc_id"]) == {doc}
    claims = lake.read("claims", rounds=[2]).filter(pl.col("source_id").is_in(ours["source_id"].to_list()))
    assert claims.height >= 1
    scored = set(lake.read("scores", rounds=[2])["claim_id"])
    assert set(claims["claim_id"]) <= scored  # the new claims are in the round's graph
    edges = lake.read("edges", rounds=[2]).filter(pl.col("claim_id").is_in(claims["claim_id"].to_list()))
    assert edges.filter(pl.col("source_kind") == "prior").height + edges.filter(~pl.col("source_id").is_in(ours["source_id"].to_list())).height >= 1
    rechecked = lake.read("queries", rounds=[2])
    assert rechecked.select("query_id", "origin").rows() == [(qid, "recheck")]
    row = lake.query("SELECT n_questions_rechecked, n_questions_answered FROM round_metrics WHERE round = 2").row(0)
    assert row == (1, int(rechecked["answerable"][0]))

    expansion_round(RoundParams(round_id=3, lake=root, **COMMON))  # sampled once: no new responses to the question
    assert lake.read("sources", rounds=[3]).filter(pl.col("name").str.starts_with(qid + "#")).height == 0
