"""Reviewer reliability: Dawid–Skene accuracies against simulated reviewers of known accuracy,
weighted decisions that out-weigh a reviewer who answers at random, and ``reviewer_stats``'
leave-one-out accuracy on a lake written table by table."""

from __future__ import annotations

import random

import polars as pl
import pytest

from grace_core.decisions import decide
from grace_core.reliability import estimate_reliability, vote_weights
from storage.lake import Lake

TRUE_ACCURACY = {"ada": 0.92, "ben": 0.85, "cy": 0.8, "rand1": 0.5, "rand2": 0.5}


def simulated_votes(n_claims: int, seed: int, accuracy: dict[str, float] = TRUE_ACCURACY) -> tuple[pl.DataFrame, dict[str, bool]]:
    """Every reviewer votes on every claim: right with their accuracy, else wrong."""
    rng = random.Random(seed)
    truth = {f"c{i}": rng.random() < 0.6 for i in range(n_claims)}
    rows = []
    for claim, true in truth.items():
        for reviewer, a in accuracy.items():
            says_true = true if rng.random() < a else not true
            rows.append({"doc_id": "d", "claim_id": claim, "reviewer": reviewer, "verdict": "confirm" if says_true else "reject"})
    return pl.DataFrame(rows), truth


def share_right(decisions: pl.DataFrame, truth: dict[str, bool]) -> float:
    return sum((d == "confirm") == truth[c] for c, d in decisions.select("claim_id", "decision").iter_rows()) / len(truth)


def test_dawid_skene_recovers_the_simulated_accuracies() -> None:
    votes, _ = simulated_votes(400, seed=1)
    est = dict(estimate_reliability(votes).select("reviewer", "accuracy").iter_rows())
    for reviewer, a in TRUE_ACCURACY.items():
        assert est[reviewer] == pytest.approx(a, abs=0.06), (reviewer, est)


def test_a_random_answerer_is_out_weighted_by_reliability() -> None:
    votes, truth = simulated_votes(400, seed=2)
    weights = vote_weights(estimate_reliability(votes))
    assert abs(weights["rand1"]) < 0.35 and abs(weights["rand2"]) < 0.35 and min(weights["ada"], weights["ben"], weights["cy"]) > 1.0
    plain, weighted = decide(votes), decide(votes, weights=weights)
    assert share_right(weighted, truth) > share_right(plain, truth) + 0.03  # two coin-flippers drag the plain majority
    assert share_right(weighted, truth) > 0.93
    # one reliable reviewer against one random answerer: the plain vote is a tie, the weighted one follows the reliable
    pair = votes.filter(pl.col("reviewer").is_in(["ada", "rand1"]))
    split = pair.group_by("claim_id").agg(pl.col("verdict").n_unique().alias("k")).filter(pl.col("k") == 2)["claim_id"]
    assert set(decide(pair).filter(pl.col("claim_id").is_in(split))["decision"]) == {"abstain"}
    ada = dict(pair.filter(pl.col("reviewer") == "ada").select("claim_id", "verdict").iter_rows())
    followed = decide(pair, weights=weights).filter(pl.col("claim_id").is_in(split))
    assert all(d == ada[c] for c, d in followed.select("claim_id", "decision").iter_rows())


def test_without_weights_the_decision_model_is_unchanged() -> None:
    votes, _ = simulated_votes(50, seed=3)
    assert decide(votes).equals(decide(votes, weights={r: 1.0 for r in TRUE_ACCURACY}))
    assert decide(votes, weights={}).equals(decide(votes))


def test_no_overlap_no_estimate() -> None:
    votes = pl.DataFrame({"doc_id": ["d", "d", "d"], "claim_id": ["a", "b", "b"], "reviewer": ["x", "y", "z"],
                          "verdict": ["confirm", "confirm", "abstain"]})
    est = estimate_reliability(votes)
    assert est.rows() == [("x", 0, None), ("y", 0, None), ("z", 0, None)] and vote_weights(est) == {}


def test_reviewer_stats_shows_leave_one_out_accuracy_beside_kappa(tmp_path) -> None:
    from datetime import datetime, timezone

    from storage.config import LakeConfig

    votes, _ = simulated_votes(300, seed=4, accuracy={"ada": 0.95, "ben": 0.9, "rand1": 0.5})
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    lake = Lake.open(LakeConfig(lake=str(tmp_path / "lake")))
    lake.commit("votes", {"verdicts": votes.with_columns(round=pl.lit(1, pl.Int32), created_at=pl.lit(t0))})
    stats = {r["reviewer"]: r for r in lake.query("SELECT * FROM reviewer_stats").rows(named=True)}
    # expected ≈ 0.86 for both (the others' majority errs too, which pulls it toward 1/2), 0.5 for the coin-flipper
    assert min(stats["ada"]["accuracy"], stats["ben"]["accuracy"]) > 0.75 and abs(stats["rand1"]["accuracy"] - 0.5) < 0.1
    assert stats["ada"]["fleiss_kappa"] is not None and 0 < stats["ada"]["n_overlap"] <= 300
    # hand check on one claim: ada and ben confirm, rand1 rejects → rand1 disagrees with the others' majority;
    # for ada (and ben) the others are split one to one: no majority, no estimate
    one = votes.filter(pl.col("claim_id") == "c0")
    lake2 = Lake.open(LakeConfig(lake=str(tmp_path / "lake2")))
    fixed = one.with_columns(verdict=pl.when(pl.col("reviewer") == "rand1").then(pl.lit("reject")).otherwise(pl.lit("confirm")))
    lake2.commit("votes", {"verdicts": fixed.with_columns(round=pl.lit(1, pl.Int32), created_at=pl.lit(t0))})
    acc = dict(lake2.query("SELECT reviewer, accuracy FROM reviewer_stats").rows())
    assert acc == {"ada": None, "ben": None, "rand1": 0.0}
