"""The review loop inside real expansion rounds: one bundled QASPER paper, offline models, two
human reviewers with overlap 2 and no verifier. Round 1 sends packets to the outbox; the
reviewers' returned packets wait in the review inbox; round 2 reads them, promotes, archives and
rescores."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import polars as pl
import pytest

from flows.expansion import expansion_round
from flows.params import RoundParams
from tests.one_paper import one_paper_after_round_1
from tests.review.conftest import signed_as

pytestmark = [pytest.mark.usefixtures("prefect_server"), pytest.mark.slow, pytest.mark.e2e]  # flows on the session's Prefect server

COMMON = dict(prior_sections=["Abstract", "Introduction"], hallucination_rate=0.2, budget=5.0)


def test_two_rounds_with_human_reviewers(tmp_path: Path, reviewers, monkeypatch: pytest.MonkeyPatch) -> None:
    reviewers("alice", "bob", overlap=2)
    # one paper has few boundary claims worth two people's time: here human time is free and
    # priorities are doubled, so several are deferred (the §4 cost itself: test_management)
    for name, value in {"GRACE_MU": "0", "GRACE_LAMBDA_C": "1", "GRACE_LAMBDA_N": "1"}.items():
        monkeypatch.setenv(name, value)
    root, lake = one_paper_after_round_1(tmp_path, **COMMON)
    deferrals = lake.read("deferrals", rounds=[1])
    claims = deferrals.sort("rank")["claim_id"].unique(maintain_order=True).to_list()
    assert len(claims) >= 2 and deferrals.height == 2 * len(claims)  # overlap 2
    assert lake.read("verdicts").height == 0  # no verifier: humans only

    outbox, inbox = Path(root) / "review" / "outbox", Path(root) / "review" / "inbox"
    inbox.mkdir(parents=True)
    rows = list(csv.DictReader(io.StringIO((outbox / "alice.csv").read_text())))
    assert [r["claim_id"] for r in rows] == claims and all(r["claim"] and r["nearest_prior"] for r in rows)
    for r in rows:  # alice confirms all but the last claim, which she rejects
        r.update(verdict="confirm" if r["claim_id"] != claims[-1] else "reject", seconds_spent="30")
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    (inbox / "alice.csv").write_bytes(signed_as(lake, "alice", "alice.csv", out.getvalue()))
    bob = [json.loads(line) for line in (outbox / "bob.jsonl").read_text().splitlines()]
    (inbox / "bob.jsonl").write_bytes(signed_as(lake, "bob", "bob.jsonl", "".join(
        json.dumps(r | {"verdict": "confirm" if r["claim_id"] != claims[-1] else "abstain", "seconds_spent": 50}) + "\n" for r in bob
    )))

    expansion_round(RoundParams(round_id=2, lake=root, **COMMON))
    assert sorted(p.name.split(".")[0] for p in (Path(root) / "review" / "processed").iterdir()) == ["alice", "bob"]
    verified = lake.read("sources", rounds=[2]).filter(pl.col("source_kind") == "verified")
    assert sorted(verified["claim_id"]) == sorted(claims[:-1])
    status = dict(lake.read("scores", rounds=[2]).select("claim_id", "status").iter_rows())
    assert {status[c] for c in claims[:-1]} == {"grounded"} and status[claims[-1]] == "refuted"
    assert not set(lake.read("deferrals", rounds=[2])["claim_id"]) & set(claims)  # decided claims are not deferred again
    metrics = lake.query("SELECT round, pcr, n_confirmed, n_rejected FROM round_metrics ORDER BY round").to_dicts()
    assert (metrics[0]["n_confirmed"], metrics[0]["n_rejected"]) == (len(claims) - 1, 1)
    assert metrics[1]["pcr"] >= metrics[0]["pcr"]
    stats = lake.query("SELECT reviewer, n_verdicts, mean_seconds FROM reviewer_stats WHERE round = 1 ORDER BY reviewer").rows()
    assert stats == [("alice", len(claims), 30.0), ("bob", len(claims), 50.0)]
