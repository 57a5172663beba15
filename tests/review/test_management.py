"""Review management on synthetic lakes: quorum and majority over votes from several channels,
deadlines returning claims to the pool, expected review seconds in the cost, the verifier as
one member of a mixed pool, and the reviewer_stats view (counts, seconds, agreement, Fleiss'
kappa) checked against hand-computed values."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from flows.cli import _register, app
from flows.review import dispatch_reviews
from flows.score import score_round
from flows.verdicts import ingest_verdict_file
from grace_core.settings_groups import VERIFIER
from grace_core.decisions import decide
from storage.lake import Lake
from tests.review.conftest import T0, build_lake, key_of, signed_as, stage

pytestmark = [pytest.mark.usefixtures("prefect_server"), pytest.mark.slow, pytest.mark.e2e]  # flows on the session's Prefect server

_register()
RUNNER = CliRunner()


def answer(lake: Lake, name: str, rows: list[tuple], now: datetime = T0) -> str:
    """Ingest a JSONL verdict file of ``rows`` (claim_id, reviewer, verdict[, seconds[, round]]),
    signed by the rows' reviewer."""
    keys = ("claim_id", "reviewer", "verdict", "seconds_spent", "round")
    data = "".join(json.dumps(dict(zip(keys, r))) + "\n" for r in rows)
    return ingest_verdict_file(lake, name, signed_as(lake, rows[0][1], name, data), now).summary()


def deferred(lake: Lake, round_id: int) -> list[tuple[str, str]]:
    """(claim, reviewer) of the round's deferrals, sorted."""
    return sorted(lake.read("deferrals", rounds=[round_id]).select("claim_id", "reviewer").rows())


def test_quorum_and_majority_over_votes_from_several_channels(tmp_path: Path, reviewers, monkeypatch: pytest.MonkeyPatch) -> None:
    reviewers("alice", "bob", "carol", overlap=3)
    monkeypatch.setenv("GRACE_QUORUM", "2")
    lake = build_lake(str(tmp_path / "lake"), rounds=(1,))
    dispatch_reviews(stage(lake, 1))
    assert len(deferred(lake, 1)) == 12  # 4 claims × 3 reviewers
    answer(lake, "alice.jsonl", [("c:1", "alice", "confirm"), ("c:2", "alice", "reject"), ("c:3", "alice", "confirm"), ("c:4", "alice", "abstain")])
    answer(lake, "bob.jsonl", [("c:1", "bob", "confirm"), ("c:2", "bob", "reject"), ("c:4", "bob", "abstain")])
    carol = RUNNER.invoke(app, ["review", "--reviewer", "carol", "--lake", lake.uri], input=f"{key_of(lake, 'carol')}\nr\n\nq\n")  # c:1 first
    assert "carol: 1 recorded" in carol.stdout
    score_round(stage(lake, 2, now=T0 + timedelta(hours=1)))  # round 2's settle step decides the votes
    decisions = {r["claim_id"]: (r["n_votes"], r["decision"]) for r in lake.read("decisions", rounds=[2]).to_dicts()}
    # c:1 2 confirm vs 1 reject; c:2 2 rejects; c:3 one decisive vote is below quorum; c:4 two abstentions make no
    # quorum (DESIGN §5: only decisive votes count) and carol has not answered it: pending too
    assert decisions == {"c:1": (3, "confirm"), "c:2": (2, "reject"), "c:3": (1, "pending"), "c:4": (2, "pending")}
    assert lake.read("sources", rounds=[2])["claim_id"].to_list() == ["c:1"]  # promoted
    status = dict(lake.query("SELECT claim_id, status FROM claim_status WHERE claim_id LIKE 'c:%'").rows())
    assert (status["c:1"], status["c:2"]) == ("grounded", "refuted")
    channels = lake.read("verdicts").group_by("channel").len().sort("channel").rows()
    assert channels == [("file", 7), ("terminal", 1)]  # every raw vote kept, with its channel
    outcomes = lake.query("SELECT claim_id, n_confirm, n_reject, n_abstain, outcome FROM verdict_outcomes ORDER BY claim_id").rows()
    assert outcomes == [("c:1", 2, 1, 0, "confirm"), ("c:2", 0, 2, 0, "reject"), ("c:3", 1, 0, 0, "pending"), ("c:4", 0, 0, 2, "pending")]
    # round 2: decided claims stay out, and so do claims still waiting for a reviewer before the deadline
    dispatch_reviews(stage(lake, 2, now=T0 + timedelta(hours=1)))
    assert deferred(lake, 2) == []


