"""Real data as it comes: every shape of the official QASPER and QuALITY files parses, unusable
lines name file, line and field (and are listed, not fatal, with ``skip_invalid``), and the
evaluations' selection leaves out and reports what they cannot score. Synthetic lines from
tests/real_shapes.py; no models, no lake."""

from __future__ import annotations

import json

import pytest

from grace_core.documents import CHUNK_WORDS, DOCUMENT_PREFIX, content_id, parse_batch, strip_html
from grace_core.errors import InvalidBatch, InvalidLine
from grace_core.evaluation.qa_harness import DatasetMismatch, gold_reference, select_documents
from grace_core.identifiers import id_problem
from tests.real_shapes import UNUSABLE, jsonl, long_article, qasper_lines, quality_lines


def rows(frame, doc_id: str, *columns: str) -> list[tuple]:
    return frame.filter(frame["doc_id"] == doc_id).select(*columns).rows()


def test_every_qasper_shape_is_accepted() -> None:
    papers = qasper_lines()
    batch = parse_batch(jsonl(papers), "qasper_test.jsonl")
    assert batch.skipped == () and batch.documents.height == 6
    ids = batch.documents["doc_id"].to_list()
    # empty and null section names get their position; the '<unk>' of the text stays
    assert [n for n, in rows(batch.priors, "2101.00001", "name")] == ["Abstract", "Section 1", "Introduction", "Section 3"]
    assert "the <unk> token" in rows(batch.priors, "2101.00001", "text")[3][0]
    # null and missing ids are derived from the content, checked like every id
    assert ids[1].startswith(DOCUMENT_PREFIX) and ids[2].startswith(DOCUMENT_PREFIX) and ids[1] != ids[2]
    assert all(id_problem(i) is None for i in ids)
    # repeated section names stay separate priors
    assert rows(batch.priors, ids[1], "name", "text")[2:] == [
        ("Results", "The first results table shows accuracy of 91 percent."),
        ("Results", "The second results table shows recall of 80 percent."),
    ]
    # empty, null and null-item lists: only text is kept
    assert rows(batch.priors, ids[2], "name") == [("Abstract",), ("Introduction",), ("Method",)]
    assert rows(batch.priors, ids[2], "text")[2] == ("We translate with beam search of width five.",)
    # questions null: a document without questions; the official 'question_id' names a question
    assert rows(batch.documents, "2101.00004", "n_questions") == [(0,)]
    assert rows(batch.questions, "2101.00006", "question_id") == [("q6a",)]


def test_derived_ids_depend_on_the_content_only() -> None:
    line = qasper_lines()[1]
    alone = parse_batch(jsonl([line]), "a.jsonl").documents["doc_id"][0]
    reordered = dict(reversed(list(line.items())))
    elsewhere = parse_batch(jsonl([qasper_lines()[0], reordered]), "b.jsonl").documents["doc_id"][1]
    assert alone == elsewhere
    changed = {**line, "title": "Another Title"}
    assert parse_batch(jsonl([changed]), "c.jsonl").documents["doc_id"][0] != alone
    # missing, null and blank ids are the same thing
    for variant in ({k: v for k, v in line.items() if k != "id"}, {**line, "id": "  "}):
        assert parse_batch(jsonl([variant]), "d.jsonl").documents["doc_id"][0] == alone
    batch = parse_batch(jsonl([line]), "e.jsonl")
    priors = [(n, t) for n, t in batch.priors.select("name", "text").iter_rows()]
    assert alone == DOCUMENT_PREFIX + content_id(line["title"], json.dumps(priors, ensure_ascii=False))


def test_every_quality_shape_is_accepted() -> None:
    articles = quality_lines()
    batch = parse_batch(jsonl(articles), "quality_test.jsonl")
    assert batch.skipped == ()
    red, voyage = batch.documents["doc_id"][0], batch.documents["doc_id"][1]
    # lines 1 and 3 hold the same id-less article with two question sets: one document, both sets
    assert batch.documents["doc_id"].to_list() == [red, voyage, "90004", "90005", "90006"]
    assert rows(batch.questions, red, "question_id", "ord") == [("rl_1", 0), ("rl_2", 1)]
    assert rows(batch.documents, red, "line") == [(1,)]
    # HTML remnants: comment, tags and entities gone, block tags are paragraph breaks
    assert rows(batch.priors, red, "text") == [(
        "The ship left port at dawn & the crew cheered.\n\nCaptain Mara kept the log\u2014every day.\n\nShe wrote it in red ink.",)]
    # the long article is cut into chunks, every word kept
    texts = [t for t, in rows(batch.priors, voyage, "text")]
    assert len(texts) > 5 and max(len(t.split()) for t in texts) <= CHUNK_WORDS
    assert " ".join(texts).split() == articles[1]["article"].split()
    # the official 'question_unique_id' names a question; gold_label-only and unlabelled questions are kept
    assert rows(batch.questions, "90005", "question_id") == [("rr_1",), ("rr_2",)]
    assert gold_reference("quality", rows(batch.questions, voyage, "gold_json")[0][0]) == 0
    assert rows(batch.questions, "90004", "gold_json") == [(None,)]


