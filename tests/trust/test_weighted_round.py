"""GRACE_WEIGH_BY_RELIABILITY where decisions are made in a flow run: the real ``score_round``
flow settles votes staged in a lake, and a reviewer who answers at random is out-weighted only
when the setting is on.

The lake (tests/review/conftest.py's synthetic document, eleven times): ten history documents
whose four Boundary claims each got a vote from ``ada`` (always right), ``ben`` (right 9 times in
10) and two coin-flippers, ``rand1`` and ``rand2``; and the document ``d1`` where the two
coin-flippers outvote ``ada`` on two claims. A plain majority follows the coin-flippers; weighted
by the Dawid–Skene reliability of every vote of the lake (log-odds weights), ``ada`` wins.
"""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

from flows.score import score_round
from storage.lake import Lake
from tests.review.conftest import CLAIMS, DOC, T0, graph_rows, scores, stage
from flows.params import StageParams

pytestmark = [pytest.mark.usefixtures("prefect_server"), pytest.mark.slow, pytest.mark.e2e]

HISTORY = [f"h{i}" for i in range(10)]
ACCURACY = {"ada": 1.0, "ben": 0.9, "rand1": 0.5, "rand2": 0.5}
# d1: the coin-flippers against ada
CONTESTED = {"c:1": {"ada": "confirm", "rand1": "reject", "rand2": "reject"},
             "c:2": {"ada": "reject", "rand1": "confirm", "rand2": "confirm"}}


def staged_votes(seed: int = 7) -> pl.DataFrame:
    rng = random.Random(seed)
    rows = []
    for doc in HISTORY:
        for claim in CLAIMS:
            true = rng.random() < 0.6
            for reviewer, a in ACCURACY.items():
                says_true = true if rng.random() < a else not true
                rows.append({"doc_id": doc, "claim_id": claim, "reviewer": reviewer, "verdict": "confirm" if says_true else "reject"})
    rows += [{"doc_id": DOC, "claim_id": c, "reviewer": r, "verdict": v} for c, votes in CONTESTED.items() for r, v in votes.items()]
    return pl.DataFrame(rows).with_columns(round=pl.lit(1, pl.Int32), seconds_spent=pl.lit(20.0), channel=pl.lit("file"),
                                           created_at=pl.lit(T0))


def lake_with_votes(root: Path) -> Lake:
    lake = Lake.open(StageParams(round_id=1, lake=str(root)).settings())
    for doc in [DOC, *HISTORY]:
        lake.commit(f"fixture/documents/{doc}", {k: v.with_columns(doc_id=pl.lit(doc)) for k, v in graph_rows(doc).items()})
    lake.commit("fixture/scores/round=1", {"scores": pl.concat([scores(1).with_columns(doc_id=pl.lit(d)) for d in [DOC, *HISTORY]])})
    lake.commit("fixture/votes/round=1", {"verdicts": staged_votes()})
    return lake


def settled(lake: Lake) -> dict[str, tuple[str, str]]:
    """d1's contested claims after round 2's score step: (decision, status)."""
    decisions = dict(lake.read("decisions", rounds=[2]).filter(pl.col("doc_id") == DOC).select("claim_id", "decision").iter_rows())
    status = dict(lake.query(f"SELECT claim_id, status FROM claim_status WHERE doc_id = '{DOC}'").iter_rows())
    return {c: (decisions[c], status[c]) for c in CONTESTED}


@pytest.mark.parametrize("weigh", [False, True], ids=["plain", "weighted"])
def test_the_score_step_outweighs_random_answerers_only_when_the_setting_is_on(tmp_path: Path, monkeypatch, weigh: bool) -> None:
    monkeypatch.setenv("GRACE_WEIGH_BY_RELIABILITY", str(weigh).lower())
    lake = lake_with_votes(tmp_path / "lake")
    score_round(stage(lake, 2))
    if weigh:  # ada's log-odds weight beats the two coin-flippers': ada decides, promotion and rejection follow
        assert settled(lake) == {"c:1": ("confirm", "grounded"), "c:2": ("reject", "refuted")}
    else:  # one vote each: two coin-flippers beat ada
        assert settled(lake) == {"c:1": ("reject", "refuted"), "c:2": ("confirm", "grounded")}
    # the history is decided by the majority either way (ada, ben and a coin-flipper at worst tie 2-2 → abstain)
    history = lake.read("decisions", rounds=[2]).filter(pl.col("doc_id") != DOC)
    assert history.height == len(HISTORY) * len(CLAIMS)
