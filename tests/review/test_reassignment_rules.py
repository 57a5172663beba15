"""Pure rules of "no claim waits forever" (DESIGN §4–§5): a claim whose reviewer let it lapse
goes to another reviewer, the deadline may be counted in rounds as well as hours (whichever
comes first), and a selection says how many candidates the rule (1 − σ)·Pri > Cost blocked and
by how much instead of deferring nothing in silence."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import polars as pl
import pytest

from flows.settings import build_settings
from grace_core.assignment import assign_reviewers, busy_claims, lapsed_reviewers, open_assignments, overdue_by_rounds
from grace_core.errors import InvalidSettings
from grace_core.params import ScoringParams
from grace_core.round import deferral
from grace_core.settings_groups import ReviewConfig
from grace_core.selection import CostReport, cost_report, select_for_review

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)
POOL = ["alice", "bob", "carol", "dave"]


def chosen(*ids: str) -> pl.DataFrame:
    """Selected claims of document d, in selection order."""
    return pl.DataFrame({"doc_id": ["d"] * len(ids), "claim_id": list(ids), "rank": list(range(1, len(ids) + 1))})


def who(claim: str, reviewers: list[str]) -> pl.DataFrame:
    """``doc_id, claim_id, reviewer`` rows of ``claim`` of document d."""
    return pl.DataFrame({"doc_id": ["d"] * len(reviewers), "claim_id": [claim] * len(reviewers), "reviewer": reviewers},
                        schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8, "reviewer": pl.Utf8})


def reviewers_of(df: pl.DataFrame, claim: str) -> list[str]:
    return df.filter(pl.col("claim_id") == claim)["reviewer"].to_list()


def test_a_lapsed_claim_goes_to_another_reviewer_in_every_round_and_position() -> None:
    for round_id in range(1, 9):
        for position in range(4):
            ids = [f"x{i}" for i in range(position)] + ["y"]
            plain = assign_reviewers(chosen(*ids), POOL, overlap=1, round_id=round_id)
            first = reviewers_of(plain, "y")[0]  # whom the rotation gives it to
            again = assign_reviewers(chosen(*ids), POOL, overlap=1, round_id=round_id, lapsed=who("y", [first]))
            assert reviewers_of(again, "y") != [first], (round_id, position)
            # the other claims keep their reviewers: only the lapsed claim moves
            assert again.filter(pl.col("claim_id") != "y").equals(plain.filter(pl.col("claim_id") != "y"))


def test_reassignment_order_is_fresh_reviewers_then_voters_then_those_who_let_it_lapse() -> None:
    # round 1, position 0, overlap 2 on four: the rotation is alice, bob, carol, dave
    assert reviewers_of(assign_reviewers(chosen("y"), POOL, 2, 1), "y") == ["alice", "bob"]
    got = assign_reviewers(chosen("y"), POOL, 2, 1, answered=who("y", ["alice"]), lapsed=who("y", ["bob", "carol"]))
    assert reviewers_of(got, "y") == ["dave", "alice"]  # the one fresh reviewer, then the voter before the lapsed
    # when only those who let it lapse are left, it goes back to one of them: a claim is never left unassigned
    got = assign_reviewers(chosen("y"), ["carol", "dave"], 1, 1, lapsed=who("y", ["carol", "dave"]))
    assert reviewers_of(got, "y") == ["carol"]
    assert reviewers_of(assign_reviewers(chosen("y"), ["carol"], 1, 1, lapsed=who("y", ["carol"])), "y") == ["carol"]


def test_lapsed_reviewers_are_those_assigned_who_never_answered_the_claim() -> None:
    deferrals = pl.DataFrame({
        "doc_id": ["d"] * 6, "claim_id": ["x", "x", "x", "y", "y", "z"], "round": [1, 1, 3, 1, 2, 2],
        "reviewer": ["carol", "alice", "bob", "carol", "carol", "bob"],
    })
    verdicts = pl.DataFrame({  # alice answered x in round 1; carol answered y in round 2 (late for round 1, but she voted)
        "doc_id": ["d", "d"], "claim_id": ["x", "y"], "round": [1, 2], "reviewer": ["alice", "carol"],
    })
    got = lapsed_reviewers(deferrals, verdicts)
    assert got.rows() == [("d", "x", "bob"), ("d", "x", "carol"), ("d", "z", "bob")]


def deferral_row(claim: str, rnd: int, reviewer: str, deadline: datetime) -> dict:
    return {"doc_id": "d", "claim_id": claim, "round": rnd, "reviewer": reviewer, "deadline": deadline, "rank": 1}


def test_the_deadline_in_rounds_and_in_hours_whichever_comes_first() -> None:
    deferrals = pl.DataFrame([
        deferral_row("a", 5, "carol", NOW + timedelta(hours=70)),  # 2 rounds ago, hours left: overdue by rounds
        deferral_row("b", 6, "carol", NOW + timedelta(hours=40)),  # 1 round ago, hours left: still busy
        deferral_row("c", 6, "carol", NOW - timedelta(hours=1)),  # 1 round ago, hours passed: overdue by hours
        deferral_row("d", 7, "carol", NOW + timedelta(hours=72)),  # deferred this round
    ], schema_overrides={"deadline": pl.Datetime("us", "UTC")})
    none = pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8, "round": pl.Int64, "reviewer": pl.Utf8})
    open_rows = open_assignments(deferrals, none, NOW)
    assert sorted(busy_claims(open_rows)["claim_id"]) == ["a", "b", "d"]  # hours only
    assert overdue_by_rounds(open_rows, 7, None).equals(open_rows)
    assert sorted(busy_claims(overdue_by_rounds(open_rows, 7, 2))["claim_id"]) == ["b", "d"]
    assert sorted(busy_claims(overdue_by_rounds(open_rows, 7, 1))["claim_id"]) == ["d"]
    assert sorted(busy_claims(overdue_by_rounds(open_rows, 8, 1))["claim_id"]) == []


def test_the_deadline_in_rounds_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_settings().deadline_rounds is None
    monkeypatch.setenv("GRACE_DEADLINE_ROUNDS", "2")
    assert build_settings().deadline_rounds == 2
    monkeypatch.setenv("GRACE_DEADLINE_ROUNDS", "0")
    with pytest.raises(InvalidSettings, match="GRACE_DEADLINE_ROUNDS"):
        build_settings()
    assert ReviewConfig(deadline_rounds=3).deadline_rounds == 3


def candidates(rows: list[tuple[str, float, float, float]]) -> pl.DataFrame:
    """``claim_id, priority, confidence, cost`` of document d."""
    return pl.DataFrame(rows, schema=["claim_id", "priority", "confidence", "cost"], orient="row").with_columns(doc_id=pl.lit("d"))


def test_the_cost_report_says_every_candidate_is_blocked_and_by_how_much() -> None:
    # (1 − σ)·Pri against Cost: 0.4 vs 0.6, 0.3 vs 0.45, 0.5 vs 0.5 (equal is blocked: the rule is strict)
    pool = candidates([("a", 0.8, 0.5, 0.6), ("b", 0.5, 0.4, 0.45), ("c", 1.0, 0.5, 0.5)])
    picked = select_for_review(pool, budget=6.0)
    report = cost_report(pool, picked, 6.0)
    assert picked.height == 0 and report.all_blocked
    assert report == CostReport(candidates=3, deferred=0, spent=0.0, budget=6.0, blocked_by_cost=3,
                                shortfall_min=pytest.approx(0.0), shortfall_max=pytest.approx(0.2), over_budget=0)


def test_the_cost_report_keeps_deferring_while_the_rule_holds_and_budget_is_left() -> None:
    # gains: a (0.9 − 0.3)/0.3 = 2, b (0.8 − 0.5)/0.5 = 0.6, c (0.6 − 0.2)/0.2 = 2 … d blocked by 0.1, e blocked by 0.7
    pool = candidates([("a", 0.9, 0.0, 0.3), ("b", 0.8, 0.0, 0.5), ("c", 0.6, 0.0, 0.2), ("d", 0.5, 0.0, 0.6), ("e", 0.1, 0.0, 0.8),
                       ("f", None, 0.0, 0.1)])  # no priority: not a candidate
    picked = select_for_review(pool, budget=0.6)
    assert picked["claim_id"].to_list() == ["a", "c"]  # b does not fit in the 0.1 left
    report = cost_report(pool, picked, 0.6)
    assert not report.all_blocked
    assert (report.candidates, report.deferred, report.blocked_by_cost, report.over_budget) == (5, 2, 2, 1)
    assert report.spent == pytest.approx(0.5) and report.shortfall_min == pytest.approx(0.1) and report.shortfall_max == pytest.approx(0.7)
    assert report.as_dict()["blocked_by_cost"] == 2 and CostReport(**report.as_dict()) == report  # stored as JSON, read back
    empty = cost_report(pool.head(0), picked.head(0), 0.6)
    assert (empty.candidates, empty.blocked_by_cost, empty.shortfall_min, empty.all_blocked) == (0, 0, None, False)


class Texts:
    """Claim texts of document d (a grace_core.round.DocumentTexts); no prior unit is needed:
    the candidates carry their stored review inputs."""

    def claim_texts(self, doc_ids=None):
        return pl.DataFrame({"doc_id": ["d", "d"], "claim_id": ["x", "y"], "text": ["X holds.", "Y holds."]})

    def prior_units(self, doc_ids=None):
        raise AssertionError("stored review inputs: nothing to measure")


def test_the_deferral_step_returns_its_cost_report() -> None:
    scores = pl.DataFrame({
        "doc_id": ["d", "d"], "claim_id": ["x", "y"], "status": ["boundary", "boundary"], "priority": [0.5, 0.4],
        "confidence": [0.2, 0.9], "reach": [0, 0], "prior_distance": [0.3, 0.05],
    })
    decisions = pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8, "n_confirm": pl.Int32, "n_reject": pl.Int32, "decision": pl.Utf8})
    busy = pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8})
    params = ScoringParams()  # ε 0.01, μ 0.002: at 30 s a claim, Cost = d + 0.06
    step = deferral(scores, decisions, busy, Texts(), SimpleNamespace(embedder=None), params, budget=3.0, review_seconds=30.0)
    # x: (1 − 0.2)·0.5 = 0.40 > 0.36 deferred; y: (1 − 0.9)·0.4 = 0.04 < 0.11, blocked by 0.07
    assert step.chosen["claim_id"].to_list() == ["x"] and step.chosen["text"].to_list() == ["X holds."]
    assert (step.report.candidates, step.report.deferred, step.report.blocked_by_cost) == (2, 1, 1)
    assert step.report.shortfall_min == pytest.approx(0.07) and step.report.spent == pytest.approx(0.36)
    # every candidate blocked: nothing deferred, and the report says so
    costly = ScoringParams(mu=0.1)
    step = deferral(scores, decisions, busy, Texts(), SimpleNamespace(embedder=None), costly, budget=3.0, review_seconds=30.0)
    # x: Cost 0.3 + 3.0 against 0.40, short by 2.90; y: 0.05 + 3.0 against 0.04, short by 3.01
    assert step.chosen.height == 0 and step.report.all_blocked
    assert (step.report.shortfall_min, step.report.shortfall_max) == (pytest.approx(2.9), pytest.approx(3.01))
