"""No claim waits forever (DESIGN §5), on a nightly-style scripted lake run round after round
through the real flows (``score_round`` settles, ``dispatch_reviews`` defers and assigns): six
documents, four reviewers with overlap 1 and quorum 1, a budget that defers a few claims a
night, and a deadline of two rounds (``GRACE_DEADLINE_ROUNDS=2``; the 72 h deadline would come
later, one round being a day). Alice, bob and dave answer truthfully the day they get a claim;
carol never answers.

Every claim assigned to carol must go back to the pool once her deadline passes (not before)
and be assigned to another reviewer, never to carol again, and end decided the way the truthful
reviewers say; the accounting invariants of tests/review/test_accounting.py hold after every
round. A second test: when the rule (1 − σ)·Pri > Cost blocks every candidate, the dispatch
says so (its return, its log and the round's ``grace-deferred-claims`` artifact), with the
shortfall.

The votes are written to the ``verdicts`` table directly (who may vote, and through which
channel, is tested in tests/review/test_identity.py); everything else is the product's code.
"""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest

from flows.review import deferred_claims, dispatch_report, dispatch_reviews
from flows.score import score_round
from storage.lake import Lake
from tests.review.conftest import T0, accounting, answer_deferrals, assert_accounting, build_lake, promoted, stage

pytestmark = [pytest.mark.usefixtures("prefect_server"), pytest.mark.slow, pytest.mark.e2e]

TRUTH = {"c:1": True, "c:2": False, "c:3": True, "c:4": True}
DOCS = tuple(f"d{i}" for i in range(1, 7))
ROUNDS = 8
ABSENT = "carol"
DEADLINE_ROUNDS = 2


def night(round_id: int):
    """When round ``round_id`` runs: one round a night."""
    return T0 + timedelta(days=round_id - 1)


def answer_round(lake: Lake, round_id: int) -> int:
    """Every scripted answer to the round's deferrals (carol gives none), six hours after the
    dispatch, one commit; the number of votes."""
    def vote_of(reviewer: str, claim: str) -> str | None:
        return None if reviewer == ABSENT else "confirm" if TRUTH[claim] else "reject"

    return answer_deferrals(lake, round_id, vote_of, night(round_id) + timedelta(hours=6), 30.0)


