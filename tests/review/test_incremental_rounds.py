"""Incremental rounds: a round settles and rescores only the documents whose state changed since
their last scoring (grace_core/changes.py); the others keep their latest scores, and the views
(``claim_status``, ``round_metrics``) and the dispatch read those.

Two synthetic documents (tests/review/conftest.py ``graph_rows``) scored by the real
``score_round`` flow on the session's Prefect server; changes are committed to the lake as the
other stages would (a vote, a new response's claims)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from prefect import flow

from flows.params import ScoreParams
from flows.review import dispatch_reviews, review_pool
from flows.score import counts_of, growth, score_round, stored_review_inputs
from grace_core.changes import changed_documents, scoring_fingerprint
from grace_core.decisions import DECISION_SCHEMA, decide
from grace_core.metrics import SCORING_COUNTS
from grace_core.models.factory import embedder_identity
from grace_core.params import ScoringParams
from storage.config import LakeConfig
from storage.lake import Lake
from tests.review.conftest import T0, graph_rows, stage
from tests.storage.sample_rows import claims, edges

DOCS = ("d1", "d2")


def scored_by_round(lake: Lake) -> dict[int, list[str]]:
    rows = lake.query("SELECT DISTINCT round, doc_id FROM scores ORDER BY round, doc_id")
    return {r: sorted(g["doc_id"].to_list()) for (r,), g in rows.group_by(["round"], maintain_order=True)}


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_server")
def test_a_round_rescores_only_the_documents_that_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(tmp_path / "lake")
    lake = Lake.open(ScoreParams(round_id=1, lake=root).settings())
    for doc in DOCS:
        lake.commit(f"fixture/{doc}", graph_rows(doc))

    score_round(ScoreParams(round_id=1, lake=root))
    assert scored_by_round(lake) == {1: ["d1", "d2"]}
    # each Boundary claim's review inputs are stored with its scores, for the dispatch to read
    boundary = lake.query("SELECT doc_id, claim_id, reach, prior_distance FROM claim_status WHERE status = 'boundary'")
    assert boundary.height > 0 and boundary["reach"].null_count() == 0 and boundary["prior_distance"].null_count() == 0
    assert lake.read("review_inputs").height == boundary.height

    # nothing changed: nothing is rescored, yet the round has its metrics row, equal to round 1's
    metrics = score_round(ScoreParams(round_id=2, lake=root))
    assert scored_by_round(lake) == {1: ["d1", "d2"]}
    by_round = {m["round"]: m for m in metrics}
    assert set(by_round) == {1, 2}
    assert {k: v for k, v in by_round[2].items() if k != "round"} == {k: v for k, v in by_round[1].items() if k != "round"}

    @flow
    def parent() -> list[dict]:  # as expansion_round runs it: the parent publishes the metrics once its round is done
        return score_round(ScoreParams(round_id=2, lake=root))

    assert parent() == [] and scored_by_round(lake) == {1: ["d1", "d2"]}

    # a reviewer rejects a claim of d1: round 3 rescores d1 only, and d1's claim is Refuted for good
    lake.commit("fixture/vote", {"verdicts": pl.DataFrame({
        "doc_id": ["d1"], "claim_id": ["c:2"], "round": [2], "reviewer": ["alice"], "verdict": ["reject"],
        "created_at": [T0]}, schema_overrides={"round": pl.Int32})})
    score_round(ScoreParams(round_id=3, lake=root))
    assert scored_by_round(lake) == {1: ["d1", "d2"], 3: ["d1"]}
    status = lake.query("SELECT doc_id, claim_id, status, scored_round, decision FROM claim_status ORDER BY doc_id, claim_id")
    assert status.filter(pl.col("doc_id") == "d2")["scored_round"].unique().to_list() == [1]
    assert status.filter((pl.col("doc_id") == "d1") & (pl.col("claim_id") == "c:2")).row(0, named=True) | {"scored_round": 3} == {
        "doc_id": "d1", "claim_id": "c:2", "status": "refuted", "scored_round": 3, "decision": "reject"}
    # d1's prior units did not change: its Boundary claims keep the prior distances round 1 measured
    # with the same embedder (recorded in the stage rows); another embedder's would not be kept
    inputs = lake.read("review_inputs", columns=["doc_id", "claim_id", "round", "prior_distance"]).filter(pl.col("doc_id") == "d1")
    kept = inputs.filter(pl.col("round") == 3).drop("round").join(inputs.filter(pl.col("round") == 1).drop("round"), on=["doc_id", "claim_id"])
    assert kept.height > 0 and kept["prior_distance"].equals(kept["prior_distance_right"], check_names=False)
    embedder = embedder_identity(ScoreParams(round_id=3, lake=root).settings())
    assert len(stored_review_inputs(lake, ["d1"], 3, embedder)) == inputs.filter(pl.col("round") == 1).height
    assert stored_review_inputs(lake, ["d1"], 3, "litellm:another/embedder").is_empty()
    n_refuted = lake.query("SELECT round, n_refuted, n_documents FROM round_metrics WHERE round = 3").row(0)
    assert n_refuted == (3, 1, 2)  # both documents counted, d2 with its round-1 scores

    # a re-run of round 3 changes nothing
    score_round(ScoreParams(round_id=3, lake=root))
    assert scored_by_round(lake) == {1: ["d1", "d2"], 3: ["d1"]}

    # a new response claim of d2 (as a build with a user question adds): round 4 rescores d2 only
    rows = graph_rows("d2")
    lake.commit("fixture/d2-more", {
        "sources": rows["sources"].filter(pl.col("source_id") == "r1").with_columns(source_id=pl.lit("r2"), round=pl.lit(4)),
        "claims": pl.DataFrame({"doc_id": ["d2"], "claim_id": ["c:new"], "round": [4], "source_id": ["r2"],
                                "source_kind": ["response"], "text": ["The parser is fast."]}),
        "edges": pl.DataFrame({"doc_id": ["d2"], "source_id": ["r2"], "source_kind": ["response"], "claim_id": ["c:new"],
                               "label": ["entails"], "round": [4]}),
    })
    score_round(ScoreParams(round_id=4, lake=root))
    assert scored_by_round(lake)[4] == ["d2"]
    assert "c:new" in lake.query("SELECT claim_id FROM claim_status WHERE doc_id = 'd2'")["claim_id"].to_list()

    # the dispatch's pool is claim_status's rows of its statuses (plus, for an adjudicator, those
    # with a decision), each document's latest scoring found from scoring_counts
    keys = ["doc_id", "claim_id"]
    columns = "doc_id, claim_id, status, priority, confidence, reach, prior_distance"
    for statuses, decided, where in ((("boundary",), False, "status = 'boundary'"),
                                     (("boundary", "grounded"), True, "status IN ('boundary', 'grounded') OR decision IS NOT NULL")):
        expected = lake.query(f"SELECT {columns} FROM claim_status WHERE {where}").sort(keys)
        assert expected["doc_id"].n_unique() == 2 and expected["status"].n_unique() == len(statuses) + decided  # d1's reject: refuted
        assert_frame_equal(review_pool(lake, statuses, decided=decided).sort(keys), expected)

    # the dispatch defers from every document's latest scores: round 4 deferrals include d1's claims (scored in round 3)
    dispatch_reviews(stage(root, 4))
    deferred = lake.read("deferrals", rounds=[4], columns=["doc_id", "claim_id"])
    assert set(deferred["doc_id"]) == {"d1", "d2"} and ("d1", "c:2") not in set(deferred.iter_rows())  # rejected for good

    # another scoring setting: every document is rescored; --rescore-all does the same
    monkeypatch.setenv("GRACE_W_CONTRA", "0.3")
    score_round(ScoreParams(round_id=5, lake=root))
    assert scored_by_round(lake)[5] == ["d1", "d2"]
    score_round(ScoreParams(round_id=6, lake=root))
    assert 6 not in scored_by_round(lake)
    score_round(ScoreParams(round_id=7, lake=root, rescore_all=True))
    assert scored_by_round(lake)[7] == ["d1", "d2"]

    # the counts each scoring stored for round_metrics (from its previous scores, read by key)
    # are those of every document's scorings counted at once, as the back-fill counts them
    stored = lake.read("scoring_counts").sort("doc_id", "round")
    recounted = counts_of(lake.read("scores"), lake.read("claims"), lake.read("decisions"))
    assert stored.height == 8 and stored["n_claims"].sum() > 0
    assert_frame_equal(stored.select(recounted.columns), recounted)


def decisions(rows: list[tuple[str, str, str, str]], quorum: int = 1) -> pl.DataFrame:
    return decide(pl.DataFrame(rows, schema=["doc_id", "claim_id", "reviewer", "verdict"], orient="row"), quorum)


def test_changed_documents_follow_new_rows_and_new_decisions() -> None:
    rounds = pl.DataFrame({
        "doc_id": ["new", "grown", "same", "voted", "requorum", "done"],
        "grown_round": [3, 3, 1, 1, 1, 3],
        "scored_round": [None, 2, 2, 2, 2, 3],
    }, schema_overrides={"scored_round": pl.Int64})
    then = decisions([("voted", "c1", "alice", "confirm"), ("requorum", "c1", "alice", "confirm")])
    now = decisions([("voted", "c1", "alice", "confirm"), ("voted", "c1", "bob", "reject"), ("requorum", "c1", "alice", "confirm")])
    assert changed_documents(rounds, now, then, round_id=3) == ["grown", "new", "voted"]
    assert changed_documents(rounds, decisions([("requorum", "c1", "alice", "confirm"), ("voted", "c1", "alice", "confirm")], quorum=2),
                             then, round_id=3) == ["grown", "new", "requorum", "voted"]
    # a changed vote (same count, other verdict) is a change; the document scored in this round is not rescored in it
    flipped = decisions([("voted", "c1", "alice", "reject"), ("requorum", "c1", "alice", "confirm"), ("done", "c1", "bob", "confirm")])
    assert changed_documents(rounds, flipped, then, round_id=3) == ["grown", "new", "voted"]
    assert changed_documents(rounds, pl.DataFrame(schema=DECISION_SCHEMA), pl.DataFrame(schema=DECISION_SCHEMA), round_id=3) == ["grown", "new"]


def test_the_fingerprint_changes_with_what_scores_depend_on_only() -> None:
    base = scoring_fingerprint(ScoringParams(), quorum=1, weigh_by_reliability=False)
    assert base == scoring_fingerprint(ScoringParams(alpha=0.9, mu=0.01, lambda_r=0.0), quorum=1, weigh_by_reliability=False)
    assert base != scoring_fingerprint(ScoringParams(w_contra=0.3), quorum=1, weigh_by_reliability=False)
    assert base != scoring_fingerprint(ScoringParams(), quorum=2, weigh_by_reliability=False)
    assert base != scoring_fingerprint(ScoringParams(), quorum=1, weigh_by_reliability=True)


def test_growth_reads_only_rows_after_the_earliest_latest_scoring_and_misses_no_due_document(tmp_path: Path) -> None:
    """doc0 is scored in round 2 with rows of round 1 only; doc1 is scored in round 3 and got a
    response's claims in round 4; doc2 has claims of round 1 and was never scored (its scoring
    failed): F is 2, yet doc2 is listed, and each document is due exactly as a full scan says."""
    lake = Lake.open(LakeConfig(lake=str(tmp_path / "lake")))
    early = claims(3, 2, 1)
    late = claims(2, 2, 4, prefix="q").filter(pl.col("doc_id") == "doc1")
    lake.commit("rows", {"claims": pl.concat([early, late]), "edges": edges(pl.concat([early, late]))})
    counts = pl.DataFrame({"doc_id": ["doc0", "doc1", "doc1"], "round": [2, 1, 3]}).with_columns(
        pl.col("round").cast(pl.Int32), *[pl.lit(0, pl.Int64).alias(c) for c in SCORING_COUNTS])
    lake.commit("counts", {"scoring_counts": counts})
    rounds = growth(lake, 4).sort("doc_id")
    assert rounds.rows() == [("doc0", 2, 2), ("doc1", 4, 3), ("doc2", 2, None)]
    assert growth(lake, 3).filter(pl.col("doc_id") == "doc1")["grown_round"].to_list() == [2]  # round 4's rows are not yet
    none = pl.DataFrame(schema=DECISION_SCHEMA)
    assert changed_documents(rounds, none, none, round_id=4) == ["doc1", "doc2"]
