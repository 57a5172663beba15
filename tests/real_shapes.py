"""Synthetic QASPER and QuALITY lines of every shape real release files have, for the tests of
ingest and both evaluations (and for trying them by hand: ``python -m tests.real_shapes DIR``
writes ``qasper_shapes.jsonl`` and ``quality_shapes.jsonl`` there).

Every line here is usable; :data:`UNUSABLE` lines are not (for ``--skip-invalid``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def sentences(topic: str, n: int) -> list[str]:
    return [f"The {topic} study reports finding number {k} about {topic} models and their data." for k in range(n)]


def paragraph(topic: str, n: int = 3) -> str:
    return " ".join(sentences(topic, n))


def answer(kind: str, text: str = "", evidence: list[str] | None = None) -> dict:
    """A QASPER answer record of ``kind`` (extractive, abstractive, boolean, none)."""
    return {
        "annotation_id": None, "worker_id": None, "answer_type": kind, "unanswerable": kind == "none",
        "extractive_spans": [text] if kind == "extractive" else [], "free_form_answer": text if kind == "abstractive" else "",
        "yes_no": (text == "yes") if kind == "boolean" else None, "evidence": evidence or [], "highlighted_evidence": None,
    }


def paper(pid: str | None, title: str, sections: list, questions: list | None, **extra: object) -> dict:
    line = {"id": pid, "split": "test", "title": title, "abstract": paragraph(title.lower(), 2), "sections": sections,
            "figures_and_tables": [], "questions": questions, **extra}
    if pid == "<missing>":
        del line["id"]
    return line


def qasper_lines() -> list[dict]:
    """One paper per shape (see each comment); papers 4 and 5 have no question that can be scored."""
    intro = paragraph("parsing", 4)
    return [
        # 1: sections with an empty and a null name; multi-annotator and unanswerable questions; text with '<unk>'
        paper("2101.00001", "Parsing With Trees", [
            {"name": "", "paragraphs": ["Untitled opening of the paper. " + paragraph("parsing")]},
            {"name": "Introduction", "paragraphs": [intro]},
            {"name": None, "paragraphs": ["Rare words become the <unk> token. " + paragraph("vocabulary")]},
        ], [
            {"id": "q1a", "question": "What do rare words become?", "answers": [
                answer("extractive", "the <unk> token", ["Rare words become the <unk> token."]),
                answer("abstractive", "an unknown-word token"), answer("boolean", "yes")]},
            {"id": "q1b", "question": "Which GPU did they use?", "answers": [answer("none"), answer("none")]},
        ]),
        # 2: id null (derived from the content); two sections with the same name
        paper(None, "Repeated Results", [
            {"name": "Introduction", "paragraphs": [paragraph("tagging")]},
            {"name": "Results", "paragraphs": ["The first results table shows accuracy of 91 percent."]},
            {"name": "Results", "paragraphs": ["The second results table shows recall of 80 percent."]},
        ], [{"id": "q2a", "question": "What accuracy do they report?", "answers": [answer("extractive", "91 percent")]}]),
        # 3: id missing; empty and null paragraph lists, a null section, null lists in the answers
        paper("<missing>", "Null Lists Everywhere", [
            {"name": "Introduction", "paragraphs": [paragraph("translation")]},
            {"name": "Empty", "paragraphs": []},
            {"name": "Nothing", "paragraphs": None},
            None,
            {"name": "Method", "paragraphs": [None, "We translate with beam search of width five.", ""]},
        ], [
            {"id": "q3a", "question": "Which search do they use?", "answers": [
                {**answer("abstractive", "beam search"), "evidence": None, "extractive_spans": None}]},
            {"id": "q3b", "question": "A question with null answers?", "answers": None},
        ], figures_and_tables=None),
        # 4: questions null (nothing to evaluate)
        paper("2101.00004", "No Questions", [{"name": "Introduction", "paragraphs": [paragraph("speech")]}], None),
        # 5: questions whose annotators gave no answer at all (no reference)
        paper("2101.00005", "No Reference Answers", [{"name": "Introduction", "paragraphs": [paragraph("vision")]}],
              [{"id": "q5a", "question": "What is left open?", "answers": [{**answer("abstractive", ""), "answer_type": "abstractive"}]}]),
        # 6: answers nested under "answer", as the official QASPER JSON release has them
        paper("2101.00006", "Nested Answers", [{"name": "1 Introduction", "paragraphs": [paragraph("summarisation", 4)]},
                                               {"name": "Data", "paragraphs": ["The corpus has 10k news articles."]}],
              [{"question_id": "q6a", "id": None, "question": "How large is the corpus?",
                "answers": [{"answer": answer("extractive", "10k news articles"), "annotation_id": "a1", "worker_id": "w1"}]}]),
    ]


ARTICLE_HTML = ("<html><body><!-- $Id: header.txt 236 2009-12-07 vlsimpson $ -->\n<p>The ship left port at dawn &amp; the crew "
                "cheered.</p><p>Captain <i>Mara</i> kept the log&#8212;every day.</p>\n<br/>She wrote it in red ink.</body></html>")


def long_article(words: int) -> str:
    """An article of about ``words`` words in paragraphs of 100."""
    para = ("The long voyage continued through the cold sea while the crew counted the days and the stars. " * 6).strip()
    return "\n\n".join([para] * max(1, words // len(para.split())))


def quality_question(qid: str | None, text: str, options: list[str] | None, gold: int | None, *, key: str = "id",
                     label: bool = False) -> dict:
    q: dict = {key: qid, "question": text, "options": options}
    if gold is not None:
        q.update({"gold_label": gold + 1} if label else {"gold_label": gold + 1, "gold_index": gold, "gold_answer": options[gold]})
    return q


def quality_lines(long_words: int = 6000) -> list[dict]:
    """One article line per shape; articles 4 and 6 have no question that can be scored."""
    opts = ["red ink", "blue ink", "pencil", "nothing"]
    return [
        # 1: article_id null (derived), HTML remnants in the article
        {"article_id": None, "title": "The Red Log", "article": ARTICLE_HTML,
         "questions": [quality_question("rl_1", "What did the captain write with?", opts, 0)]},
        # 2: article_id missing, a very long article, a question with only the 1-based gold_label
        {"title": "The Long Voyage", "article": long_article(long_words),
         "questions": [quality_question("lv_1", "What did the crew count?", ["days", "fish", "coins", "ships"], 0, label=True)]},
        # 3: the same article as line 1 with another question set (several writers): one document
        {"article_id": None, "title": "The Red Log", "article": ARTICLE_HTML, "set_unique_id": "rl_set2",
         "questions": [quality_question("rl_2", "When did the ship leave?", ["dawn", "noon", "dusk", "midnight"], 0)]},
        # 4: the unlabelled test split: no gold answers
        {"article_id": "90004", "title": "Unlabelled", "article": long_article(300),
         "questions": [quality_question("ul_1", "What continued?", ["voyage", "war", "game", "song"], None)]},
        # 5: the official release's question_unique_id; one question with null options (left out)
        {"article_id": "90005", "title": "Raw Release", "article": long_article(400),
         "questions": [quality_question("rr_1", "What did they count?", ["stars", "sheep", "waves", "gulls"], 0, key="question_unique_id"),
                       quality_question("rr_2", "Options lost?", None, None, key="question_unique_id")]},
        # 6: questions null
        {"article_id": "90006", "title": "No Questions", "article": long_article(200), "questions": None},
    ]


UNUSABLE = [
    (b"this is not JSON", "not valid JSON"),
    (json.dumps({"id": "u2", "text": "A document without a title."}).encode(), "field 'title': missing"),
    (json.dumps({"id": "../etc/passwd", "title": "T", "text": "x"}).encode(), "field 'id': id contains '/'"),
]
"""Lines no reader can use, with what their one-line message says."""


def jsonl(lines: list) -> bytes:
    return b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines)


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "qasper_shapes.jsonl").write_bytes(jsonl(qasper_lines()))
    (out / "quality_shapes.jsonl").write_bytes(jsonl(quality_lines()))
    (out / "with_invalid.jsonl").write_bytes(jsonl([*qasper_lines()[:2], *(b for b, _ in UNUSABLE), *quality_lines()[:1]]))
    print(f"wrote qasper_shapes.jsonl, quality_shapes.jsonl and with_invalid.jsonl to {out}")