def test_quorum_two_one_confirm_is_pending_everywhere_and_the_second_confirms(tmp_path: Path, reviewers, monkeypatch: pytest.MonkeyPatch) -> None:
    """One decision model (DESIGN §5): under quorum 2 a lone confirm is pending in the pipeline
    (not promoted, still queued) and in every view; the second confirm makes it confirmed
    everywhere, and confirmed equals promoted."""
    reviewers("alice", "bob", overlap=2, use_verifier=True)  # the verifier's lone confirm must not count either
    monkeypatch.setenv("GRACE_QUORUM", "2")
    lake = build_lake(str(tmp_path / "lake"), rounds=(1,))
    with monkeypatch.context() as m:
        m.setenv("GRACE_USE_VERIFIER", "false")
        dispatch_reviews(stage(lake, 1))
    answer(lake, "alice.jsonl", [("c:1", "alice", "confirm")])

    def views() -> tuple:
        status = lake.query("SELECT status, decision FROM claim_status WHERE claim_id = 'c:1'").row(0)
        outcome = lake.query("SELECT outcome FROM verdict_outcomes WHERE claim_id = 'c:1'")["outcome"].to_list()
        metrics = lake.query("SELECT n_confirmed, n_pending FROM round_metrics WHERE round = 1").row(0)
        queued = lake.query("SELECT reviewer FROM review_queue WHERE claim_id = 'c:1' ORDER BY reviewer")["reviewer"].to_list()
        promoted = lake.read("sources").filter(pl.col("source_kind") == "verified")["claim_id"].to_list()
        return status, outcome, metrics, queued, promoted

    score_round(stage(lake, 2, now=T0 + timedelta(hours=1)))
    status, outcome, metrics, queued, promoted = views()
    assert status[1] == "pending" and status[0] != "grounded"
    assert outcome == ["pending"] and metrics == (0, 4) and queued == ["bob"] and promoted == []

    answer(lake, "bob.jsonl", [("c:1", "bob", "confirm")])
    score_round(stage(lake, 3, now=T0 + timedelta(hours=2)))
    status, outcome, metrics, queued, promoted = views()
    assert status == ("grounded", "confirm")
    assert outcome == ["confirm"] and metrics == (1, 3) and queued == [] and promoted == ["c:1"]
    confirmed = lake.query("SELECT sum(n_confirmed) AS n FROM round_metrics")["n"][0]
    assert confirmed == len(promoted)


def test_a_claim_without_verdict_by_its_deadline_returns_to_the_pool(tmp_path: Path, reviewers) -> None:
    reviewers("alice", deadline_hours=24)
    lake = build_lake(str(tmp_path / "lake"), rounds=(1,))
    dispatch_reviews(stage(lake, 1))
    answer(lake, "a.jsonl", [("c:1", "alice", "confirm")])
    score_round(stage(lake, 2, now=T0 + timedelta(hours=12)))  # settles c:1 (confirmed, promoted)
    dispatch_reviews(stage(lake, 2, now=T0 + timedelta(hours=12)))
    assert deferred(lake, 2) == []  # still within the deadline
    queue = lake.query("SELECT claim_id, round, overdue FROM review_queue WHERE reviewer = 'alice' ORDER BY claim_id").rows()
    assert queue == [("c:2", 1, True), ("c:3", 1, True), ("c:4", 1, True)]  # the view compares with the clock: T0 is past
    score_round(stage(lake, 3, now=T0 + timedelta(hours=30)))
    dispatch_reviews(stage(lake, 3, now=T0 + timedelta(hours=30)))
    assert deferred(lake, 3) == [("c:2", "alice"), ("c:3", "alice"), ("c:4", "alice")]
    assert lake.read("deferrals", rounds=[3])["deadline"].unique().to_list() == [T0 + timedelta(hours=54)]
    # the old packet's answers are closed; answers without a round go to the open assignment
    report = answer(lake, "late.jsonl", [("c:2", "alice", "reject", 9, 1), ("c:3", "alice", "reject", 9)])
    assert report.startswith("late.jsonl: 1 verdict recorded, 1 bad row quarantined")
    assert lake.read("verdicts").filter(pl.col("claim_id") == "c:3")["round"].to_list() == [3]


def test_expected_review_seconds_enter_the_cost_and_reassignment_prefers_new_reviewers(tmp_path: Path, reviewers) -> None:
    reviewers("alice", "bob")
    lake = build_lake(str(tmp_path / "lake"), rounds=(1, 2))
    dispatch_reviews(stage(lake, 1))
    first = lake.read("deferrals", rounds=[1])
    # nearest-prior distance 0 → ε = 0.01, plus μ·t = 0.002 × 30 s (no history) × 1 human per claim
    assert first["cost"].to_list() == pytest.approx([0.07] * 4)
    assert deferred(lake, 1) == [("c:1", "alice"), ("c:2", "bob"), ("c:3", "alice"), ("c:4", "bob")]
    answer(lake, "alice.jsonl", [("c:1", "alice", "abstain", 5), ("c:3", "alice", "abstain", 15)])
    answer(lake, "bob.jsonl", [("c:2", "bob", "abstain", 25), ("c:4", "bob", "abstain", 35)])
    dispatch_reviews(stage(lake, 2, now=T0 + timedelta(hours=1)))
    second = lake.read("deferrals", rounds=[2])
    assert second["cost"].to_list() == pytest.approx([0.05] * 4)  # mean 20 s per verdict so far
    # abstained claims are back in the pool, each now for the reviewer who has not seen it
    assert deferred(lake, 2) == [("c:1", "bob"), ("c:2", "alice"), ("c:3", "bob"), ("c:4", "alice")]


