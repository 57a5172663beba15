"""Stored embeddings (:mod:`grace_core.stored_embeddings`, table ``embeddings``): a candidate text
is embedded once per document and embedder, and ``grace ask`` then embeds only the question.
Counted through the real offline embedder (its ``encoded`` count of texts run through the
model, or its ``embed`` calls), never a stub."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from flows.queries import candidate_embeddings, lake_candidates, store_embeddings
from flows.settings import build_settings
from grace_core.models.factory import embedder_identity
from grace_core.models.offline_embedder import OfflineEmbedder
from grace_core.stored_embeddings import STORED_COLUMNS, embeddings_of
from tests.ask_lake import PAPER, one_paper_lake
from tests.grace_cli import run_grace

ROWS = pl.DataFrame({"doc_id": ["a", "a", "b", "a"],
                     "text": ["The encoder is a CNN.", "Five decoders tell the story.", "The encoder is a CNN.", "The encoder is a CNN."]})


def test_texts_are_embedded_once_and_then_read_back() -> None:
    first = OfflineEmbedder()
    vectors, fresh = embeddings_of(ROWS, pl.DataFrame(schema={"doc_id": pl.Utf8, "text_hash": pl.Utf8, "vector": pl.List(pl.Float64)}),
                                   first, "model-1")
    assert first.encoded == 2  # two distinct texts, though three (document, text) pairs
    assert fresh.columns == list(STORED_COLUMNS) and fresh.height == 3 and set(fresh["embedder"]) == {"model-1"}
    np.testing.assert_allclose(vectors, OfflineEmbedder().embed(ROWS["text"].to_list()), atol=1e-6)
    assert (vectors[0] == vectors[2]).all() and (vectors[0] == vectors[3]).all()

    second = OfflineEmbedder()  # a new process's embedder: nothing cached
    again, more = embeddings_of(ROWS, fresh, second, "model-1")
    assert second.encoded == 0 and more.height == 0
    assert np.array_equal(again, vectors)  # float32 → stored float64 → float32 is exact

    partly = fresh.filter(pl.col("doc_id") == "a")  # document b's vector is not stored: embedded for it
    third = OfflineEmbedder()
    mixed, made = embeddings_of(ROWS, partly, third, "model-1")
    assert third.encoded == 1 and made.select("doc_id").rows() == [("b",)]
    np.testing.assert_allclose(mixed, vectors, atol=1e-6)


@pytest.fixture
def lake(tmp_path: Path):
    return one_paper_lake(tmp_path)


def test_the_lake_keeps_vectors_per_embedder_identity(lake) -> None:
    root, store = lake
    settings = build_settings(lake=root)
    identity = embedder_identity(settings)
    candidates = lake_candidates(store, PAPER)
    texts = candidates["text"].n_unique()
    assert candidates.height >= 2

    first = OfflineEmbedder()
    vectors, fresh = candidate_embeddings(store, candidates, first, identity, PAPER)
    assert first.encoded == texts and fresh.height == texts
    store_embeddings(store, fresh)
    store_embeddings(store, fresh)  # the same unit of work again: nothing more stored
    stored = store.read("embeddings")
    assert stored.height == texts and set(stored["embedder"]) == {identity}

    second = OfflineEmbedder()
    again, more = candidate_embeddings(store, candidates, second, identity, None)  # without --doc: every document's vectors
    assert second.encoded == 0 and more.height == 0 and np.array_equal(again, vectors)

    other = OfflineEmbedder()  # another model (or precision) never reuses them
    _, theirs = candidate_embeddings(store, candidates, other, identity + ":other", PAPER)
    assert other.encoded == texts and set(theirs["embedder"]) == {identity + ":other"}


def test_ask_embeds_only_the_question_once_the_candidates_are_stored(lake, monkeypatch, capsys) -> None:
    root, store = lake
    monkeypatch.setenv("GRACE_ABSTAIN_BELOW", "0.99")  # abstains before the answerer, which embeds context sentences of its own
    calls: list[list[str]] = []
    real = OfflineEmbedder.embed

    def counted(self: OfflineEmbedder, texts):
        calls.append(list(texts))
        return real(self, texts)

    monkeypatch.setattr(OfflineEmbedder, "embed", counted)
    candidates = set(lake_candidates(store, PAPER)["text"])

    code, _, err = run_grace(monkeypatch, capsys, "ask", "What model is used to encode the images?", "--lake", root, "--no-record")
    assert code == 0, err
    assert set().union(*calls) == candidates | {"What model is used to encode the images?"}
    assert store.read("embeddings").height == len(candidates)

    calls.clear()
    code, _, err = run_grace(monkeypatch, capsys, "ask", "Do the decoder LSTMs share weights?", "--lake", root, "--doc", PAPER, "--no-record")
    assert code == 0, err
    assert calls == [["Do the decoder LSTMs share weights?"]]
