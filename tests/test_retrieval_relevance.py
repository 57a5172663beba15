"""Retrieval, relevance first (DESIGN §6): candidates are gathered by cosine (top k at or above a
floor) and only then reranked by α·cos + (1 − α)·ĈC; weak evidence abstains, saying why."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from grace_core.ask import ask
from grace_core.evaluation.qa_harness import HALVES, abstention_curve, abstention_metrics, paper_half
from grace_core.models.roles import Answer
from grace_core.params import ScoringParams
from grace_core.retrieval import Retrieval, select_context, weak_evidence


def candidates(cc: list[float]) -> pl.DataFrame:
    n = len(cc)
    return pl.DataFrame({"doc_id": ["d"] * n, "passage_id": [f"p{i}" for i in range(n)], "prior_id": [f"p{i}" for i in range(n)],
                         "kind": ["prior"] * n, "text": [f"text {i}" for i in range(n)], "passage_cc": cc})


def test_a_passage_below_the_floor_is_never_in_the_context_however_grounded() -> None:
    # the case: an off-topic claim (cos 0.11, ĈC 1.0) beat a relevant passage (cos 0.72, ĈC 0.3) at α = 0.5
    c = candidates([1.0, 0.3])
    ctx = select_context(c, np.array([0.11, 0.72]), Retrieval(alpha=0.5, retrieval_k=10, relevance_floor=0.2, abstain_below=0.0))
    assert ctx["passage_id"].to_list() == ["p1"]
    ctx = select_context(c, np.array([0.11, 0.72]), Retrieval(alpha=0.0, retrieval_k=10, relevance_floor=0.2, abstain_below=0.0))
    assert ctx["passage_id"].to_list() == ["p1"]  # even when grounding alone ranks


def test_grounding_reranks_only_among_the_k_most_relevant() -> None:
    c = candidates([0.0, 0.1, 0.9, 1.0])
    sim = np.array([0.8, 0.7, 0.6, 0.5])
    only_two = Retrieval(alpha=0.5, retrieval_k=2, relevance_floor=-1.0, abstain_below=-1.0, top=1)
    assert select_context(c, sim, only_two)["passage_id"].to_list() == ["p0"]  # p2, p3 are not candidates
    three = Retrieval(alpha=0.5, retrieval_k=3, relevance_floor=-1.0, abstain_below=-1.0, top=2)
    ctx = select_context(c, sim, three)
    assert ctx["passage_id"].to_list() == ["p2", "p0"]  # 0.75, 0.40; p1 0.40 loses the tie by id
    assert ctx["score"].to_list() == pytest.approx([0.75, 0.4])
    relevance_only = Retrieval(alpha=1.0, retrieval_k=3, relevance_floor=-1.0, abstain_below=-1.0, top=2)
    assert select_context(c, sim, relevance_only)["passage_id"].to_list() == ["p0", "p1"]


def test_weak_evidence() -> None:
    r = Retrieval(alpha=1.0, retrieval_k=5, relevance_floor=0.1, abstain_below=0.4)
    assert weak_evidence(select_context(candidates([1.0]), np.array([0.05]), r), r)  # nothing reaches the floor
    assert weak_evidence(select_context(candidates([1.0, 1.0]), np.array([0.2, 0.35]), r), r)
    assert not weak_evidence(select_context(candidates([0.0, 1.0]), np.array([0.2, 0.45]), r), r)


class Embedder:
    """Embeds ``text i`` as a fixed unit vector; the question as e0."""

    def __init__(self, sims: list[float]) -> None:
        self.sims = sims

    def embed(self, texts):
        out = []
        for t in texts:
            if t.startswith("text "):
                s = self.sims[int(t.split()[1])]
                out.append([s, float(np.sqrt(max(0.0, 1 - s * s)))])
            else:
                out.append([1.0, 0.0])
        return np.array(out)


class Answerer:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def answer(self, requests):
        self.asked += [r.context for r in requests]
        return [Answer("yes", None, abstained=False) for _ in requests]


class Roles:
    def __init__(self, sims: list[float]) -> None:
        self.embedder, self.answerer = Embedder(sims), Answerer()


def test_ask_abstains_on_weak_evidence_without_asking_and_says_why() -> None:
    roles = Roles([0.11, 0.25])
    r = Retrieval(alpha=0.5, retrieval_k=10, relevance_floor=0.2, abstain_below=0.3)
    res = ask("q?", candidates([1.0, 0.3]), roles, retrieval=r)
    assert res.answer.abstained and res.weak and roles.answerer.asked == []
    assert res.best_relevance == pytest.approx(0.25) and res.best_grounding == pytest.approx(0.3)
    line = res.why_abstained(r)
    assert "\n" not in line and "below 0.3" in line and "cos 0.250" in line and "ĈC 0.300" in line
    high_floor = Retrieval(alpha=0.5, retrieval_k=10, relevance_floor=0.3, abstain_below=0.0)
    res = ask("q?", candidates([1.0, 0.3]), roles, retrieval=high_floor)
    assert res.context.height == 0 and "relevance floor 0.3" in res.why_abstained(high_floor)
    res = ask("q?", candidates([1.0, 0.3]), Roles([0.11, 0.72]), retrieval=r)
    assert not res.answer.abstained and res.context["passage_id"].to_list() == ["p1"]


def test_the_defaults_come_from_the_settings() -> None:
    p = ScoringParams()
    r = Retrieval.of(p, top=3)
    assert (r.alpha, r.retrieval_k, r.relevance_floor, r.abstain_below, r.top) == (
        p.alpha, p.retrieval_k, p.relevance_floor, p.abstain_below, 3)


def test_the_halves_are_a_fixed_rule_on_the_paper_id() -> None:
    ids = [f"18{i:02d}.{i * 37:05d}" for i in range(40)]
    halves = [paper_half(i) for i in ids]
    assert set(halves) == set(HALVES) and halves == [paper_half(i) for i in ids]
    assert paper_half("1806.00738") == paper_half("1806.00738")


def test_abstention_precision_recall_and_curve() -> None:
    rows = [
        {"condition": "GRACE", "attempted": False, "unanswerable": True, "best_relevance": 0.1, "answer_f1": 1.0, "abstain_f1": 1.0},
        {"condition": "GRACE", "attempted": False, "unanswerable": False, "best_relevance": 0.2, "answer_f1": 0.0, "abstain_f1": 0.0},
        {"condition": "GRACE", "attempted": True, "unanswerable": True, "best_relevance": 0.3, "answer_f1": 0.0, "abstain_f1": 1.0},
        {"condition": "GRACE", "attempted": True, "unanswerable": False, "best_relevance": 0.6, "answer_f1": 1.0, "abstain_f1": 0.0},
    ]
    assert abstention_metrics(rows, "GRACE") == {"abstained": 2, "negatives": 2, "precision": 0.5, "recall": 0.5}
    low, high = abstention_curve(rows, "GRACE", [0.0, 0.5])
    assert (low["coverage"], low["accuracy"], low["recall"]) == (0.5, 0.5, 0.5)
    assert (high["coverage"], high["accuracy"], high["precision"], high["recall"]) == (0.25, 0.75, pytest.approx(2 / 3), 1.0)


def test_paired_bootstrap_of_grace_minus_rag() -> None:
    from grace_core.evaluation.qa_harness import paired_bootstrap

    rows = [{"doc_id": f"d{i % 5}", "question_id": f"q{i}", "condition": c, "answer_f1": v}
            for i in range(20) for c, v in (("GRACE", 0.5 + 0.1 * (i % 2)), ("RAG", 0.5))]
    d = paired_bootstrap(rows, "GRACE", "RAG", "answer_f1")
    assert d["difference"] == pytest.approx(0.05) and d["low"] - 1e-9 <= 0.05 <= d["high"] + 1e-9
    same = paired_bootstrap([{**r, "answer_f1": 0.3} for r in rows], "GRACE", "RAG", "answer_f1")
    assert (same["difference"], same["low"], same["high"]) == (0.0, 0.0, 0.0)
