"""QASPER's official metrics, implemented from their definitions (Dasigi et al., NAACL 2021):

- **Answer-F1**: SQuAD-style token F1 between the predicted answer and each gold answer of the
  question (lower-cased, punctuation and articles removed, whitespace collapsed), the maximum
  over the gold answers; yes/no questions compare the strings "Yes"/"No", unanswerable ones
  the string "Unanswerable", extractive answers the gold spans joined with ", ".
- **Evidence-F1**: paragraph-level F1 between the predicted and each gold evidence set (the
  maximum over gold answers); an empty prediction against an empty gold set scores 1.
  Figure/table evidence (``FLOAT SELECTED``) is left out, as in the text-only setting.

Both are averaged over questions; a question with no prediction scores 0.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass

UNANSWERABLE = "Unanswerable"
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


@dataclass(frozen=True)
class GoldAnswer:
    answer: str
    evidence: tuple[str, ...]
    kind: str  # extractive | abstractive | boolean | none


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and articles, collapse whitespace."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def token_f1(prediction: str, gold: str) -> float:
    """Token-level F1 of two answers after :func:`normalize_answer`."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def paragraph_f1(predicted: list[str], gold: list[str] | tuple[str, ...]) -> float:
    """F1 between two sets of evidence paragraphs; both empty → 1."""
    if not predicted and not gold:
        return 1.0
    same = len(set(predicted) & set(gold))
    if same == 0:
        return 0.0
    precision, recall = same / len(set(predicted)), same / len(set(gold))
    return 2 * precision * recall / (precision + recall)


def gold_answers(question: dict) -> list[GoldAnswer]:
    """The gold answers of one QASPER question record (its ``answers`` list)."""
    out = []
    for a in question["answers"]:
        if a.get("unanswerable"):
            out.append(GoldAnswer(UNANSWERABLE, (), "none"))
            continue
        if a.get("extractive_spans"):
            answer, kind = ", ".join(a["extractive_spans"]), "extractive"
        elif a.get("free_form_answer"):
            answer, kind = a["free_form_answer"], "abstractive"
        elif a.get("yes_no") is not None:
            answer, kind = ("Yes" if a["yes_no"] else "No"), "boolean"
        else:
            continue  # an annotation without any answer carries no reference
        evidence = tuple(e for e in a.get("evidence", []) if "FLOAT SELECTED" not in e)
        out.append(GoldAnswer(answer, evidence, kind))
    return out


def score_question(answer: str | None, evidence: list[str] | None, golds: list[GoldAnswer]) -> tuple[float, float]:
    """(Answer-F1, Evidence-F1) of one prediction against a question's gold answers; a missing
    prediction (``answer is None``) scores (0, 0)."""
    if answer is None or not golds:
        return 0.0, 0.0
    ans = max(token_f1(answer, g.answer) for g in golds)
    ev = max(paragraph_f1(list(evidence or []), g.evidence) for g in golds)
    return ans, ev
