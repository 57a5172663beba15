"""The offline embedder's own batching (texts sorted by token count, token-budget batches) gives
the vectors of ``SentenceTransformer.encode``, on which the offline thresholds were calibrated."""

from __future__ import annotations

import numpy as np
import pytest

from grace_core.models.offline_embedder import OfflineEmbedder, load_sentence_model
from grace_core.models.offline_support import source_units


@pytest.fixture(scope="module")
def texts(qasper_papers: list[dict]) -> list[str]:
    """48 real sentences of varied length, a whole section (over the 256-token limit) and a word."""
    paper = qasper_papers[0]
    units = [u for s in paper["sections"] for p in s["paragraphs"] for u in source_units(p)]
    section = "\n\n".join(max(paper["sections"], key=lambda s: sum(map(len, s["paragraphs"])))["paragraphs"])
    return list(dict.fromkeys(units[:48] + [section, "Embeddings"]))


def test_vectors_match_sentence_transformers_encode(texts: list[str]) -> None:
    model = load_sentence_model(1)
    assert len(model.tokenizer(texts[-2])["input_ids"]) > model.max_seq_length
    embedder = OfflineEmbedder(threads=1)
    vecs = embedder.embed(texts)
    assert embedder.encoded == len(texts)
    ref = model.encode(texts, batch_size=8, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    assert float((vecs * ref).sum(axis=1).min()) >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize(("batch_size", "batch_tokens"), [(1, 512), (64, 64), (7, 10_000)])
def test_batching_does_not_change_vectors(texts: list[str], batch_size: int, batch_tokens: int) -> None:
    base = OfflineEmbedder(threads=1).embed(texts)
    vecs = OfflineEmbedder(threads=1, batch_size=batch_size, batch_tokens=batch_tokens).embed(texts[::-1])[::-1]
    assert float((vecs * base).sum(axis=1).min()) >= 0.9999
