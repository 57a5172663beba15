"""Review inputs stored at scoring (grace_core.review.review_inputs): a Boundary claim's cascade
reach and prior distance, computed when its document is scored, give the dispatch the same
deferrals as computing them there, with no embedding at dispatch (the packaged offline embedder)."""

from __future__ import annotations

from types import SimpleNamespace

import polars as pl

from grace_core.models.config import ModelConfig
from grace_core.models.offline_judge import OfflineJudge
from grace_core.params import ScoringParams
from grace_core.review import REVIEW_INPUTS, review_inputs
from grace_core.round import defer

PRIORS = pl.DataFrame({"doc_id": ["d1", "d1", "d2"], "text": [
    "The parser was trained on the Penn Treebank corpus.", "The parser reaches 91 percent accuracy on the test set.",
    "The survey covers forty languages."]})
CLAIMS = {
    ("d1", "c1"): "The parser was trained on the Penn Treebank corpus for ten epochs.",
    ("d1", "c2"): "The parser was trained for ten epochs.",
    ("d1", "c3"): "The parser is released under the MIT license.",
    ("d2", "c4"): "The survey covers forty languages from six families.",
    ("d2", "c5"): "Annotators were paid hourly.",
}


class Texts:
    """The claim texts and prior units of the test (a grace_core.round.DocumentTexts), recording
    the documents each is asked for."""

    def __init__(self, texts: pl.DataFrame) -> None:
        self.texts, self.asked = texts, {"claim_texts": [], "prior_units": []}

    def claim_texts(self, doc_ids=None):
        self.asked["claim_texts"].append(doc_ids)
        return self.texts.filter(pl.col("doc_id").is_in(doc_ids))

    def prior_units(self, doc_ids=None):
        self.asked["prior_units"].append(doc_ids)
        return PRIORS.filter(pl.col("doc_id").is_in(doc_ids))


class CountingEmbedder:
    """The real offline embedder, counting the texts it is asked to embed."""

    def __init__(self, inner) -> None:
        self.inner, self.texts, self.seen = inner, 0, []

    def embed(self, texts):
        self.texts += len(texts)
        self.seen += texts
        return self.inner.embed(texts)


def test_stored_review_inputs_give_the_same_deferrals_without_embedding(embedder) -> None:
    texts = pl.DataFrame([(d, c, t) for (d, c), t in CLAIMS.items()], schema=["doc_id", "claim_id", "text"], orient="row")
    scores = texts.select("doc_id", "claim_id").with_columns(
        status=pl.lit("boundary"), priority=pl.Series([0.9, 0.5, 0.7, 0.8, 0.6]), confidence=pl.lit(0.2))
    decisions = pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8, "n_confirm": pl.Int32, "n_reject": pl.Int32, "decision": pl.Utf8})
    busy = pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8})
    params = ScoringParams()

    counting = CountingEmbedder(embedder)
    lookup = Texts(texts)
    fresh = defer(scores, decisions, busy, lookup, SimpleNamespace(embedder=counting), params, budget=1.0, review_seconds=30.0)
    assert counting.texts > 0 and fresh.height >= 2
    assert lookup.asked["prior_units"] == [["d1", "d2"]]
    assert fresh.filter(pl.col("claim_id") == "c1")["reach"].item() == 1  # c1 contains c2's wording

    stored = review_inputs(texts, texts, PRIORS, embedder).select("doc_id", "claim_id", *REVIEW_INPUTS)
    counting = CountingEmbedder(embedder)
    lookup = Texts(texts)
    from_stored = defer(scores.join(stored, on=["doc_id", "claim_id"]), decisions, busy, lookup,
                        SimpleNamespace(embedder=counting), params, budget=1.0, review_seconds=30.0)
    assert counting.texts == 0  # nothing embedded at dispatch
    # no prior unit is read, and claim texts only of the chosen claims' documents (to show them)
    assert lookup.asked == {"claim_texts": [sorted(set(from_stored["doc_id"]))], "prior_units": []}
    assert from_stored.equals(fresh)


