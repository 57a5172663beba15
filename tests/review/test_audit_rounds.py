"""Audits inside real expansion rounds: one bundled QASPER paper, offline models, the verifier
and a human reviewer. Round 1 sends a sample of Grounded and Refuted claims to review with the
deferrals, indistinguishable in the packets; round 2 decides them like any verdict (a rejected
Grounded claim is Refuted for good) and ``round_metrics`` estimates the precision."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import polars as pl
import pytest

from flows.expansion import expansion_round
from flows.params import RoundParams
from grace_core.intervals import wilson_interval
from tests.one_paper import one_paper_after_round_1
from tests.review.conftest import signed_as

pytestmark = [pytest.mark.usefixtures("prefect_server"), pytest.mark.slow, pytest.mark.e2e]  # flows on the session's Prefect server

COMMON = dict(prior_sections=["Abstract", "Introduction"], hallucination_rate=0.3, budget=1.0)


def test_audit_claims_go_to_review_blind_and_are_decided_like_any_verdict(tmp_path: Path, reviewers, monkeypatch) -> None:
    reviewers("alice", overlap=1, use_verifier=True)
    for name, value in {"GRACE_AUDIT_GROUNDED": "4", "GRACE_AUDIT_REFUTED": "2", "GRACE_AUDIT_BUDGET": "100"}.items():
        monkeypatch.setenv(name, value)
    root, lake = one_paper_after_round_1(tmp_path, **COMMON)

    audits = lake.read("audits", rounds=[1])
    status = dict(lake.read("scores", rounds=[1]).select("claim_id", "status").iter_rows())
    assert 1 <= audits.filter(pl.col("status") == "grounded").height <= 4 and audits.filter(pl.col("status") == "refuted").height <= 2
    assert all(status[c] == s for c, s in audits.select("claim_id", "status").iter_rows())
    responses = set(lake.read("claims").filter(pl.col("source_kind") == "response")["claim_id"])
    assert set(audits["claim_id"]) <= responses  # sampled from the response claims only
    deferrals = lake.read("deferrals", rounds=[1])
    assert set(audits["claim_id"]) <= set(deferrals["claim_id"])
    assert sorted(deferrals["rank"].unique()) == list(range(1, deferrals["claim_id"].n_unique() + 1))  # one ranking for both
    n_frontier = deferrals["claim_id"].n_unique() - audits.height
    assert lake.query("SELECT n_deferred FROM round_metrics WHERE round = 1")["n_deferred"][0] == n_frontier

    # alice's packet: every claim with its context, none with a status or confidence (blind review)
    packet = list(csv.DictReader(io.StringIO((Path(root) / "review" / "outbox" / "alice.csv").read_text())))
    assert packet and all(r["claim"] and r["status"] == "" and r["confidence"] == "" for r in packet)
    # she rejects every claim she has: the Grounded audit claims among them become Refuted for good
    for r in packet:
        r.update(verdict="reject", seconds_spent="20")
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(packet[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(packet)
    (Path(root) / "review" / "inbox").mkdir(parents=True)
    (Path(root) / "review" / "inbox" / "alice.csv").write_bytes(signed_as(lake, "alice", "alice.csv", out.getvalue()))

    expansion_round(RoundParams(round_id=2, lake=root, **COMMON))
    after = dict(lake.read("scores", rounds=[2]).select("claim_id", "status").iter_rows())
    grounded_audits = set(audits.filter(pl.col("status") == "grounded")["claim_id"])
    rejected_by_alice = grounded_audits & {r["claim_id"] for r in packet}
    assert {after[c] for c in rejected_by_alice} <= {"refuted"}
    decided = lake.query("SELECT claim_id, decision FROM latest_decisions").rows()
    outcomes = dict(decided)
    k = sum(outcomes.get(c) == "confirm" for c in grounded_audits)
    n = sum(outcomes.get(c) in ("confirm", "reject") for c in grounded_audits)
    row = lake.query("SELECT * FROM round_metrics WHERE round = 1").row(0, named=True)
    assert n >= 1 and row["n_audited_grounded"] == n and row["grounded_precision"] == pytest.approx(k / n)
    assert (row["grounded_precision_low"], row["grounded_precision_high"]) == pytest.approx(wilson_interval(k, n))
    assert not set(audits["claim_id"]) & set(lake.read("audits", rounds=[2])["claim_id"])  # never audited twice
