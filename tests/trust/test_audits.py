"""Audited precision (grace_core/audit.py): the audit pool, the stratified sample, the audit
budget, the interleaving with the deferrals, and ``round_metrics``' estimates with their Wilson
intervals on a lake written table by table."""

from __future__ import annotations

from collections import Counter

import polars as pl
import pytest

from grace_core.settings_groups import AuditConfig
from grace_core.audit import audit_pool, interleave, stratified_sample, within_budget
from grace_core.intervals import wilson_interval
from storage.lake import Lake
from tests.trust.conftest import T0, cid


def pool_of(sizes: dict[str, int]) -> pl.DataFrame:
    return pl.DataFrame([{"doc_id": d, "claim_id": f"{d}-{i}"} for d, n in sizes.items() for i in range(n)])


def test_the_sample_is_stratified_by_document_in_proportion_and_seeded() -> None:
    pool = pool_of({"a": 60, "b": 30, "c": 10})
    sample = stratified_sample(pool, 10, "audit:1:grounded")
    assert sample.height == 10 and sample.unique().height == 10
    assert Counter(sample["doc_id"]) == {"a": 6, "b": 3, "c": 1}  # proportional allocation
    assert sample.equals(stratified_sample(pool, 10, "audit:1:grounded"))  # deterministic per seed
    assert not set(sample["claim_id"]) == set(stratified_sample(pool, 10, "audit:2:grounded")["claim_id"])
    assert sample["doc_id"].to_list() != sorted(sample["doc_id"].to_list())  # not handed out document by document
    uneven = stratified_sample(pool_of({"a": 7, "b": 5, "c": 1}), 4, "s")
    assert all(abs(Counter(uneven["doc_id"])[d] - 4 * n / 13) < 1 for d, n in {"a": 7, "b": 5, "c": 1}.items())
    assert stratified_sample(pool, 500, "s").height == 100 and stratified_sample(pool, 0, "s").height == 0


def test_every_claim_of_the_pool_has_the_same_chance() -> None:
    pool = pool_of({"a": 12, "b": 6, "c": 2})
    seen = Counter(c for seed in range(2000) for c in stratified_sample(pool, 5, f"round:{seed}")["claim_id"])
    assert set(seen) == set(pool["claim_id"])
    assert all(abs(n / 2000 - 5 / 20) < 0.05 for n in seen.values()), seen  # inclusion probability n/N = 0.25


def test_the_pool_holds_undecided_response_claims_of_the_status_never_audited() -> None:
    keys = ["x1", "x2", "x3", "x4", "x5", "x6", "x7"]
    scores = pl.DataFrame({"doc_id": ["d"] * 7, "claim_id": keys,
                           "status": ["grounded", "grounded", "grounded", "grounded", "grounded", "boundary", "refuted"]})
    responses = pl.DataFrame({"doc_id": ["d"] * 6, "claim_id": ["x1", "x2", "x3", "x4", "x6", "x7"]})  # x5: a prior's claim
    decisions = pl.DataFrame({"doc_id": ["d", "d"], "claim_id": ["x2", "x3"], "decision": ["confirm", "abstain"]})
    busy = pl.DataFrame({"doc_id": ["d"], "claim_id": ["x4"]})
    audited = pl.DataFrame({"doc_id": ["d"], "claim_id": ["x1"]})
    pool = audit_pool(scores, "grounded", decisions, busy, audited, responses)
    assert pool["claim_id"].to_list() == ["x3"]  # x1 audited, x2 decided, x4 busy, x5 not from a response
    assert audit_pool(scores, "refuted", decisions, busy, audited, responses)["claim_id"].to_list() == ["x7"]


def test_the_audit_budget_skips_what_no_longer_fits() -> None:
    sample = pl.DataFrame({"claim_id": ["a", "b", "c", "d"], "cost": [0.4, 0.5, 0.3, 0.1]})
    assert within_budget(sample, 0.8)["claim_id"].to_list() == ["a", "c", "d"]
    assert within_budget(sample, 0.0).height == 0
    assert AuditConfig().audit_size("grounded") == 0 and AuditConfig(audit_refuted=3).audit_size("refuted") == 3


