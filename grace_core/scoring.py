"""Score every claim of many documents: graph build, centralities, status, priority and
confidence (DESIGN §1–§4), one graph-tool graph per document."""

from __future__ import annotations

import numpy as np
import polars as pl

from grace_core.centrality import bipartite_distances, novelty, subgraph_betweenness, wf_closeness
from grace_core.edges import PRIOR_KINDS, claim_flags, type_edges
from grace_core.graph import build_graph, index_documents
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
    flags = claim_flags(edges, rejected, claims)
    typed = type_edges(edges, flags, params)
    src_keys = edges.select("doc_id", "source_id", "source_kind")
    if sources is not None:
        src_keys = pl.concat([src_keys, sources.select(pl.col(c).cast(pl.Utf8) for c in ("doc_id", "source_id", "source_kind"))])
    idx = index_documents(src_keys, flags, typed)

    nodes = idx.nodes
    kind = nodes["kind"].to_numpy()
    is_claim = kind == "claim"
    is_prior = np.isin(kind, PRIOR_KINDS)
    is_response = kind == "response"
    in_prior, contradicted, disputed, rejected_arr = (
        nodes[c].fill_null(False).to_numpy() for c in ("in_prior", "contradicted", "response_contradicted", "rejected")
    )
    e_src, e_dst, e_cost = (idx.edges[c].to_numpy() for c in ("src", "dst", "cost"))

    total = nodes.height
    cc_all = np.zeros(total)
    bt_all = np.full(total, np.nan)
    nov_all = np.zeros(total)
    status_all = np.full(total, "", dtype="<U8")
    for _, ns, es in idx.documents():
        g, cost = build_graph(ns.stop - ns.start, e_src[es], e_dst[es], e_cost[es])
        claim_mask = is_claim[ns]
        dist = bipartite_distances(g, cost, ~claim_mask, e_src[es], e_dst[es], e_cost[es])
        cc = wf_closeness(dist)
        status = claim_status(cc[claim_mask], in_prior[ns][claim_mask], contradicted[ns][claim_mask], rejected_arr[ns][claim_mask],
                              params.delta_refute, disputed[ns][claim_mask])
        keep = is_response[ns].copy()
        claim_vertices = np.flatnonzero(claim_mask)
        keep[claim_vertices[status == BOUNDARY]] = True
        bt = subgraph_betweenness(g, cost, keep)
        nov = novelty(dist, is_prior[ns], claim_mask)
        cc_all[ns] = cc
        bt_doc = np.full(ns.stop - ns.start, np.nan)
        bt_doc[keep] = bt[keep]
        bt_all[ns] = bt_doc
        nov_doc = np.zeros(ns.stop - ns.start)
        nov_doc[claim_mask] = nov
        nov_all[ns] = nov_doc
        status_doc = np.full(ns.stop - ns.start, "", dtype="<U8")
        status_doc[claim_mask] = status
        status_all[ns] = status_doc

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
    return scores.select(SCORE_COLUMNS).sort("doc_id", "claim_id")