def test_every_claim_of_an_absent_reviewer_is_reassigned_after_the_deadline_and_decided(tmp_path, reviewers, monkeypatch) -> None:
    reviewers("alice", "bob", ABSENT, "dave", overlap=1, deadline_rounds=DEADLINE_ROUNDS)
    monkeypatch.setenv("GRACE_QUORUM", "1")
    lake = build_lake(str(tmp_path / "lake"), rounds=(1,), docs=DOCS)
    history: list[dict[int, dict]] = []
    promotions: list[int] = []
    returned: list[dict] = []
    for r in range(1, ROUNDS + 1):
        if r > 1:
            score_round(stage(lake, r, now=night(r)))
        returned.append(dispatch_reviews(stage(lake, r, now=night(r), budget=0.36)))  # five claims a night at cost 0.07
        answer_round(lake, r)
        history.append(accounting(lake))
        promotions.append(promoted(lake))
    score_round(stage(lake, ROUNDS + 1, now=night(ROUNDS + 1)))  # settles the last round's votes
    history.append(accounting(lake))
    promotions.append(promoted(lake))

    deferrals = lake.read("deferrals", columns=["doc_id", "claim_id", "round", "reviewer"]).sort("round", "doc_id", "claim_id")
    decisions = dict(((d, c), v) for d, c, v in lake.query("SELECT doc_id, claim_id, decision FROM latest_decisions").rows())
    keys = ["doc_id", "claim_id"]
    lapses = deferrals.filter(pl.col("reviewer") == ABSENT)
    after = lapses.join(deferrals, on=keys, suffix="_next").filter(pl.col("round_next") > pl.col("round"))
    nxt = after.group_by(*keys, "round").agg(pl.col("round_next").min()).join(
        deferrals.rename({"round": "round_next", "reviewer": "reviewer_next"}), on=[*keys, "round_next"])
    reassigned = deferrals.join(lapses.select(keys).unique(), on=keys, how="semi").filter(pl.col("reviewer") != ABSENT)
    for r in range(1, ROUNDS + 1):
        rows = deferrals.filter(pl.col("round") == r)
        per = dict(rows.group_by("reviewer").len().sort("reviewer").iter_rows())
        moved = nxt.filter(pl.col("round_next") == r).height
        m = history[-1][r]
        print(f"round {r}: deferred {rows.height} {per}; reassigned from {ABSENT}: {moved}; "
              f"outcome confirmed {m['n_confirmed']}, rejected {m['n_rejected']}, abstained {m['n_abstained']}, pending {m['n_pending']}; "
              f"selection {returned[r - 1]['cost']}")
    print("promoted after each round:", promotions, "decisions:", len(decisions))

    # carol had claims, and every one of them went to someone else once her deadline had passed, never before
    assert lapses.height >= 3
    assert nxt.height == lapses.height, lapses.join(nxt, on=[*keys, "round"], how="anti")
    assert (nxt["round_next"] - nxt["round"]).min() >= DEADLINE_ROUNDS  # busy until the deadline in rounds
    assert (nxt["round_next"] - nxt["round"] == DEADLINE_ROUNDS).all()  # back in the pool at once: 48 h, before the 72 h deadline
    assert ABSENT not in nxt["reviewer_next"].to_list()
    assert deferrals.group_by(keys).agg((pl.col("reviewer") == ABSENT).sum().alias("n"))["n"].max() == 1  # never carol twice
    assert reassigned.height >= lapses.height
    # every claim ever deferred ends decided, the way the truthful reviewers say
    for doc, claim in deferrals.select(keys).unique().iter_rows():
        assert decisions.get((doc, claim)) == ("confirm" if TRUTH[claim] else "reject"), (doc, claim)
    # the accounting invariants of test_accounting.py: Σ confirmed = promoted; a round's row changes only pending → decided
    assert_accounting(history, promotions)
    final = history[-1]
    assert all(m["n_pending"] == 0 for m in final.values())
    # carol's lapses are the abstained deferrals (her round closed by the reassignment), each counted once
    assert sum(m["n_abstained"] for m in final.values()) == lapses.height
    # the round's deferred-claims artifact tells carol both deadlines (72 h or two rounds on)
    due = {r["reviewer"]: r["due"] for r in deferred_claims(lake, 1, DEADLINE_ROUNDS)}
    assert due[ABSENT] == "2026-03-05 09:00 UTC or round 3, whichever comes first", due
    # each dispatch said what it did with its budget
    for r, out in enumerate(returned, start=1):
        assert out["cost"] is not None and out["cost"]["deferred"] == deferrals.filter(pl.col("round") == r).height, (r, out)
        assert dispatch_report(lake, r).as_dict() == out["cost"]


def test_a_dispatch_whose_candidates_all_fail_the_rule_says_so(tmp_path, reviewers, monkeypatch) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    reviewers("alice")
    monkeypatch.setenv("GRACE_MU", "0.1")  # 30 s of review cost 3.0: no claim of priority 1 is worth it
    lake = build_lake(str(tmp_path / "lake"))
    out = dispatch_reviews(stage(lake, 1, now=T0, budget=6.0))
    assert out["deferred"] == 0
    cost = out["cost"]
    assert (cost["candidates"], cost["blocked_by_cost"], cost["deferred"], cost["spent"]) == (4, 4, 0, 0.0)
    # (1 − σ)·Pri = 1 against Cost = ε + μ·t = 0.01 + 0.1·30: short by 2.01 each
    assert cost["shortfall_min"] == pytest.approx(2.01) and cost["shortfall_max"] == pytest.approx(2.01)
    with get_client(sync_client=True) as client:
        (artifact,) = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["grace-deferred-claims"])),
                                            sort=ArtifactSort.CREATED_DESC, limit=1)  # this dispatch's: the server is the session's
    assert artifact.type == "markdown"
    assert "Round 1: no claims deferred." in artifact.data
    assert "all 4 blocked by cost ((1 − σ)·Pri ≤ Cost), shortfall Cost − (1 − σ)·Pri 2.010 to 2.010" in artifact.data
    assert "budget 6.00" in artifact.data
