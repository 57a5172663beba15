"""A split vote goes to the adjudicator in the next dispatch, and the adjudicator's vote breaks
the tie in the following settle step (real flows on a synthetic lake)."""

from __future__ import annotations

import json
from datetime import timedelta

import polars as pl
import pytest

from flows.review import dispatch_reviews
from flows.score import score_round
from flows.verdicts import ingest_verdict_file
from tests.review.conftest import T0, build_lake, signed_as, stage

pytestmark = [pytest.mark.usefixtures("prefect_server"), pytest.mark.slow, pytest.mark.e2e]


def test_a_split_vote_is_broken_by_the_adjudicator(tmp_path, reviewers, monkeypatch) -> None:
    reviewers("alice", "bob", "carol", overlap=2)
    monkeypatch.setenv("GRACE_ADJUDICATOR", "carol")
    lake = build_lake(str(tmp_path / "lake"))
    dispatch_reviews(stage(lake, 1))
    first = lake.read("deferrals", rounds=[1])
    pairs = first.group_by("claim_id").agg(pl.col("reviewer").sort()).filter(pl.col("reviewer").list.contains("alice") & pl.col("reviewer").list.contains("bob"))
    claim = pairs["claim_id"].sort()[0]
    for reviewer, verdict in (("alice", "confirm"), ("bob", "reject")):
        row = json.dumps({"claim_id": claim, "reviewer": reviewer, "verdict": verdict}) + "\n"
        ingest_verdict_file(lake, f"{reviewer}.jsonl", signed_as(lake, reviewer, f"{reviewer}.jsonl", row), T0)
    later = T0 + timedelta(hours=1)
    score_round(stage(lake, 2, now=later))
    assert dict(lake.read("decisions", rounds=[2]).select("claim_id", "decision").rows())[claim] == "abstain"
    dispatch_reviews(stage(lake, 2, now=later))
    again = lake.read("deferrals", rounds=[2]).filter(pl.col("claim_id") == claim)
    assert again.select("reviewer", "cost").rows() == [("carol", 0.0)]  # the adjudicator alone, outside the budget
    row = json.dumps({"claim_id": claim, "reviewer": "carol", "verdict": "reject", "round": 2}) + "\n"
    ingest_verdict_file(lake, "carol.jsonl", signed_as(lake, "carol", "carol.jsonl", row), later)
    score_round(stage(lake, 3, now=later + timedelta(hours=1)))
    decided = lake.read("decisions", rounds=[3]).filter(pl.col("claim_id") == claim).row(0, named=True)
    assert (decided["n_confirm"], decided["n_reject"], decided["decision"]) == (1, 2, "reject")
