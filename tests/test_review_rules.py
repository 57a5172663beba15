"""Hand-computed cases for review cost, the deferral rule, budgeted selection, verdict
aggregation, promotion and cascade, metrics and retrieval (DESIGN §4–§7)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from grace_core.edges import validate_edges
from grace_core.errors import InvalidVerdicts, RoundOutOfOrder
from grace_core.metrics import grounding_precision, round_metrics
from grace_core.params import ScoringParams
from grace_core.decisions import decide
from grace_core.promotion import cascade_candidates, cascade_edges, promote
from grace_core.round import round_to_run
from grace_core.retrieval import passage_closeness, retrieval_scores, top_passages
from grace_core.scoring import score_edges
from grace_core.selection import prior_distance, review_cost, select_for_review

P = ScoringParams()


def test_review_cost_is_nearest_prior_distance_floored_plus_time() -> None:
    claims = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    priors = np.array([[1.0, 0.0], [1.0, 1.0]])
    cost = review_cost(prior_distance(claims, priors), P, review_seconds=30.0)
    # nearest-prior distances 0 (→ ε), 1 − 1/√2, 0 (→ ε); plus μ·t = 0.002 · 30 = 0.06 (DESIGN §4)
    assert cost == pytest.approx([0.01 + 0.06, 1 - 2 ** -0.5 + 0.06, 0.01 + 0.06])
    assert review_cost(prior_distance(claims, np.empty((0, 2))), P, review_seconds=0.0) == pytest.approx([1.0, 1.0, 1.0])


def cand(rows: list[tuple[str, float, float, float]]) -> pl.DataFrame:
    return pl.DataFrame([{"doc_id": "d", "claim_id": c, "priority": p, "confidence": s, "cost": k} for c, p, s, k in rows])


def test_deferral_rule_defers_only_when_one_minus_sigma_times_priority_beats_cost() -> None:
    sel = select_for_review(cand([("yes", 1.0, 0.2, 0.5), ("no", 1.0, 0.6, 0.5), ("edge", 1.0, 0.5, 0.5)]), budget=10)
    # (1−σ)·Pri − Cost: yes 0.8−0.5 > 0; no 0.4−0.5 < 0; edge 0.5−0.5 = 0 (not strictly better)
    assert sel["claim_id"].to_list() == ["yes"]
    assert sel["gain"][0] == pytest.approx(0.3 / 0.5)


def test_budget_greedy_skips_what_does_not_fit_and_takes_a_later_cheaper_one() -> None:
    # gains: a (1·1−0.6)/0.6 = 0.667, b (1−0.5)/0.5 = 1.0, c (0.6−0.3)/0.3 = 1.0 → order b, c (tie by id), a
    c = cand([("a", 1.0, 0.0, 0.6), ("b", 1.0, 0.0, 0.5), ("c", 0.6, 0.0, 0.3), ("d", 0.5, 0.0, 0.35)])
    sel = select_for_review(c, budget=0.9)
    # b (0.5, 0.4 left), c (0.3, 0.1 left), a (0.6) does not fit, d (0.35) does not fit
    assert sel["claim_id"].to_list() == ["b", "c"]
    sel = select_for_review(c, budget=1.2)
    # b (0.7 left), c (0.4 left), a skipped (0.6 > 0.4), d fits (0.35)
    assert sel["claim_id"].to_list() == ["b", "c", "d"] and sel["rank"].to_list() == [1, 2, 3]
    assert sel["cost"].sum() <= 1.2


def votes(rows: list[tuple[str, str, str]]) -> pl.DataFrame:
    return pl.DataFrame([{"doc_id": "d", "claim_id": c, "reviewer": r, "verdict": v} for c, r, v in rows])


def test_verdict_aggregation_majority_ties_abstentions_and_quorum() -> None:
    agg = decide(votes([
        ("maj", "a", "confirm"), ("maj", "b", "confirm"), ("maj", "c", "reject"),
        ("tie", "a", "confirm"), ("tie", "b", "reject"), ("tie", "c", "abstain"),
        ("abst", "a", "abstain"), ("abst", "b", "abstain"),
        ("rej", "a", "reject"), ("rej", "b", "abstain"),
        ("few", "a", "confirm"),
    ]), quorum=2)
    got = dict(zip(agg["claim_id"], agg["decision"]))
    # quorum counts decisive votes (DESIGN §5): one reject and one abstain do not make quorum 2
    assert got == {"maj": "confirm", "tie": "abstain", "abst": "abstain", "rej": "abstain", "few": "pending"}
    with pytest.raises(InvalidVerdicts, match="unknown verdict 'maybe'"):
        decide(votes([("x", "a", "maybe")]))


def test_one_confirm_and_one_abstain_never_promote_under_quorum_two() -> None:
    one_word = votes([("x", "alice", "confirm"), ("x", "bob", "abstain")])
    assert decide(one_word, quorum=2)["decision"].to_list() == ["abstain"]
    assert decide(one_word, quorum=1)["decision"].to_list() == ["confirm"]
    assert decide(votes([("x", "alice", "confirm"), ("x", "bob", "confirm")]), quorum=2)["decision"].to_list() == ["confirm"]


def test_a_claim_waits_for_the_reviewers_of_its_latest_deferral() -> None:
    # round 1: alice and bob tie; round 2 the claim goes to carol and dave; round 3 to erin
    voted = pl.DataFrame([
        {"doc_id": "d", "claim_id": "x", "reviewer": r, "verdict": v, "round": rnd}
        for r, v, rnd in [("alice", "confirm", 1), ("bob", "reject", 1)]
    ])
    assigned = pl.DataFrame([{"doc_id": "d", "claim_id": "x", "round": rnd, "reviewer": r}
                             for rnd, r in [(1, "alice"), (1, "bob"), (2, "carol"), (2, "dave")]])
    assert decide(voted, 2, assigned=assigned.filter(pl.col("round") == 1))["decision"].to_list() == ["abstain"]  # all answered, tie
    assert decide(voted, 2, assigned=assigned)["decision"].to_list() == ["pending"]  # carol and dave have not answered
    carol = pl.concat([voted, pl.DataFrame([{"doc_id": "d", "claim_id": "x", "reviewer": "carol", "verdict": "abstain", "round": 2}])])
    assert decide(carol, 2, assigned=assigned)["decision"].to_list() == ["pending"]  # dave still out
    dave = pl.concat([carol, pl.DataFrame([{"doc_id": "d", "claim_id": "x", "reviewer": "dave", "verdict": "confirm", "round": 2}])])
    assert decide(dave, 2, assigned=assigned)["decision"].to_list() == ["confirm"]  # 2 confirm vs 1 reject, 3 decisive
    # an answered reviewer's vote of an earlier round does not answer the latest deferral
    again = pl.concat([assigned, pl.DataFrame([{"doc_id": "d", "claim_id": "x", "round": 3, "reviewer": "alice"}])])
    assert decide(voted, 3, assigned=again)["decision"].to_list() == ["pending"]


def test_each_reviewers_latest_vote_counts_once_across_rounds() -> None:
    # DESIGN §5: a 2–1 majority inside one round does not win when the pooled latest votes tie 2–2
    rows = pl.DataFrame([
        {"doc_id": "d", "claim_id": "x", "reviewer": r, "verdict": v, "round": rnd}
        for r, v, rnd in [("a", "reject", 1), ("b", "reject", 1), ("a", "confirm", 2), ("c", "confirm", 2), ("d", "confirm", 2)]
    ])
    got = decide(rows, quorum=2).row(0, named=True)
    assert (got["n_votes"], got["n_confirm"], got["n_reject"], got["decision"]) == (4, 3, 1, "confirm")
    tie = pl.concat([rows, pl.DataFrame([{"doc_id": "d", "claim_id": "x", "reviewer": "e", "verdict": "reject", "round": 1},
                                         {"doc_id": "d", "claim_id": "x", "reviewer": "f", "verdict": "reject", "round": 3}])])
    assert decide(tie, quorum=2)["decision"].to_list() == ["abstain"]  # a's latest is confirm: 3 confirm vs 3 reject


def _edges(rows):
    return validate_edges(pl.DataFrame([{"doc_id": "d", "source_id": s, "source_kind": k, "claim_id": c, "label": "entails"} for s, k, c in rows]))


def test_promotion_and_cascade_change_statuses_as_designed() -> None:
    base = _edges([
        ("p", "prior", "g"), ("r1", "response", "g"), ("r1", "response", "x"), ("r2", "response", "x"),
        ("r2", "response", "y"), ("r1", "response", "z"), ("r2", "response", "w"),
    ])
    before = score_edges(base, P)
    assert dict(zip(before["claim_id"], before["status"])) == {"g": "grounded", "x": "boundary", "y": "boundary", "z": "boundary", "w": "boundary"}
    decisions = pl.DataFrame({"doc_id": ["d"] * 3, "claim_id": ["x", "z", "w"], "decision": ["confirm", "reject", "abstain"]})
    claims = pl.DataFrame({"doc_id": ["d"] * 5, "claim_id": ["g", "x", "y", "z", "w"], "text": ["G.", "X.", "Y.", "Z.", "W."]})
    promo = promote(decisions, claims)
    assert promo.sources.to_dicts() == [{"doc_id": "d", "source_id": "v:x", "source_kind": "verified", "text": "X.", "claim_id": "x"}]
    assert promo.rejected.to_dicts() == [{"doc_id": "d", "claim_id": "z"}]
    # cascade: the judge says v:x entails y, has nothing to say on z, contradicts w
    pairs = cascade_candidates(promo.sources, before)
    assert sorted(pairs["claim_id"]) == ["w", "y", "z"]
    labels = {"y": "entails", "z": "neutral", "w": "contradicts"}
    judged = pairs.with_columns(label=pl.col("claim_id").replace_strict(labels))
    new_edges = cascade_edges(judged)
    assert sorted(new_edges.to_dicts(), key=lambda r: r["claim_id"]) == [
        {"doc_id": "d", "source_id": "v:x", "source_kind": "verified", "claim_id": "w", "label": "contradicts"},
        {"doc_id": "d", "source_id": "v:x", "source_kind": "verified", "claim_id": "y", "label": "entails"},
    ]
    after = score_edges(pl.concat([base, promo.edges, new_edges]), P, rejected=promo.rejected)
    status = dict(zip(after["claim_id"], after["status"]))
    # w: contradicted by a (verified) prior and entailed by none → Refuted (DESIGN §3)
    assert status == {"g": "grounded", "x": "grounded", "y": "grounded", "z": "refuted", "w": "refuted"}


def test_claims_confirmed_together_are_not_cascade_targets_of_each_other() -> None:
    """Two claims confirmed in one promotion: neither is judged against the other, so a
    contradiction between them cannot turn a confirmed claim contested (Boundary)."""
    decisions = pl.DataFrame({"doc_id": ["d"] * 2, "claim_id": ["x", "w"], "decision": ["confirm", "confirm"]})
    claims = pl.DataFrame({"doc_id": ["d"] * 3, "claim_id": ["x", "w", "y"], "text": ["X.", "W.", "Y."]})
    promo = promote(decisions, claims)
    scores = pl.DataFrame({"doc_id": ["d"] * 3, "claim_id": ["x", "w", "y"], "status": ["boundary"] * 3})
    pairs = cascade_candidates(promo.sources, scores)
    assert sorted(pairs.select("source_id", "claim_id").iter_rows()) == [("v:w", "y"), ("v:x", "y")]


def test_round_metrics() -> None:
    scores = pl.DataFrame({
        "doc_id": ["a", "a", "a", "b", "b"], "claim_id": ["1", "2", "3", "4", "5"],
        "status": ["grounded", "boundary", "refuted", "boundary", "grounded"],
        "from_response": [True, True, True, True, False],
    })
    decisions = pl.DataFrame({"claim_id": ["2", "4", "9"], "decision": ["confirm", "reject", "abstain"]})
    m = round_metrics(scores, decisions, cascaded=pl.DataFrame({"doc_id": ["a"], "claim_id": ["1"]}))
    assert m["pcr"] == pytest.approx(1 / 4) and m["kf"] == pytest.approx(1.0)
    assert m["yield"] == pytest.approx(1 / 3) and m["yield_decided"] == pytest.approx(1 / 2)
    assert m["cascade"] == pytest.approx(0.5)
    assert (m["grounded"], m["boundary"], m["refuted"]) == (2, 2, 1)
    truth = pl.DataFrame({"doc_id": ["a", "b"], "claim_id": ["1", "5"], "is_true": [True, False]})
    assert grounding_precision(scores, truth) == pytest.approx(0.5)


def test_retrieval_score_and_context_dedup() -> None:
    entails = pl.DataFrame({"doc_id": ["d"] * 3, "source_id": ["s1", "s1", "s2"], "claim_id": ["a", "b", "a"]})
    scores = pl.DataFrame({"doc_id": ["d"] * 2, "claim_id": ["a", "b"], "closeness_norm": [1.0, 0.5]})
    pcc = dict(passage_closeness(entails, scores).select("source_id", "passage_cc").iter_rows())
    assert pcc == {"s1": 0.75, "s2": 1.0}
    s = retrieval_scores(np.array([1.0, 0.0]), np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([0.75, 1.0]), alpha=0.5)
    assert s == pytest.approx([0.5 + 0.375, 0.0 + 0.5])
    cands = pl.DataFrame({"passage_id": ["c1", "c2", "c3", "c4"], "prior_id": ["A", "A", "B", "C"], "score": [0.9, 0.8, 0.5, 0.7]})
    assert top_passages(cands, k=2)["passage_id"].to_list() == ["c1", "c4"]


def test_cascade_reach_counts_the_boundary_claims_whose_wording_a_claim_contains() -> None:
    from grace_core.reach import cascade_reach, selection_priority

    boundary = pl.DataFrame({"doc_id": ["d"] * 4 + ["e"], "claim_id": ["long", "short", "other", "one", "x"], "text": [
        "To foster research, we release the annotated corpus under a free license.",
        "We release the annotated corpus under a free license.",
        "The tagger runs on one GPU.",
        "Research.",  # one content word: contained in almost anything, never counted
        "We release the annotated corpus under a free license.",  # another document
    ]})
    reach = cascade_reach(boundary.filter(pl.col("doc_id") == "d"), boundary)
    assert dict(zip(reach["claim_id"], reach["reach"], strict=True)) == {"long": 1, "short": 0, "other": 0, "one": 0}
    ranked = reach.with_columns(priority=pl.Series([0.2, 0.6, 0.4, 0.1])).with_columns(sel=selection_priority(0.5))
    # Pri + λ_r·R/max R: long 0.2 + 0.5·1 = 0.7 now outranks short (0.6 + 0); λ_r = 0 leaves Pri as it was
    assert ranked["sel"].to_list() == pytest.approx([0.7, 0.6, 0.4, 0.1])
    assert ranked.with_columns(sel=selection_priority(0.0))["sel"].to_list() == pytest.approx([0.2, 0.6, 0.4, 0.1])
    none = cascade_reach(boundary.filter(pl.col("claim_id") == "other"), boundary).with_columns(priority=pl.lit(0.3))
    assert none.with_columns(sel=selection_priority(0.5))["sel"].to_list() == pytest.approx([0.3]), "no reach in the document: Pri alone"


def test_settle_decides_by_reliability_weights_when_given() -> None:
    from grace_core.round import RoundState, settle

    sources = pl.DataFrame({"doc_id": ["d", "d"], "source_id": ["p", "r"], "source_kind": ["prior", "response"],
                            "text": ["A prior.", "The tagger is fast."], "claim_id": [None, None]}, schema_overrides={"claim_id": pl.Utf8})
    claims = pl.DataFrame({"doc_id": ["d"], "claim_id": ["c"], "source_id": ["r"], "source_kind": ["response"], "text": ["The tagger is fast."]})
    edges = pl.DataFrame({"doc_id": ["d"], "source_id": ["r"], "source_kind": ["response"], "claim_id": ["c"], "label": ["entails"]})
    votes = pl.DataFrame({"doc_id": ["d"] * 3, "claim_id": ["c"] * 3, "reviewer": ["careful", "noisy1", "noisy2"],
                          "verdict": ["confirm", "reject", "reject"], "round": [1, 1, 1]}, schema_overrides={"round": pl.Int32})
    state = RoundState(sources, claims, edges, votes)

    def no_judge():
        raise AssertionError("nothing is promoted, so no judge is needed")

    plain = settle(state, P, no_judge, quorum=1, round_id=2)
    assert plain.decisions["decision"].to_list() == ["reject"] and plain.scores["status"].to_list() == ["refuted"]
    # log-odds weights: a reviewer right 95% of the time outweighs two at chance level or below
    weighted = settle(state, P, lambda: None, quorum=1, round_id=2, weights={"careful": 2.94, "noisy1": 0.1, "noisy2": -0.2})
    assert weighted.decisions["decision"].to_list() == ["confirm"]
    assert weighted.promotion.sources["claim_id"].to_list() == ["c"]


def test_settle_scores_again_only_the_documents_that_gained_verified_priors() -> None:
    from grace_core.round import RoundState, score_state, settle

    def doc(d: str, extra: list[tuple[str, str, str]]) -> pl.DataFrame:
        return _edges([("p", "prior", "g"), ("r1", "response", "g"), ("r1", "response", "x"), *extra]).with_columns(doc_id=pl.lit(d))

    # d1, d2: x is their only Boundary claim (so the judge has nothing to read); d3 keeps its own
    edges = pl.concat([doc("d1", []), doc("d2", [("r2", "response", "g")]), doc("d3", [("r2", "response", "y"), ("r2", "response", "x")])])
    sources = edges.select("doc_id", "source_id", "source_kind").unique().with_columns(text=pl.lit("A source."), claim_id=pl.lit(None, pl.Utf8))
    claims = edges.filter(pl.col("source_kind") == "response").select("doc_id", "claim_id", "source_id", "source_kind").unique(
        ["doc_id", "claim_id"]).with_columns(text=pl.format("Claim {} of {}.", "claim_id", "doc_id"))
    votes = pl.DataFrame({"doc_id": ["d1", "d2"], "claim_id": ["x", "x"], "reviewer": ["alice"] * 2, "verdict": ["confirm"] * 2,
                          "round": [1, 1]}, schema_overrides={"round": pl.Int32})
    s = settle(RoundState(sources, claims, edges, votes), P, lambda: None, quorum=1, round_id=2)
    assert sorted(s.promotion.sources["doc_id"]) == ["d1", "d2"]
    everything = score_state(s.state, P, s.promotion.rejected)
    assert s.scores.equals(everything.sort("doc_id", "claim_id"))  # the same as scoring every document again
    status = {(d, c): st for d, c, st in s.scores.select("doc_id", "claim_id", "status").iter_rows()}
    assert (status["d1", "x"], status["d2", "x"], status["d3", "x"], status["d3", "y"]) == ("grounded", "grounded", "boundary", "boundary")


def test_prior_distances_embed_nothing_for_a_document_without_priors() -> None:
    from grace_core.review import prior_distances

    class Seen:
        def __init__(self) -> None:
            self.texts: list[str] = []

        def embed(self, texts):
            self.texts += texts
            return np.array([[1.0, 0.0] if "cat" in t else [0.0, 1.0] for t in texts])

    claims = pl.DataFrame({"doc_id": ["a", "a", "b"], "claim_id": ["1", "2", "3"], "text": ["A cat.", "A dog.", "B claim."]})
    priors = pl.DataFrame({"doc_id": ["a"], "text": ["The cat sat."]})
    seen = Seen()
    got = prior_distances(claims, priors, seen)
    assert got["prior_distance"].to_list() == pytest.approx([0.0, 1.0, 1.0])
    assert sorted(seen.texts) == ["A cat.", "A dog.", "The cat sat."]  # b's claim never embedded


def test_a_round_may_be_run_again_but_never_skip_one() -> None:
    assert round_to_run(None, 3, "./lake") == 3  # the next round by default
    assert round_to_run(3, 3, "./lake") == 3 and round_to_run(1, 3, "./lake") == 1  # the next one, or one run before
    with pytest.raises(RoundOutOfOrder, match="round 4 would skip round 3: the next round of lake ./lake is 3"):
        round_to_run(4, 3, "./lake")
    with pytest.raises(RoundOutOfOrder, match="round 9 would skip rounds 3–8"):
        round_to_run(9, 3, "./lake")