def test_a_rescored_document_keeps_its_prior_distances_until_its_prior_units_change(embedder) -> None:
    """Settlement.review_inputs with what an earlier scoring stored: a reject (no new prior
    unit) keeps every stored distance and embeds nothing; a confirm (a verified claim is a new
    prior unit) measures again; either way the distances are those a fresh measurement gives."""
    from grace_core.edges import EDGE_COLUMNS
    from grace_core.round import RoundState, settle
    from grace_core.status import BOUNDARY
    from tests.review.conftest import graph_rows

    rows = graph_rows("d1")
    extra = {"c:5": "The parser applies dropout of 0.3 during training.", "c:6": "The dropout rate was tuned on the development set.",
             "c:7": "Three annotators labelled the held-out sentences."}  # response claims no prior says
    rows["claims"] = pl.concat([rows["claims"], pl.DataFrame({
        "doc_id": "d1", "claim_id": list(extra), "round": 1, "source_id": "r1", "source_kind": "response", "text": list(extra.values())})],
        how="vertical_relaxed")
    rows["edges"] = pl.concat([rows["edges"], pl.DataFrame({
        "doc_id": "d1", "source_id": "r1", "source_kind": "response", "claim_id": list(extra), "label": "entails", "round": 1})],
        how="vertical_relaxed")
    votes = pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8, "reviewer": pl.Utf8, "verdict": pl.Utf8, "round": pl.Int32})
    state = RoundState(sources=rows["sources"].select("doc_id", "source_id", "source_kind", "text", pl.lit(None, pl.Utf8).alias("claim_id"),
                                                      pl.col("round").cast(pl.Int32)),
                       claims=rows["claims"].with_columns(pl.col("round").cast(pl.Int32)), edges=rows["edges"].select(EDGE_COLUMNS), votes=votes)
    params = ScoringParams()
    made: list[CountingEmbedder] = []

    def roles():
        made.append(CountingEmbedder(embedder))
        return SimpleNamespace(embedder=made[-1], judge=OfflineJudge(embedder, ModelConfig(torch_threads=1)))

    def settled(votes_now: list[tuple[str, str]], round_id: int):
        vote_rows = pl.DataFrame([("d1", c, "alice", v, round_id) for c, v in votes_now], schema=votes.schema, orient="row")
        return settle(RoundState(state.sources, state.claims, state.edges, vote_rows), params, roles, quorum=1, round_id=round_id)

    first = settled([], 1)
    stored = first.review_inputs(roles).with_columns(round=pl.lit(1, pl.Int32))
    boundary = first.scores.filter(pl.col("status") == BOUNDARY)["claim_id"].to_list()
    assert len(boundary) >= 3 and stored.height == len(boundary)

    # round 2: a reviewer rejects a Boundary claim; no prior unit is new, so nothing is embedded
    rejected = settled([(boundary[0], "reject")], 2)
    made.clear()
    kept = rejected.review_inputs(roles, stored.select("doc_id", "claim_id", "round", "prior_distance"))
    assert made == []  # the embedder was not even asked for
    assert rejected.remeasured() == []  # nor is anything prefetched
    fresh = rejected.review_inputs(roles)
    assert kept.sort("claim_id").equals(fresh.sort("claim_id").select(kept.columns)) or \
        (kept.sort("claim_id")["prior_distance"] - fresh.sort("claim_id")["prior_distance"]).abs().max() < 1e-6

    # round 3: a reviewer confirms a claim nearer to another Boundary claim than any prior unit is
    # (one the cascade leaves Boundary); the verified claim is a new prior unit of round 3, so that
    # other claim is measured again
    texts = dict(first.state.claim_texts().select("claim_id", "text").iter_rows())
    before = dict(stored.select("claim_id", "prior_distance").iter_rows())
    vec = dict(zip(boundary, embedder.embed([texts[c] for c in boundary]), strict=True))
    near = [(a, b) for a in boundary for b in boundary if a != b and 1.0 - float(vec[a] @ vec[b]) < before[b] - 1e-3]
    for a, b in near:
        confirmed = settled([(a, "confirm")], 3)
        assert confirmed.promotion.sources.height == 1
        made.clear()
        measured = confirmed.review_inputs(roles, stored.select("doc_id", "claim_id", "round", "prior_distance"))
        if b in measured["claim_id"].to_list():
            break
    else:
        raise AssertionError(f"no claim stays Boundary closer to a confirmed one than to the priors: {near}")
    assert made and made[0].texts > 0
    assert sorted(confirmed.remeasured()) == sorted(made[0].seen)  # what the score chunk prefetches is what is embedded
    fresh = confirmed.review_inputs(roles).sort("claim_id")
    assert (measured.sort("claim_id")["prior_distance"] - fresh["prior_distance"]).abs().max() < 1e-6
    assert measured.filter(pl.col("claim_id") == b)["prior_distance"].item() < before[b] - 1e-3  # not the stored one

    # rows without rounds (tables built in memory without them) keep nothing
    no_rounds = RoundState(state.sources.drop("round"), state.claims.drop("round"), state.edges, votes)
    made.clear()
    settle(no_rounds, params, roles, quorum=1, round_id=2).review_inputs(roles, stored.select("doc_id", "claim_id", "round", "prior_distance"))
    assert made and made[0].texts > 0
