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


def pair_key(doc: str, node: str) -> pl.Expr:
    """One 64-bit join key for a (document, node) pair: the two ids' categorical codes side by side."""
    code = [pl.col(c).cast(pl.Categorical).to_physical().cast(pl.UInt64) for c in (doc, node)]
    return code[0] * (1 << 32) + code[1]


def index_documents(sources: pl.DataFrame, claims: pl.DataFrame, typed_edges: pl.DataFrame) -> IndexedTables:
    """Map ids to per-document vertex indices with joins, not a per-edge Python loop.

    ``sources``: ``doc_id, source_id, source_kind``; ``claims``: ``doc_id, claim_id`` (plus any
    extra claim columns, kept on the claim rows); ``typed_edges``: ``doc_id, source_id,
    claim_id, weight``; ids may be text or categorical. Every source and claim listed is a
    vertex, with or without edges; the same (source, claim) pair listed twice is one edge.
    Documents are numbered in ``doc_id`` order; within a document, vertices follow ``node_id``
    and edges ``(src, dst)``, so the result does not depend on the row order. Joins, unique and
    sorts run on single integer keys (multi-column keys of text were most of the work).
    """
    src_nodes = sources.select("doc_id", pl.col("source_id").alias("node_id"), pl.col("source_kind").alias("kind"))
    claim_nodes = claims.rename({"claim_id": "node_id"}).with_columns(kind=pl.lit("claim"))
    nodes = pl.concat([src_nodes.with_columns(_key=pair_key("doc_id", "node_id")).unique("_key", keep="first"),
                       claim_nodes.with_columns(_key=pair_key("doc_id", "node_id")).unique("_key", keep="first")], how="diagonal")
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
    keys = nodes.select("_key", "doc", "vertex")
    joined = (
        typed_edges.select(_src=pair_key("doc_id", "source_id"), _dst=pair_key("doc_id", "claim_id"), cost=1.0 / pl.col("weight"))
        .join(keys.rename({"_key": "_src", "vertex": "src"}), on="_src")
        .join(keys.select(pl.col("_key").alias("_dst"), pl.col("vertex").alias("dst")), on="_dst")
    )
    doc, src, dst = (joined[c].to_numpy().astype(np.int64) for c in ("doc", "src", "dst"))
    width = int(node_counts.max()) + 1 if len(node_counts) else 1
    if len(doc_ids) * width * width < 2**62:
        pair = (doc * width + src) * width + dst
        order = np.argsort(pair, kind="stable")
        pair = pair[order]
        first = np.ones(len(pair), bool)
        first[1:] = pair[1:] != pair[:-1]
    else:  # documents too large for one 63-bit key
        order = np.lexsort((dst, src, doc))
        first = np.ones(len(order), bool)
        first[1:] = np.any(np.diff(np.stack([doc[order], src[order], dst[order]]), axis=1) != 0, axis=0)
    keep = order[first]
    edges = pl.DataFrame({"doc": doc[keep], "src": src[keep], "dst": dst[keep], "cost": joined["cost"].to_numpy()[keep]})
    edge_offsets = np.concatenate([[0], np.cumsum(np.bincount(doc[keep], minlength=len(doc_ids)))])
    return IndexedTables(nodes.drop("doc", "_key"), edges, doc_ids, node_offsets, edge_offsets)
