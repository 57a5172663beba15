"""The ``round_costs`` view: model calls, tokens, dollars and expert seconds per round, and each
per confirmed claim, checked against hand-computed values."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest

from flows.score import fill_scoring_counts
from grace_core.decisions import decide
from storage.config import LakeConfig
from storage.lake import Lake

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def calls(round_id: int, n: int, *, prompt: int, completion: int, usd: float | None, outcome: str = "ok") -> pl.DataFrame:
    return pl.DataFrame({
        "key": [f"k{round_id}-{i}-{outcome}" for i in range(n)], "role": ["judge"] * n, "round": [round_id] * n, "model": ["m"] * n,
        "request": ["{}"] * n, "response": ["{}"] * n, "prompt_tokens": [prompt] * n, "completion_tokens": [completion] * n,
        "cost_usd": [usd] * n, "outcome": [outcome] * n, "created_at": [T0] * n,
    }, schema_overrides={"round": pl.Int32, "cost_usd": pl.Float64})


def test_round_costs_per_round_and_per_confirmed_claim(tmp_path: Path) -> None:
    lake = Lake.open(LakeConfig(lake=str(tmp_path / "lake")))
    claims = ["c1", "c2", "c3"]
    lake.commit("round1/score", {"scores": pl.DataFrame({
        "doc_id": ["d1"] * 3, "claim_id": claims, "in_prior": [False] * 3, "contradicted": [False] * 3, "rejected": [False] * 3,
        "closeness": [0.5] * 3, "closeness_norm": [0.5] * 3, "status": ["boundary"] * 3, "novelty": [0.0] * 3,
        "priority": [1.0] * 3, "confidence": [0.5] * 3, "round": [1] * 3}, schema_overrides={"round": pl.Int32})})
    lake.commit("round1/calls", {"llm_calls": pl.concat([calls(1, 4, prompt=100, completion=20, usd=0.01),
                                                          calls(1, 1, prompt=50, completion=0, usd=None, outcome="error")])})
    lake.commit("round1/dispatch", {"deferrals": pl.DataFrame({
        "doc_id": ["d1"] * 3, "claim_id": claims, "round": [1] * 3, "reviewer": ["alice"] * 3, "priority": [1.0] * 3,
        "confidence": [0.5] * 3, "cost": [0.1] * 3, "gain": [1.0] * 3, "created_at": [T0] * 3}, schema_overrides={"round": pl.Int32})})
    votes = pl.DataFrame({"doc_id": ["d1"] * 3, "claim_id": claims, "round": [1] * 3, "reviewer": ["alice"] * 3,
                          "verdict": ["confirm", "confirm", "reject"], "seconds_spent": [30.0, 50.0, 40.0], "created_at": [T0] * 3},
                         schema_overrides={"round": pl.Int32})
    lake.commit("round1/verdicts", {"verdicts": votes})
    lake.commit("round2/score", {"decisions": decide(votes).with_columns(round=pl.lit(2, pl.Int32)),
                                 "llm_calls": calls(2, 2, prompt=10, completion=5, usd=0.002)})
    fill_scoring_counts(lake, 1000)

    costs = {r["round"]: r for r in lake.query("SELECT * FROM round_costs").iter_rows(named=True)}
    assert sorted(costs) == [1, 2]
    one, two = costs[1], costs[2]
    assert (one["n_llm_calls"], one["tokens"], one["cost_usd"], one["expert_seconds"], one["n_confirmed"]) == (
        5, 4 * 120 + 50, pytest.approx(0.04), 120.0, 2)
    assert (one["llm_calls_per_confirmed"], one["tokens_per_confirmed"], one["usd_per_confirmed"], one["expert_seconds_per_confirmed"]) == (
        2.5, 265.0, pytest.approx(0.02), 60.0)
    # round 2: calls but no deferral of its own confirmed: nothing per confirmed claim
    assert (two["n_llm_calls"], two["tokens"], two["cost_usd"], two["expert_seconds"], two["n_confirmed"]) == (2, 30, pytest.approx(0.004), 0.0, 0)
    assert two["llm_calls_per_confirmed"] is None and two["expert_seconds_per_confirmed"] is None
