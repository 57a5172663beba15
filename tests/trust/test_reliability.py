"""Reviewer reliability: Dawid–Skene accuracies against simulated reviewers of known accuracy,
weighted decisions that out-weigh a reviewer who answers at random, and the estimate as
``reviewer_stats`` shows it on a lake written table by table."""

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


def test_reviewer_stats_shows_the_dawid_skene_reliability_the_round_stored(tmp_path) -> None:
    """The audit's lake: three people, the verifier and a contrarian. Against the majority of the
    others the verifier scored 0.000 (it sat in the pair the others outvoted) exactly like a
    reviewer who always contradicts; the Dawid–Skene estimate separates them, and
    ``reviewer_stats`` shows it with the votes it rests on."""
    from datetime import datetime, timezone

    from storage.config import LakeConfig

    accuracy = {"alice": 0.9, "bob": 0.85, "carol": 0.8, "verifier": 0.93, "contrarian": 0.07}
    votes, _ = simulated_votes(300, seed=4, accuracy=accuracy)
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    lake = Lake.open(LakeConfig(lake=str(tmp_path / "lake")))
    lake.commit("votes", {"verdicts": votes.with_columns(round=pl.lit(1, pl.Int32), created_at=pl.lit(t0))})
    estimate = estimate_reliability(votes)
    lake.commit("reliability/round=2", {"reviewer_reliability": estimate.with_columns(round=pl.lit(2, pl.Int32))})
    stats = {r["reviewer"]: r for r in lake.query("SELECT * FROM reviewer_stats").rows(named=True)}
    shown = {r: stats[r]["reliability"] for r in accuracy}
    assert min(shown, key=shown.get) == "contrarian" and shown["contrarian"] < 0.2
    assert shown["verifier"] > 0.85 and min(shown["alice"], shown["bob"], shown["carol"]) > 0.7
    assert all(stats[r]["reliability_overlap"] == 300 for r in accuracy)
    assert "accuracy" not in stats["alice"] and "n_overlap" not in stats["alice"]  # the leave-one-out column is gone
    # a later estimate replaces the shown one
    lake.commit("reliability/round=3", {"reviewer_reliability": estimate.with_columns(round=pl.lit(3, pl.Int32), accuracy=pl.lit(0.5))})
    assert set(lake.query("SELECT reliability FROM reviewer_stats")["reliability"]) == {0.5}
