"""Claim graphs: vectorised node indexing over a whole edge table, documents kept apart by
offsets (DESIGN §1). Never one graph for many documents: exact closeness grows with N²."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import polars as pl


@dataclass(frozen=True)
class IndexedTables:
    """Nodes and edges of many documents, sorted by document, with per-document vertex indices.

    ``nodes`` has ``doc_id, node_id, kind, vertex`` (kind: a source kind or ``claim``), sources
    first within each document; ``edges`` has ``src, dst, cost`` as per-document vertex indices.
    """

    nodes: pl.DataFrame
    edges: pl.DataFrame
    doc_ids: list[str]
    node_offsets: np.ndarray
    edge_offsets: np.ndarray

    def documents(self) -> Iterator[tuple[int, slice, slice]]:
        """Yield ``(doc_index, node_slice, edge_slice)`` for each document in order."""
        for i in range(len(self.doc_ids)):
            yield (
                i,
                slice(int(self.node_offsets[i]), int(self.node_offsets[i + 1])),
                slice(int(self.edge_offsets[i]), int(self.edge_offsets[i + 1])),
            )


def index_documents(sources: pl.DataFrame, claims: pl.DataFrame, typed_edges: pl.DataFrame) -> IndexedTables:
    """Map ids to per-document vertex indices with joins, not a per-edge Python loop.

    ``sources``: ``doc_id, source_id, source_kind``; ``claims``: ``doc_id, claim_id`` (plus any
    extra claim columns, kept on the claim rows); ``typed_edges``: ``doc_id, source_id,
    claim_id, weight``; ids may be text or categorical. Every source and claim listed is a
    vertex, with or without edges.
    Documents are numbered in ``doc_id`` order and the big tables are sorted by those numbers
    (sorting strings is the slow part of indexing); within a document, vertices follow
    ``node_id`` and edges ``(src, dst)``, so the result does not depend on the row order.
    """
    src_nodes = sources.select("doc_id", pl.col("source_id").alias("node_id"), pl.col("source_kind").alias("kind")).unique(
        ["doc_id", "node_id"], keep="first"
    )
    claim_nodes = claims.rename({"claim_id": "node_id"}).with_columns(kind=pl.lit("claim")).unique(["doc_id", "node_id"], keep="first")
    nodes = pl.concat([src_nodes, claim_nodes], how="diagonal")
    docs = nodes.select("doc_id").unique().sort(pl.col("doc_id").cast(pl.Utf8)).with_row_index("doc")
    nodes = (
        nodes.join(docs, on="doc_id")
        .with_columns(_is_claim=pl.col("kind") == "claim")
        .sort(["doc", "_is_claim", pl.col("node_id").cast(pl.Utf8)])
        .drop("_is_claim")
    )
    doc_ids = docs["doc_id"].cast(pl.Utf8).to_list()
    node_counts = np.bincount(nodes["doc"].to_numpy(), minlength=len(doc_ids))
    node_offsets = np.concatenate([[0], np.cumsum(node_counts)])
    nodes = nodes.with_columns(vertex=pl.Series(np.arange(nodes.height) - np.repeat(node_offsets[:-1], node_counts), dtype=pl.Int64))
    keys = nodes.select("doc_id", "node_id", "doc", "vertex")
    edges = (
        typed_edges.select("doc_id", "source_id", "claim_id", (1.0 / pl.col("weight")).alias("cost"))
        .join(keys.rename({"node_id": "source_id", "vertex": "src"}), on=["doc_id", "source_id"])
        .join(keys.select(pl.col("doc_id"), pl.col("node_id").alias("claim_id"), pl.col("vertex").alias("dst")), on=["doc_id", "claim_id"])
        .select("doc", "src", "dst", "cost")
        .sort("doc", "src", "dst")
    )
    edge_offsets = np.concatenate([[0], np.cumsum(np.bincount(edges["doc"].to_numpy(), minlength=len(doc_ids)))])
    return IndexedTables(nodes.drop("doc"), edges, doc_ids, node_offsets, edge_offsets)
