"""Weighted distances and centralities on one document's claim graph (DESIGN §2, §4).

A claim graph is bipartite: every edge joins a source to a claim. Exact all-pairs distances
therefore need Dijkstra runs (graph-tool) from the *smaller* side only: for a vertex ``o`` of
the other side, every path leaves through a neighbour ``s``, so

    d(o, u) = min_{s ∈ N(o)} (cost(o, s) + d(s, u))    for u ≠ o,   d(o, o) = 0.

With ≈13 sources and ≈200 claims that is 13 single-source problems instead of 213; while the
smaller side is small they are solved together by min-plus products and Floyd–Warshall on the
pivot-to-pivot two-hop graph, otherwise by graph-tool's Dijkstra (see
benchmarks/bench_scoring.py). Costs are ``1 / weight``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from graph_tool import Graph, GraphView
from graph_tool.centrality import betweenness
from graph_tool.topology import shortest_distance

_CHUNK_CELLS = 2_000_000  # other-side rows are derived in chunks of at most this many matrix cells
MIN_PLUS_MAX_PIVOTS = 48  # up to this many pivots, min-plus algebra replaces per-pivot Dijkstra runs


@dataclass(frozen=True)
class Distances:
    """Exact shortest-path facts of one document graph.

    ``pivot``: vertices of the side Dijkstra ran from; ``pivot_dist``: their distance rows
    (``len(pivot) × N``, ``inf`` when unreachable); ``sums``: Σ of finite distances from each
    vertex; ``reach``: number of vertices each vertex reaches, itself included (its
    component's size ``n_v``).
    """

    n: int
    pivot: np.ndarray
    pivot_dist: np.ndarray
    sums: np.ndarray
    reach: np.ndarray


def _min_plus_pivot_rows(n: int, pivot: np.ndarray, other: np.ndarray, piv_end: np.ndarray, oth_end: np.ndarray,
                         edge_cost: np.ndarray) -> np.ndarray:
    """Distance rows of the pivot vertices by min-plus algebra on the bipartite cost matrix
    ``A`` (pivot × other): two hops ``T = A ⊗ Aᵀ`` give the pivot-to-pivot graph, Floyd–Warshall
    closes it, and ``T* ⊗ A`` gives pivot-to-other distances. Exact, like Dijkstra, and cheaper
    than one Dijkstra run per pivot while the pivot side is small."""
    p = len(pivot)
    row = np.full(n, -1)
    row[pivot] = np.arange(p)
    col = np.full(n, -1)
    col[other] = np.arange(len(other))
    a = np.full((p, len(other)), np.inf)
    np.minimum.at(a, (row[piv_end], col[oth_end]), edge_cost)
    t = np.empty((p, p))
    for i in range(p):
        t[i] = (a[i] + a).min(axis=1) if len(other) else np.inf
    np.fill_diagonal(t, 0.0)
    for k in range(p):
        np.minimum(t, t[:, k, None] + t[None, k, :], out=t)
    out = np.empty((p, n))
    out[:, pivot] = t
    for i in range(p):
        out[i, other] = (t[i][:, None] + a).min(axis=0) if p else np.inf
    return out


def bipartite_distances(g: Graph, cost, left: np.ndarray, src: np.ndarray, dst: np.ndarray, edge_cost: np.ndarray) -> Distances:
    """All distance sums of a bipartite graph whose edges run ``src`` (a ``left`` vertex) →
    ``dst`` (a right vertex) with ``edge_cost``; ``g``/``cost`` is the same graph in graph-tool."""
    n = g.num_vertices()
    left = np.asarray(left, dtype=bool)
    pivot_is_left = left.sum() <= n - left.sum()
    pivot = np.flatnonzero(left if pivot_is_left else ~left)
    other = np.flatnonzero(~left if pivot_is_left else left)
    piv_end, oth_end = (src, dst) if pivot_is_left else (dst, src)

    if len(pivot) <= MIN_PLUS_MAX_PIVOTS:
        pivot_dist = _min_plus_pivot_rows(n, pivot, other, piv_end, oth_end, np.asarray(edge_cost, float))
    else:
        pivot_dist = np.empty((len(pivot), n))
        dist_map = g.new_vertex_property("double")
        for i, v in enumerate(pivot):
            shortest_distance(g, source=int(v), weights=cost, dist_map=dist_map)
            pivot_dist[i] = dist_map.a
    sums = np.zeros(n)
    reach = np.ones(n)
    finite = np.isfinite(pivot_dist)
    sums[pivot] = np.where(finite, pivot_dist, 0.0).sum(axis=1)
    reach[pivot] = finite.sum(axis=1)

    # other side: row o = min over its edges of (edge cost + pivot row of the neighbour)
    row_of_pivot = np.full(n, len(pivot))
    row_of_pivot[pivot] = np.arange(len(pivot))
    padded_dist = np.vstack([pivot_dist, np.full((1, n), np.inf)])
    slot = np.full(n, -1)
    slot[other] = np.arange(len(other))
    order = np.argsort(slot[oth_end], kind="stable")
    o_slot, p_row, e_cost = slot[oth_end][order], row_of_pivot[piv_end][order], np.asarray(edge_cost, float)[order]
    degree = np.bincount(o_slot, minlength=len(other))
    k = int(degree.max()) if len(degree) else 0
    nbr = np.full((len(other), max(k, 1)), len(pivot))
    nbr_cost = np.zeros((len(other), max(k, 1)))
    position = np.arange(len(o_slot)) - np.repeat(np.cumsum(degree) - degree, degree)
    nbr[o_slot, position] = p_row
    nbr_cost[o_slot, position] = e_cost
    step = max(1, _CHUNK_CELLS // max(n, 1))
    for a in range(0, len(other), step):
        b = min(a + step, len(other))
        rows = padded_dist[nbr[a:b, 0]] + nbr_cost[a:b, 0, None]
        for j in range(1, k):
            np.minimum(rows, padded_dist[nbr[a:b, j]] + nbr_cost[a:b, j, None], out=rows)
        rows[np.arange(b - a), other[a:b]] = 0.0
        fin = np.isfinite(rows)
        sums[other[a:b]] = np.where(fin, rows, 0.0).sum(axis=1)
        reach[other[a:b]] = fin.sum(axis=1)
    return Distances(n=n, pivot=pivot, pivot_dist=pivot_dist, sums=sums, reach=reach)


def wf_closeness(d: Distances) -> np.ndarray:
    r"""Weighted Wasserman–Faust closeness of every vertex.

    .. math::

        CC(v) = \frac{n_v - 1}{N - 1} \cdot \frac{n_v - 1}{\sum_{u \in V_v} d_W(v, u)}

    where ``N`` is the number of vertices of the graph, ``V_v`` the connected component of
    ``v``, ``n_v = |V_v|`` and ``d_W`` the Dijkstra distance with edge cost ``1/w``.

    Normalisation: the first factor scales a component's closeness by the share of the graph
    it reaches, so a vertex of a small component scores less than one of the same shape in a
    large component.

    Disconnected graphs: distances are summed within ``V_v`` only; an isolated vertex
    (``n_v = 1``) and every vertex of a one-vertex graph get ``CC = 0``.

    Equals ``networkx.closeness_centrality(G, distance="cost", wf_improved=True)``.

    References
    ----------
    S. Wasserman and K. Faust, *Social Network Analysis: Methods and Applications*,
    Cambridge University Press, 1994, ch. 5.3.
    """
    if d.n <= 1:
        return np.zeros(d.n)
    cc = np.zeros(d.n)
    ok = d.reach > 1
    cc[ok] = (d.reach[ok] - 1.0) ** 2 / (d.n - 1.0) / d.sums[ok]
    return cc


def novelty(d: Distances, priors: np.ndarray, claims: np.ndarray) -> np.ndarray:
    r"""Distance of every claim vertex to its nearest prior (multi-source shortest paths).

    .. math::

        Nov(c) = \min_{p \in P} d_W(c, p)

    Disconnected graphs: a claim with no path to any prior gets the largest finite novelty of
    the document's claims plus 1 (1 when none is finite, e.g. a document without priors).
    Returns values for the vertices in ``claims`` (a boolean mask), in vertex order.
    """
    priors = np.asarray(priors, dtype=bool)
    claim_idx = np.flatnonzero(np.asarray(claims, dtype=bool))
    dist = np.full(len(claim_idx), np.inf)
    if priors.any():
        in_pivot = np.zeros(d.n, dtype=bool)
        in_pivot[d.pivot] = True
        row = np.full(d.n, -1)
        row[d.pivot] = np.arange(len(d.pivot))
        if in_pivot[priors].all():  # priors were Dijkstra sources: their rows hold d(p, c)
            dist = d.pivot_dist[row[priors]][:, claim_idx].min(axis=0)
        else:  # claims were the Dijkstra sources: their rows hold d(c, p)
            dist = d.pivot_dist[row[claim_idx]][:, priors].min(axis=1)
    finite = np.isfinite(dist)
    fill = (dist[finite].max() + 1.0) if finite.any() else 1.0
    dist[~finite] = fill
    return dist


def subgraph_betweenness(g: Graph, cost, keep: np.ndarray) -> np.ndarray:
    r"""Weighted shortest-path betweenness inside the subgraph induced by the vertices ``keep``.

    .. math::

        B(v) = \frac{2}{(n - 1)(n - 2)} \sum_{s \ne v \ne t} \frac{\sigma_{st}(v)}{\sigma_{st}}

    over unordered pairs ``{s, t}`` of the ``n`` kept vertices, with ``σ_st`` the number of
    cheapest paths (cost ``1/w``) and ``σ_st(v)`` those through ``v``.

    Normalisation: as networkx's ``betweenness_centrality(normalized=True)`` for undirected
    graphs (no normalisation when ``n ≤ 2``, where every value is 0).

    Disconnected graphs: pairs in different components have no path and contribute nothing.
    Vertices outside ``keep`` get 0.

    References
    ----------
    U. Brandes, "A faster algorithm for betweenness centrality", *Journal of Mathematical
    Sociology* 25(2), 2001.
    """
    keep = np.asarray(keep, dtype=bool)
    n = int(keep.sum())
    out = np.zeros(g.num_vertices())
    if n <= 2:
        return out
    view = GraphView(g, vfilt=keep)
    vb, _ = betweenness(view, weight=cost, norm=False)
    out[keep] = vb.a[keep] * 2.0 / ((n - 1.0) * (n - 2.0))
    return out
