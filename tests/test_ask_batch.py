"""``grace ask --no-record`` and ``grace ask -`` (one question per line of stdin) on a real lake,
through the command's entry point."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import polars as pl
import pytest

from grace_core.queries import query_id
from tests.ask_lake import PAPER, one_paper_lake
from tests.grace_cli import run_grace

QUESTIONS = ["What model is used to encode the images?", "How is the sequential nature of the story captured?",
             "Do the decoder LSTMs all have the same weights?"]


@pytest.fixture
def lake(tmp_path: Path):
    return one_paper_lake(tmp_path)


def stdin(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))


def test_no_record_keeps_an_unanswered_question_out_of_the_queries_table(lake, monkeypatch, capsys) -> None:
    root, store = lake
    monkeypatch.setenv("GRACE_ABSTAIN_BELOW", "0.99")  # no passage is that close: every question abstains, so it is unanswered
    code, out, err = run_grace(monkeypatch, capsys, "ask", QUESTIONS[0], "--lake", root, "--doc", PAPER, "--no-record")
    assert code == 0, err
    assert "abstained: the best relevant evidence is below 0.99" in out
    assert "Recorded" not in out and store.read("queries").height == 0

    code, out, err = run_grace(monkeypatch, capsys, "ask", QUESTIONS[0], "--lake", root, "--doc", PAPER)
    assert code == 0, err
    qid = query_id(QUESTIONS[0], PAPER)
    assert f"Recorded as open question {qid}" in " ".join(out.split())
    assert store.read("queries").select("query_id", "doc_id", "origin", "answerable").rows() == [(qid, PAPER, "ask", False)]


def test_batch_answers_each_line_as_one_json_line(lake, monkeypatch, capsys) -> None:
    root, store = lake
    stdin(monkeypatch, f"{QUESTIONS[0]}\n\n  {QUESTIONS[1]}  \n{QUESTIONS[2]}\n")
    code, out, err = run_grace(monkeypatch, capsys, "ask", "-", "--lake", root, "--doc", PAPER, "--top", "2", "--no-record")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [a["question"] for a in lines] == QUESTIONS  # blank lines skipped, whitespace trimmed, in order
    for a in lines:
        assert set(a) == {"question", "answer", "because", "abstained", "why", "context"}
        assert 1 <= len(a["context"]) <= 2 and {c["doc_id"] for c in a["context"]} == {PAPER}
        assert a["abstained"] is (a["answer"] is None) and (a["why"] is None) is not a["abstained"]
        scores = [c["score"] for c in a["context"]]
        assert scores == sorted(scores, reverse=True)
    assert lines[2]["answer"] in ("Yes", "No")  # a yes/no question gets the offline answerer's polar answer
    assert store.read("queries").height == 0  # --no-record applies to every question


def test_batch_records_its_unanswered_questions_in_one_commit(lake, monkeypatch, capsys) -> None:
    root, store = lake
    monkeypatch.setenv("GRACE_ABSTAIN_BELOW", "0.99")
    stdin(monkeypatch, "\n".join([*QUESTIONS, QUESTIONS[0]]) + "\n")  # the first question twice: recorded once
    before = set(store.log.records())
    code, out, err = run_grace(monkeypatch, capsys, "ask", "-", "--lake", root, "--doc", PAPER)
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 4 and all(a["abstained"] and a["why"].startswith("abstained: ") for a in lines)
    assert "Recorded 3 open question(s)" in err
    queries = store.read("queries")
    assert sorted(queries["query_id"]) == sorted(query_id(q, PAPER) for q in QUESTIONS)
    assert queries["origin"].unique().to_list() == ["ask"] and not queries["answerable"].any()
    new = sorted(key.split("/")[0] for key in set(store.log.records()) - before)
    assert new == ["ask", "embeddings"]  # the candidates' vectors, then every open question in one commit


def test_batch_on_empty_stdin_answers_nothing(lake, monkeypatch, capsys) -> None:
    root, store = lake
    stdin(monkeypatch, "")
    code, out, err = run_grace(monkeypatch, capsys, "ask", "-", "--lake", root)
    assert (code, out) == (0, "") and store.read("queries").height == 0
    assert store.read("embeddings").filter(pl.col("doc_id") == PAPER).height > 0  # the candidates' vectors are stored all the same
