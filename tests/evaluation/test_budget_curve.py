"""``grace eval expansion --budget B1,B2,…``: the protocol once per budget and the budget curve
(KF, PCR, yield, cascade and review seconds per round and budget; the smallest budget at which
KF falls from round to round), and ``--half``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grace_core.evaluation.budget_curve import budget_curve, parse_budgets, shrinks
from grace_core.evaluation.qa_harness import paper_half
from tests.evaluation.cli_errors import assert_refused
from tests.evaluation.test_expansion import invoke


def metrics(kf: list[float], deferred: list[int], consolidation: int = 0) -> dict:
    rounds = [{"round": 0, "consolidation": False, "kf": 1.0, "pcr": 0.8, "yield": None, "cascade": None, "deferred": 0}]
    for i, (k, d) in enumerate(zip(kf, deferred, strict=True), start=1):
        rounds.append({"round": i, "consolidation": i > len(kf) - consolidation, "kf": k, "pcr": 0.5, "yield": 0.9,
                       "cascade": 0.1, "deferred": d})
    return {"n_papers": 4, "rounds": rounds}


def test_budgets_parse_sorted_once_and_bad_ones_are_named() -> None:
    assert parse_budgets("30, 1,3,10,3") == [1.0, 3.0, 10.0, 30.0]
    for bad, reason in (("1,x", "'x' is not a number"), ("-1", "'-1' must be"), ("nan", "'nan' must be"), ("inf", "'inf' must be")):
        with pytest.raises(ValueError, match=reason):
            parse_budgets(bad)


def test_the_frontier_shrinks_only_when_kf_falls_every_round() -> None:
    assert shrinks([10.0, 8.0, 5.0])
    assert not shrinks([10.0, 8.0, 8.0])  # a round that does not fall
    assert not shrinks([10.0, 12.0, 5.0])
    assert not shrinks([10.0])  # one round shows no trend
    assert not shrinks([10.0, None])


def test_the_curve_names_the_smallest_budget_that_shrinks_and_prices_reviews() -> None:
    runs = {30.0: metrics([9.0, 6.0, 4.0], [40, 40, 40]), 1.0: metrics([12.0, 15.0, 20.0], [4, 4, 4]),
            10.0: metrics([10.0, 9.0, 8.0, 9.5], [20, 20, 20, 5], consolidation=1)}
    curve = budget_curve(runs, review_seconds=30.0)
    assert [b["budget"] for b in curve["budgets"]] == [1.0, 10.0, 30.0]
    assert [b["shrinks"] for b in curve["budgets"]] == [False, True, True]  # 10: the consolidation round is not in the rule
    assert curve["shrinking_budget"] == 10.0
    assert [r["review_seconds"] for r in curve["budgets"][2]["rows"]] == [1200.0, 1200.0, 1200.0]
    assert all(r["round"] >= 1 for b in curve["budgets"] for r in b["rows"])  # round 0 has no review
    assert budget_curve({1.0: runs[1.0]}, review_seconds=30.0)["shrinking_budget"] is None


def test_a_bad_budget_list_is_one_line_and_exit_2(qasper_sample: Path, tmp_path: Path) -> None:
    assert_refused(["expansion", "--data", str(qasper_sample), "--budget", "1,lots"], "--budget '1,lots': budget 'lots' is not a number", tmp_path)


@pytest.mark.slow
def test_a_budget_sweep_on_one_half_writes_a_report_per_budget_and_the_curve(qasper_sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = invoke("--data", str(qasper_sample), "--papers", "4", "--rounds", "2", "--budget", "0,30", "--half", "reporting",
                 "--out", str(out), "--lake", str(tmp_path / "lake"))
    assert res.exit_code == 0, res.output
    for budget in ("budget-0", "budget-30"):
        assert {"report.md", "metrics.json", "expansion_rounds.png", "confusion.png"} <= {p.name for p in (out / budget).iterdir()}
    curve = json.loads((out / "budget_curve.json").read_text())
    free, generous = curve["budgets"]
    assert (free["budget"], generous["budget"]) == (0.0, 30.0)
    assert all(r["deferred"] == 0 and r["review_seconds"] == 0 for r in free["rows"])  # budget 0 reviews nothing
    assert sum(r["deferred"] for r in generous["rows"]) > 0
    assert (out / "budget_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert "| budget | round | KF | PCR | yield | cascade | candidates | blocked by cost | deferred | review seconds |" in (out / "budget_curve.md").read_text()
    assert all(r["candidates"] >= r["blocked_by_cost"] + r["deferred"] for b in curve["budgets"] for r in b["rows"])
    ids = [json.loads(line)["id"] for line in qasper_sample.read_text().splitlines()[:4]]
    expected = sum(1 for d in ids if paper_half(d) == "reporting")
    assert free["n_papers"] == generous["n_papers"] == expected > 0
