"""Claim graphs: vectorised node indexing over a whole edge table and one graph-tool graph per
document (DESIGN §1). Never one graph for many documents: exact closeness grows with N²."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import polars as pl
from graph_tool import Graph


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
    claim_id, weight``. Every source and claim listed is a vertex, with or without edges.
    """
    src_nodes = sources.select("doc_id", pl.col("source_id").alias("node_id"), pl.col("source_kind").alias("kind")).unique(
        ["doc_id", "node_id"], keep="first"
    )
    claim_nodes = claims.rename({"claim_id": "node_id"}).with_columns(kind=pl.lit("claim")).unique(["doc_id", "node_id"], keep="first")
    nodes = (
        pl.concat([src_nodes, claim_nodes], how="diagonal")
        .with_columns(_is_claim=pl.col("kind") == "claim")
        .sort(["doc_id", "_is_claim", "node_id"])
        .drop("_is_claim")
        .with_columns(vertex=pl.int_range(pl.len(), dtype=pl.Int64).over("doc_id"))
    )
    keys = nodes.select("doc_id", "node_id", "vertex")
    edges = (
        typed_edges.select("doc_id", "source_id", "claim_id", (1.0 / pl.col("weight")).alias("cost"))
        .join(keys.rename({"node_id": "source_id", "vertex": "src"}), on=["doc_id", "source_id"])
        .join(keys.rename({"node_id": "claim_id", "vertex": "dst"}), on=["doc_id", "claim_id"])
        .sort("doc_id", "src", "dst")
        .select("doc_id", "src", "dst", "cost")
    )
    doc_counts = nodes.group_by("doc_id", maintain_order=True).len()
    doc_ids = doc_counts["doc_id"].to_list()
    node_offsets = np.concatenate([[0], np.cumsum(doc_counts["len"].to_numpy())])
    edge_counts = pl.DataFrame({"doc_id": doc_ids}).join(edges.group_by("doc_id").len(), on="doc_id", how="left").fill_null(0)
    edge_offsets = np.concatenate([[0], np.cumsum(edge_counts["len"].to_numpy())])
    return IndexedTables(nodes, edges, doc_ids, node_offsets, edge_offsets)


def build_graph(n_vertices: int, src: np.ndarray, dst: np.ndarray, cost: np.ndarray) -> tuple[Graph, object]:
    """One undirected graph-tool graph with ``n_vertices`` vertices and an edge property ``cost``."""
    g = Graph(directed=False)
    g.add_vertex(n_vertices)
    cost_prop = g.new_edge_property("double")
    if len(src):
        g.add_edge_list(np.column_stack([src, dst, cost]), eprops=[cost_prop])
    return g, cost_prop