def test_the_verifier_reviews_its_share_of_a_mixed_pool_at_once(local_lake: Lake, reviewers) -> None:
    reviewers("alice", use_verifier=True)
    out = dispatch_reviews(stage(local_lake, 1))
    assert deferred(local_lake, 1) == [("c:1", "alice"), ("c:2", VERIFIER), ("c:3", "alice"), ("c:4", VERIFIER)]
    d = local_lake.read("deferrals", rounds=[1])
    assert d["cost"].to_list() == pytest.approx([0.04] * 4)  # half the claims go to a human: t = 30 s × 1/2
    assert d.filter(pl.col("reviewer") == VERIFIER)["deadline"].to_list() == [T0, T0]
    v = local_lake.read("verdicts")
    assert sorted(v["claim_id"]) == ["c:2", "c:4"] and set(v["channel"]) == {VERIFIER} and sum(out["verdicts"].values()) == 2
    assert out["packets"] == {"alice": 2}


def vote(claim: str, reviewer: str, verdict: str, seconds: float | None, rnd: int = 1, minute: int = 0) -> dict:
    """One stored vote on a claim of document d."""
    return {"doc_id": "d", "claim_id": claim, "round": rnd, "reviewer": reviewer, "verdict": verdict, "seconds_spent": seconds,
            "channel": "file", "created_at": datetime(2026, 3, 2, 10, minute, tzinfo=timezone.utc)}


def test_reviewer_stats_counts_seconds_agreement_and_fleiss_kappa(tmp_path: Path) -> None:
    lake = Lake.open(stage(str(tmp_path / "lake"), 1).settings())
    lake.commit("stats", {"verdicts": pl.DataFrame([
        vote("c1", "a", "confirm", 10), vote("c1", "b", "confirm", 20), vote("c1", "c", "confirm", None),
        vote("c2", "a", "confirm", 20), vote("c2", "b", "reject", 20), vote("c2", "b", "confirm", 20, minute=5),  # b's latest counts
        vote("c2", "c", "reject", None),
        vote("c3", "a", "reject", 30), vote("c3", "b", "reject", 20), vote("c3", "c", "abstain", None),
        vote("c4", "a", "confirm", None), vote("c4", "b", "reject", 20), vote("c4", "c", "abstain", None),
        vote("c5", "a", "confirm", 40),  # a single vote: outside agreement and kappa
        vote("c1", "a", "confirm", 5, rnd=2), vote("c1", "b", "confirm", 5, rnd=2),
    ])})
    # the deferrals the votes answer, and each round's settle step (agreement compares a vote with its deferral's outcome)
    lake.commit("stats/deferrals", {"deferrals": pl.DataFrame([
        {"doc_id": "d", "claim_id": c, "round": rnd, "reviewer": r, "priority": 1.0, "confidence": 0.0, "cost": 0.1, "gain": 1.0,
         "created_at": T0} for rnd, claims in ((1, ("c1", "c2", "c3", "c4", "c5")), (2, ("c1",))) for c in claims
        for r in (("a", "b", "c") if rnd == 1 else ("a", "b"))
    ]).with_columns(pl.col("round").cast(pl.Int32))})
    votes = lake.read("verdicts")
    lake.commit("stats/settle2", {"decisions": decide(votes.filter(pl.col("round") == 1), 1).with_columns(round=pl.lit(2, pl.Int32))})
    lake.commit("stats/settle3", {"decisions": decide(votes, 1).with_columns(round=pl.lit(3, pl.Int32))})
    stats = {(r["round"], r["reviewer"]): r for r in lake.query("SELECT * FROM reviewer_stats").to_dicts()}
    a, b, c = stats[(1, "a")], stats[(1, "b")], stats[(1, "c")]
    assert (a["n_verdicts"], a["n_confirm"], a["n_reject"], a["n_abstain"]) == (5, 4, 1, 0)
    assert (b["n_verdicts"], b["n_confirm"], b["n_reject"], b["n_abstain"]) == (4, 2, 2, 0)
    assert (a["mean_seconds"], b["mean_seconds"], c["mean_seconds"]) == (25.0, 20.0, None)
    # majority outcomes c1 confirm, c2 confirm, c3 reject, c4 abstain (a 1–1 tie)
    assert (a["agreement"], b["agreement"], c["agreement"]) == pytest.approx((0.75, 0.75, 0.5))
    # Fleiss: P_i = 1, 1/3, 1/3, 0 → P̄ = 5/12; p = (6, 4, 2)/12 → P_e = 7/18; κ = (5/12 − 7/18)/(1 − 7/18) = 1/22
    assert [r["fleiss_kappa"] for r in (a, b, c)] == pytest.approx([1 / 22] * 3)
    assert stats[(2, "a")]["agreement"] == 1.0 and stats[(2, "a")]["fleiss_kappa"] is None  # all agree: P_e = 1
