"""Score every claim of many documents: graph build, centralities, status, priority and
confidence (DESIGN §1–§4), every document a graph of its own (grace_core.centrality)."""

from __future__ import annotations

import numpy as np
import polars as pl

from grace_core.edges import SOURCE_KINDS
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
    from grace_core.centrality import closeness_and_novelty, subgraph_betweenness  # numba and graph-tool: imported on first use (load_compiled)
    from grace_core.graph import CLAIM, PRIOR_KIND_CODES, build_graphs

    g = build_graphs(edges, params, rejected=rejected, claims=claims, sources=sources)
    is_claim = g.kind == CLAIM
    graph = (g.node_offsets, g.edge_offsets, g.src, g.dst, g.cost)
    cc_all, nov_all = closeness_and_novelty(*graph, ~is_claim, g.kind < PRIOR_KIND_CODES)
    status_all = np.full(len(g.kind), "", dtype="<U8")
    for a, b in zip(g.node_offsets[:-1], g.node_offsets[1:]):
        claim = np.flatnonzero(is_claim[a:b]) + a
        status_all[claim] = claim_status(cc_all[claim], g.in_prior[claim], g.contradicted[claim], g.rejected[claim],
                                         params.delta_refute, g.response_contradicted[claim])
    keep = (g.kind == SOURCE_KINDS.index("response")) | (status_all == BOUNDARY)
    bt_all = np.where(keep, subgraph_betweenness(*graph, keep), np.nan)

    scores = pl.DataFrame({  # doc_id: the document's index until the end (integers partition faster than text)
        "doc_id": g.doc[is_claim], "claim_id": g.node[is_claim], "in_prior": g.in_prior[is_claim],
        "contradicted": g.contradicted[is_claim], "rejected": g.rejected[is_claim], "closeness": cc_all[is_claim],
        "betweenness": pl.Series(bt_all[is_claim], nan_to_null=True), "novelty": nov_all[is_claim], "status": status_all[is_claim],
    })
    boundary = pl.col("status") == BOUNDARY
    scores = scores.with_columns(
        pl.when(boundary).then(pl.col("betweenness")).alias("betweenness"),
        closeness_norm=minmax_over_doc("closeness"),
        betweenness_norm=max_scaled_over_doc("betweenness", boundary),
        novelty_norm=minmax_over_doc("novelty", boundary),
    ).with_columns(priority=priority(params), confidence=confidence(params))
    return scores.select(SCORE_COLUMNS).with_columns(  # in (doc_id, claim_id) order: see ClaimGraphs
        doc_id=g.doc_ids.gather(scores["doc_id"]), claim_id=g.node_ids.gather(scores["claim_id"]))


def load_compiled() -> None:
    """Import numba and graph-tool, load the compiled graph build and closeness kernel from
    numba's disk cache (compiling them when the cache has none) and make graph-tool's first
    betweenness call, by scoring a three-claim document: what the first scoring call would do
    first, and a command can run on a thread while it reads its input (``grace score``)."""
    rows = [("p", "prior", "a"), ("r", "response", "a"), ("r", "response", "b"), ("s", "response", "b"), ("s", "response", "c")]
    score_edges(pl.DataFrame([{"doc_id": "d", "source_id": s, "source_kind": k, "claim_id": c, "label": "entails"} for s, k, c in rows]),
                ScoringParams())
