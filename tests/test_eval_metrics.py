"""QASPER Answer-F1 / Evidence-F1 and QuALITY exact match, on hand cases and real dev records."""

from __future__ import annotations

import json

import pytest

from grace_core.evaluation.qasper_metrics import gold_answers, normalize_answer, paragraph_f1, score_question, token_f1
from grace_core.evaluation.quality_metrics import option_exact_match


def test_normalisation_and_token_f1() -> None:
    assert normalize_answer("The  BERT-base, model!") == "bertbase model"
    assert token_f1("a labeled feature set", "labeled features") == pytest.approx(0.4)  # P 1/3, R 1/2
    assert token_f1("nothing here", "labeled features") == 0.0
    assert token_f1("Yes", "yes.") == 1.0


def test_paragraph_f1() -> None:
    assert paragraph_f1([], []) == 1.0
    assert paragraph_f1(["p1"], []) == 0.0
    assert paragraph_f1(["p1", "p2"], ["p2", "p3", "p4"]) == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))


def test_gold_answers_and_max_over_references() -> None:
    q = {"answers": [
        {"unanswerable": False, "extractive_spans": ["labeled features", "LDA"], "free_form_answer": "", "yes_no": None, "evidence": ["para A", "FLOAT SELECTED: Table 1"]},
        {"unanswerable": False, "extractive_spans": [], "free_form_answer": "", "yes_no": False, "evidence": ["para B"]},
        {"unanswerable": True, "extractive_spans": [], "free_form_answer": "", "yes_no": None, "evidence": []},
    ]}
    golds = gold_answers(q)
    assert [(g.answer, g.evidence, g.kind) for g in golds] == [
        ("labeled features, LDA", ("para A",), "extractive"), ("No", ("para B",), "boolean"), ("Unanswerable", (), "none"),
    ]
    assert score_question("no", ["para B"], golds) == (1.0, 1.0)
    assert score_question("Unanswerable", [], golds) == (1.0, 1.0)
    assert score_question(None, None, golds) == (0.0, 0.0)


def test_every_real_qasper_question_has_gold_answers(qasper_sample) -> None:
    n = 0
    with open(qasper_sample) as f:
        for line in f:
            for q in json.loads(line)["questions"]:
                golds = gold_answers(q)
                assert golds, q["id"]
                # a gold answer scores 1 against itself
                assert score_question(golds[0].answer, list(golds[0].evidence), golds)[0] == pytest.approx(1.0) or not normalize_answer(golds[0].answer)
                n += 1
    assert n == 26


def test_option_exact_match() -> None:
    assert option_exact_match(2, 2) == 1.0 and option_exact_match(1, 2) == 0.0 and option_exact_match(None, 0) == 0.0
