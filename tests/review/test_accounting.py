"""Review accounting per deferral (DESIGN §5 and §7) on a scripted lake, round after round
through the real flows (``score_round`` settles, ``dispatch_reviews`` defers and assigns):
four reviewers with quorum 2 and overlap 2 — two who answer truthfully, one who never answers
(their claims go overdue and return to the pool) and a contrarian (ties with the truthful ones).

After every round the lake's ``round_metrics`` must keep two invariants:

- the confirmed deferrals summed over rounds equal the claims review promoted (verified sources);
- a round's row changes only by pending → decided: its deferrals, and its confirmed, rejected and
  abstained counts once decided, never change again.

The votes are written to the ``verdicts`` table directly (who may vote, and through which
channel, is tested in tests/review/test_identity.py); everything else is the product's code.
"""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest

from flows.review import dispatch_reviews
from flows.score import score_round
from storage.lake import Lake
from tests.review.conftest import ACCOUNTING, CLAIMS, T0, accounting, answer_deferrals, assert_accounting, build_lake, promoted, stage

pytestmark = [pytest.mark.usefixtures("prefect_server"), pytest.mark.slow, pytest.mark.e2e]

TRUTH = {"c:1": True, "c:2": False, "c:3": True, "c:4": True}
ROUNDS = 6


def vote_of(reviewer: str, claim: str) -> str | None:
    """The scripted reviewers: alice and bob truthful, carol never answers, dave contradicts."""
    if reviewer == "carol":
        return None
    right = "confirm" if TRUTH[claim] else "reject"
    wrong = "reject" if TRUTH[claim] else "confirm"
    return wrong if reviewer == "dave" else right


def answer_round(lake: Lake, round_id: int) -> int:
    """Every scripted answer to the round's deferrals, one commit; the number of votes."""
    return answer_deferrals(lake, round_id, vote_of, T0 + timedelta(days=2 * round_id - 1), 20.0)


def test_round_metrics_count_each_deferral_once_and_never_rewrite_a_decided_round(tmp_path, reviewers, monkeypatch) -> None:
    reviewers("alice", "bob", "carol", "dave", overlap=2, deadline_hours=24)
    monkeypatch.setenv("GRACE_QUORUM", "2")
    lake = build_lake(str(tmp_path / "lake"), rounds=(1,))
    history: list[dict[int, dict]] = []
    promotions: list[int] = []
    for r in range(1, ROUNDS + 1):
        now = T0 + timedelta(days=2 * (r - 1))  # two days a round: an unanswered claim is overdue at the next
        if r > 1:
            score_round(stage(lake, r, now=now))
        dispatch_reviews(stage(lake, r, now=now))
        answer_round(lake, r)
        history.append(accounting(lake))
        promotions.append(promoted(lake))
    score_round(stage(lake, ROUNDS + 1, now=T0 + timedelta(days=2 * ROUNDS)))  # settles the last round's votes
    history.append(accounting(lake))
    promotions.append(promoted(lake))
    for r, seen in enumerate(history, start=1):
        print(f"after round {r}:", {k: tuple(m[c] for c in ACCOUNTING) for k, m in seen.items()}, "promoted", promotions[r - 1])

    assert_accounting(history, promotions)
    final = history[-1]
    # every claim ends decided the way the truthful majority says, none by one person's word
    outcomes = dict(lake.query("SELECT claim_id, decision FROM latest_decisions").rows())
    assert outcomes == {c: ("confirm" if t else "reject") for c, t in TRUTH.items()}
    votes = lake.read("verdicts")
    for claim in lake.read("sources").filter(pl.col("source_kind") == "verified")["claim_id"]:
        assert votes.filter((pl.col("claim_id") == claim) & (pl.col("verdict") == "confirm"))["reviewer"].n_unique() >= 2
    assert sum(m["n_confirmed"] for m in final.values()) == 3 and sum(m["n_rejected"] for m in final.values()) == 1
    assert all(m["n_pending"] == 0 for m in final.values())
    # ties (a truthful reviewer against the contrarian) and carol's silence are abstained deferrals, each counted once
    assert sum(m["n_abstained"] for m in final.values()) == sum(m["n_deferred"] for m in final.values()) - len(CLAIMS)
    # the Dawid–Skene estimate the rounds stored: the contrarian lowest, the truthful reviewers high
    shown = dict(lake.query("SELECT DISTINCT reviewer, reliability FROM reviewer_stats").rows())
    assert min(shown, key=shown.get) == "dave" and shown["dave"] < 0.5 < min(shown["alice"], shown["bob"])
