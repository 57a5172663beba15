"""Score every claim of many documents: graph build, centralities, status, priority and
confidence (DESIGN §1–§4), every document a graph of its own (grace_core.centrality)."""

from __future__ import annotations

import numpy as np
import polars as pl

from grace_core.edges import LABELS, PRIOR_KINDS, SOURCE_KINDS, claim_flags, type_edges
from grace_core.graph import index_documents
from grace_core.params import ScoringParams
from grace_core.priority import confidence, max_scaled_over_doc, minmax_over_doc, priority
from grace_core.status import BOUNDARY, claim_status

SCORE_COLUMNS = (
    "doc_id", "claim_id", "in_prior", "contradicted", "rejected", "closeness", "closeness_norm",
    "status", "betweenness", "betweenness_norm", "novelty", "novelty_norm", "priority", "confidence",
)


def score_edges(
    edges: pl.DataFrame,
    params: ScoringParams,
    *,
    rejected: pl.DataFrame | None = None,
    claims: pl.DataFrame | None = None,
    sources: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Score a validated edge table (see :func:`grace_core.edges.validate_edges`).

    ``rejected`` (``doc_id, claim_id``) lists claims reviewers rejected; ``claims``
    (``doc_id, claim_id``) and ``sources`` (``doc_id, source_id, source_kind``) add vertices that
    have no judgement rows. Returns one row per (doc_id, claim_id) with :data:`SCORE_COLUMNS`;
    ``betweenness``, its normalisation, ``novelty_norm`` and ``priority`` are null for claims
    that are not boundary.
    """
    from grace_core.centrality import closeness_and_novelty, subgraph_betweenness  # numba and graph-tool: imported on first use (grace_core.centrality.load_compiled)

    ids = [pl.col(c).cast(pl.Categorical) for c in ("doc_id", "source_id", "claim_id")]  # ids joined as integers, not text
    kinds = [pl.col("source_kind").cast(pl.Enum(SOURCE_KINDS)), pl.col("label").cast(pl.Enum(LABELS))]  # compared as integers, not text
    edges = edges.with_columns(*ids, *kinds)
    flags = claim_flags(edges, rejected, claims)
    typed = type_edges(edges, flags, params)
    src_keys = edges.select("doc_id", "source_id", pl.col("source_kind").cast(pl.Utf8))
    if sources is not None:
        src_keys = pl.concat([src_keys, sources.select(ids[0], ids[1], pl.col("source_kind").cast(pl.Utf8))])
    idx = index_documents(src_keys, flags, typed)

    nodes = idx.nodes
    kind = nodes["kind"].to_numpy()
    is_claim = kind == "claim"
    is_response = kind == "response"
    in_prior, contradicted, disputed, rejected_arr = (
        nodes[c].fill_null(False).to_numpy() for c in ("in_prior", "contradicted", "response_contradicted", "rejected")
    )
    graph = (idx.node_offsets, idx.edge_offsets, *(idx.edges[c].to_numpy() for c in ("src", "dst", "cost")))
    cc_all, nov_all = closeness_and_novelty(*graph, ~is_claim, np.isin(kind, PRIOR_KINDS))
    status_all = np.full(nodes.height, "", dtype="<U8")
    for _, ns, _ in idx.documents():
        claim = np.flatnonzero(is_claim[ns]) + ns.start
        status_all[claim] = claim_status(cc_all[claim], in_prior[claim], contradicted[claim], rejected_arr[claim],
                                         params.delta_refute, disputed[claim])
    keep = is_response | (status_all == BOUNDARY)
    bt_all = np.where(keep, subgraph_betweenness(*graph, keep), np.nan)

    scores = nodes.with_columns(
        closeness=pl.Series(cc_all),
        betweenness=pl.Series(bt_all, nan_to_null=True),
        novelty=pl.Series(nov_all),
        status=pl.Series(status_all),
    ).filter(pl.col("kind") == "claim").rename({"node_id": "claim_id"})
    boundary = pl.col("status") == BOUNDARY
    scores = scores.with_columns(
        pl.when(boundary).then(pl.col("betweenness")).alias("betweenness"),
        closeness_norm=minmax_over_doc("closeness"),
        betweenness_norm=max_scaled_over_doc("betweenness", boundary),
        novelty_norm=minmax_over_doc("novelty", boundary),
    ).with_columns(priority=priority(params), confidence=confidence(params))
    ids = pl.col("doc_id", "claim_id").cast(pl.Utf8)
    return scores.select(SCORE_COLUMNS).with_columns(ids)  # already in (doc_id, claim_id) order: see index_documents