def test_audit_claims_are_interleaved_with_the_deferrals() -> None:
    cols = {"doc_id": pl.Utf8, "claim_id": pl.Utf8, "cost": pl.Float64, "rank": pl.Int64}
    deferred = pl.DataFrame({"doc_id": ["d"] * 20, "claim_id": [f"f{i:02d}" for i in range(20)], "cost": [0.1] * 20, "rank": range(1, 21)}, schema=cols)
    audits = pl.DataFrame({"doc_id": ["d"] * 4, "claim_id": [f"a{i}" for i in range(4)], "cost": [0.1] * 4}, schema={k: cols[k] for k in ("doc_id", "claim_id", "cost")})
    merged = interleave(deferred, audits.with_columns(rank=pl.lit(None, pl.Int64)), "audit:3")
    order = merged["claim_id"].to_list()
    assert merged["rank"].to_list() == list(range(1, 25)) and sorted(order) == sorted(deferred["claim_id"].to_list() + audits["claim_id"].to_list())
    assert [c for c in order if c.startswith("f")] == deferred["claim_id"].to_list()  # deferrals keep their order
    places = [i for i, c in enumerate(order) if c.startswith("a")]
    assert places != list(range(20, 24)) and places != list(range(4))  # neither all last nor all first
    assert interleave(deferred, audits.head(0).with_columns(rank=pl.lit(None, pl.Int64)), "s")["claim_id"].to_list() == deferred["claim_id"].to_list()


def test_round_metrics_estimate_precision_with_wilson_intervals(small_lake: Lake) -> None:
    # round 1 deferred five claims; three of them were audit samples: paper-a's claim 3 (Grounded,
    # confirmed), paper-b's claim 5 (Grounded, a split vote: abstain, so not counted) and
    # paper-c's claim 6 (Refuted, rejected: really false)
    audits = pl.DataFrame({
        "doc_id": ["paper-a", "paper-b", "paper-c"], "claim_id": [cid("paper-a", 3), cid("paper-b", 5), cid("paper-c", 6)],
        "round": [1, 1, 1], "status": ["grounded", "grounded", "refuted"], "cost": [0.1] * 3, "created_at": [T0] * 3,
    }).with_columns(pl.col("round").cast(pl.Int32))
    before = small_lake.query("SELECT n_deferred, n_confirmed, n_rejected FROM round_metrics WHERE round = 1").row(0)
    small_lake.commit("audit/round=1", {"audits": audits})
    m = small_lake.query("SELECT * FROM round_metrics ORDER BY round").rows(named=True)
    assert before == (5, 2, 1) and (m[0]["n_deferred"], m[0]["n_confirmed"], m[0]["n_rejected"]) == (2, 1, 0)  # audits left out
    assert (m[0]["n_audited_grounded"], m[0]["grounded_precision"]) == (1, 1.0)
    assert (m[0]["grounded_precision_low"], m[0]["grounded_precision_high"]) == pytest.approx(wilson_interval(1, 1))
    assert (m[0]["n_audited_refuted"], m[0]["refuted_false"]) == (1, 1.0)
    assert m[1]["n_audited_grounded"] == 0 and m[1]["grounded_precision"] is None  # nothing audited in round 2
    assert (m[1]["cum_audited_grounded"], m[1]["cum_grounded_precision"]) == (1, 1.0)  # cumulative carries round 1
    assert (m[1]["cum_refuted_false_low"], m[1]["cum_refuted_false_high"]) == pytest.approx(wilson_interval(1, 1))


def test_the_view_interval_is_the_wilson_interval_for_many_counts(small_lake: Lake) -> None:
    # ten audited Grounded claims of paper-a..: 7 confirmed, 3 rejected (decisions written directly)
    keys = [(d, cid(d, i)) for d in ("paper-a", "paper-b") for i in range(5)]
    audits = pl.DataFrame({"doc_id": [d for d, _ in keys], "claim_id": [c for _, c in keys], "round": [2] * 10,
                           "status": ["grounded"] * 10, "created_at": [T0] * 10}).with_columns(pl.col("round").cast(pl.Int32))
    verdicts = ["confirm"] * 7 + ["reject"] * 3
    decisions = pl.DataFrame({"doc_id": [d for d, _ in keys], "claim_id": [c for _, c in keys], "round": [3] * 10,
                              "n_votes": [1] * 10, "n_confirm": [int(v == "confirm") for v in verdicts],
                              "n_reject": [int(v == "reject") for v in verdicts], "n_abstain": [0] * 10, "quorum": [1] * 10,
                              "decision": verdicts})
    small_lake.commit("audit/round=2", {"audits": audits, "decisions": decisions})
    row = small_lake.query("SELECT * FROM round_metrics WHERE round = 2").row(0, named=True)
    assert (row["n_audited_grounded"], row["grounded_precision"]) == (10, 0.7)
    assert (row["grounded_precision_low"], row["grounded_precision_high"]) == pytest.approx(wilson_interval(7, 10), abs=1e-12)
