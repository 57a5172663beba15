"""Stored embeddings of the texts questions are answered from (table ``embeddings``): a text is
embedded once per document and embedder, and every later question reuses its vector, so asking
embeds only the question (DESIGN §6).

A stored vector is named by its document, the hash of its text
(:func:`grace_core.models.hashing.text_hash`, the embedder cache's own key) and the identity of
the embedder that made it (:func:`grace_core.models.factory.embedder_identity`): a text whose
wording changed has another hash, and another embedder (or the same model at another precision)
never reuses it.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from grace_core.models.hashing import text_hash
from grace_core.models.roles import Embedder

STORED_COLUMNS = ("doc_id", "text_hash", "embedder", "vector")
"""The columns of a stored vector (the lake's ``embeddings`` table)."""


def with_text_hash(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (with ``text``) with the ``text_hash`` of each text added."""
    return rows.with_columns(text_hash=pl.Series([text_hash(t) for t in rows["text"].to_list()], dtype=pl.Utf8))


def embeddings_of(rows: pl.DataFrame, stored: pl.DataFrame, embedder: Embedder, identity: str) -> tuple[np.ndarray, pl.DataFrame]:
    """The vector of each row of ``rows`` (``doc_id, text``), in order: its stored one when
    ``stored`` (``doc_id, text_hash, vector``, of the embedder ``identity``) holds its document and
    text, else embedded (each such text once, in one call). Returns the vectors (float32, one row
    per row of ``rows``) and the :data:`STORED_COLUMNS` rows of the texts just embedded, to store."""
    keyed = with_text_hash(rows.select("doc_id", "text"))
    found = keyed.join(stored.select("doc_id", "text_hash", "vector").unique(["doc_id", "text_hash"]),
                       on=["doc_id", "text_hash"], how="left", maintain_order="left")
    hit = found["vector"].is_not_null().to_numpy()
    missing = found.filter(pl.col("vector").is_null()).unique(["doc_id", "text_hash"], maintain_order=True)
    texts = missing.unique("text_hash", maintain_order=True)
    # the vector length from what is at hand: asking an API embedder for its dimension may cost a call
    new = embedder.embed(texts["text"].to_list()) if texts.height else None
    dim = new.shape[1] if new is not None else int(found["vector"].list.len().max() or 0)
    out = np.empty((found.height, dim), dtype=np.float32)
    if hit.any():
        out[hit] = found.filter(pl.col("vector").is_not_null())["vector"].cast(pl.Array(pl.Float32, dim)).to_numpy()
    if new is None:
        return out, missing.select("doc_id", "text_hash", pl.lit(identity).alias("embedder"), pl.col("vector").cast(pl.List(pl.Float64)))
    at = {h: i for i, h in enumerate(texts["text_hash"].to_list())}
    out[~hit] = new[[at[h] for h in found.filter(pl.col("vector").is_null())["text_hash"].to_list()]]
    fresh = missing.select("doc_id", "text_hash", pl.lit(identity).alias("embedder")).with_columns(
        vector=pl.Series(new[[at[h] for h in missing["text_hash"].to_list()]]).cast(pl.List(pl.Float64)))
    return out, fresh
