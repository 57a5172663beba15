"""Review inputs stored at scoring (grace_core.review.review_inputs): a Boundary claim's cascade
reach and prior distance, computed when its document is scored, give the dispatch the same
deferrals as computing them there, with no embedding at dispatch (the packaged offline embedder)."""

from __future__ import annotations

from types import SimpleNamespace

import polars as pl

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
        self.inner, self.texts = inner, 0

    def embed(self, texts):
        self.texts += len(texts)
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