def test_a_very_long_article_is_accepted() -> None:
    article = long_article(300_000)
    batch = parse_batch(jsonl([{"article_id": "long", "title": "Long", "article": article, "questions": []}]), "long.jsonl")
    assert batch.documents["n_words"][0] == len(article.split()) == 299_982
    assert batch.priors.height > 299 and max(len(t.split()) for t in batch.priors["text"]) <= CHUNK_WORDS


def test_the_same_article_with_other_text_or_question_is_refused() -> None:
    first = {"article_id": "a1", "title": "T", "article": "One text.", "questions": [{"id": "x", "question": "Q?"}]}
    other_text = {**first, "article": "Another text."}
    with pytest.raises(InvalidLine, match=r"^b\.jsonl: line 2: field 'article_id': document 'a1' already appears on line 1 with different content$"):
        parse_batch(jsonl([first, other_text]), "b.jsonl")
    other_question = {**first, "questions": [{"id": "x", "question": "Another?"}]}
    with pytest.raises(InvalidLine, match=r"line 2: field 'questions\[0\]\.id': question id 'x' already appears on line 1"):
        parse_batch(jsonl([first, other_question]), "b.jsonl")
    same = parse_batch(jsonl([first, first]), "b.jsonl")
    assert same.questions.height == 1


def test_strip_html_keeps_text_that_only_looks_like_tags() -> None:
    assert strip_html("a <unk> b <e1> x </e1> &notanentity c < d") == "a <unk> b <e1> x </e1> &notanentity c < d"
    assert strip_html("x<!-- never closed") == "x"
    assert strip_html("<SCRIPT>bad()</script>ok &lt;tag&gt;") == "ok <tag>"
    assert strip_html("<!--" * 50_000 + "-->") == ""  # one pass, not one per opener


def test_unusable_lines_are_one_line_each_or_skipped_and_listed() -> None:
    data = jsonl([qasper_lines()[0], *(line for line, _ in UNUSABLE), quality_lines()[0]])
    with pytest.raises(InvalidBatch) as err:
        parse_batch(data, "mixed.jsonl")
    assert str(err.value).startswith("mixed.jsonl: line 2: not valid JSON") and "\n" not in str(err.value)
    batch = parse_batch(data, "mixed.jsonl", skip_invalid=True)
    assert batch.documents.height == 2
    assert [(s.line, s.doc_id, s.field) for s in batch.skipped] == [(2, None, None), (3, "u2", "title"), (4, None, "id")]
    for s, (_, message) in zip(batch.skipped, UNUSABLE, strict=True):
        assert s.message.startswith(f"mixed.jsonl: line {s.line}: ") and message in s.message and s.reason in s.message
    only_bad = parse_batch(jsonl([line for line, _ in UNUSABLE]), "bad.jsonl", skip_invalid=True)
    assert only_bad.documents.height == 0 and len(only_bad.skipped) == 3


def test_qa_selection_skips_and_reports_documents_it_cannot_score() -> None:
    qasper = parse_batch(jsonl(qasper_lines()), "q.jsonl")
    selected, skipped = select_documents(qasper, "qasper")
    assert skipped == [
        {"line": 4, "doc_id": "2101.00004", "reason": "no questions"},
        {"line": 5, "doc_id": "2101.00005", "reason": "no question has a reference answer"},
    ]
    # unanswerable, multi-annotator, null-list and nested answers are scored; null answers are not
    assert sorted(selected.questions["question_id"]) == ["q1a", "q1b", "q2a", "q3a", "q6a"]
    assert [g.kind for g in gold_reference("qasper", rows(qasper.questions, "2101.00001", "gold_json")[0][0])] == [
        "extractive", "abstractive", "boolean"]
    assert [g.answer for g in gold_reference("qasper", rows(qasper.questions, "2101.00001", "gold_json")[1][0])] == [
        "Unanswerable", "Unanswerable"]

    quality = parse_batch(jsonl([*quality_lines(), qasper_lines()[0]]), "r.jsonl")
    selected, skipped = select_documents(quality, "quality")
    assert [(s["line"], s["reason"]) for s in skipped] == [
        (4, "no question has options and a gold answer (gold_index or gold_label)"), (6, "no questions"),
        (7, "a qasper document, not quality")]
    assert sorted(selected.questions["question_id"]) == ["lv_1", "rl_1", "rl_2", "rr_1"]


def test_qa_selection_lists_skipped_lines_and_refuses_nothing_usable() -> None:
    data = jsonl([UNUSABLE[0][0], qasper_lines()[0]])
    _, skipped = select_documents(parse_batch(data, "m.jsonl", skip_invalid=True), "qasper")
    assert skipped == [{"line": 1, "doc_id": None, "reason": "not valid JSON (Expecting value at column 1)"}]
    with pytest.raises(DatasetMismatch, match="expected quality documents, found qasper"):
        select_documents(parse_batch(jsonl(qasper_lines()), "q.jsonl"), "quality")
    with pytest.raises(DatasetMismatch, match=r"no document can be evaluated \(4 left out; first: line 1: not valid JSON"):
        select_documents(parse_batch(jsonl([UNUSABLE[0][0], *qasper_lines()[3:5], UNUSABLE[1][0]]), "n.jsonl", skip_invalid=True),
                         "qasper")
