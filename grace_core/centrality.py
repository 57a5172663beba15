"""Weighted distances and centralities of claim graphs (DESIGN §2, §4): closeness and novelty
compiled with numba, betweenness with graph-tool.

Documents arrive as one flat table: vertices ``node_offsets[d]:node_offsets[d+1]`` and edges
``edge_offsets[d]:edge_offsets[d+1]`` belong to document ``d``, edge endpoints are vertex
indices within their document, and the cost of an edge is ``1 / weight``. Every document is a
graph of its own (never one graph for many documents: exact closeness grows with N², and
graph-tool's betweenness on a union of documents visits every vertex from every source).

A claim graph is bipartite: every edge joins a source to a claim. Exact all-pairs distances
therefore need Dijkstra runs from the *smaller* side (the pivots) only: for a vertex ``o`` of
the other side, every path leaves through a neighbour ``s``, so

    d(o, u) = min_{s ∈ N(o)} (cost(o, s) + d(s, u))    for u ≠ o,   d(o, o) = 0.

With ≈13 sources and ≈200 claims that is 13 single-source problems instead of 213, run one
document after the other inside one compiled loop (a binary heap with lazy deletion), so a
document costs no Python call. Why numba (a compiled dependency, from PyPI with its llvmlite
wheel): graph-tool has no "Dijkstra from these sources, derive the rest" and its all-pairs
closeness searches from all 213 vertices; the per-vertex loops cannot be vectorised
(benchmarks/bench_scoring.py). Compiled functions are cached on disk (``cache=True``).

Betweenness runs graph-tool's Brandes implementation on each document's ``G_boundary`` (the
responses and Boundary claims only, a few dozen vertices), as the product card has it: a
graph-tool task computes the centralities of each round.
"""

from __future__ import annotations

import numpy as np
from graph_tool import Graph
from graph_tool.centrality import betweenness
from numba import njit

_INF = np.inf


@njit(cache=True, nogil=True)
def _adjacency(n, src, dst, cost):
    """Undirected CSR adjacency (``indptr, neighbour, edge cost``) of one document."""
    indptr = np.zeros(n + 1, np.int64)
    for i in range(len(src)):
        indptr[src[i] + 1] += 1
        indptr[dst[i] + 1] += 1
    for v in range(n):
        indptr[v + 1] += indptr[v]
    fill = indptr[:-1].copy()
    nbr = np.empty(2 * len(src), np.int64)
    w = np.empty(2 * len(src))
    for i in range(len(src)):
        a, b = src[i], dst[i]
        nbr[fill[a]] = b
        w[fill[a]] = cost[i]
        fill[a] += 1
        nbr[fill[b]] = a
        w[fill[b]] = cost[i]
        fill[b] += 1
    return indptr, nbr, w


@njit(cache=True, nogil=True)
def _push(hk, hv, size, key, v):
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if hk[parent] <= key:
            break
        hk[i] = hk[parent]
        hv[i] = hv[parent]
        i = parent
    hk[i] = key
    hv[i] = v
    return size + 1


@njit(cache=True, nogil=True)
def _pop(hk, hv, size):
    key = hk[0]
    v = hv[0]
    size -= 1
    last_k = hk[size]
    last_v = hv[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and hk[c + 1] < hk[c]:
            c += 1
        if hk[c] >= last_k:
            break
        hk[i] = hk[c]
        hv[i] = hv[c]
        i = c
    hk[i] = last_k
    hv[i] = last_v
    return key, v, size


@njit(cache=True, nogil=True)
def _dijkstra(indptr, nbr, w, sources, dist, done, hk, hv):
    """Distances from the nearest of ``sources`` into ``dist`` (``inf`` when unreachable)."""
    dist[:] = _INF
    done[:] = False
    size = 0
    for s in sources:
        dist[s] = 0.0
        size = _push(hk, hv, size, 0.0, s)
    while size:
        d, v, size = _pop(hk, hv, size)
        if done[v]:
            continue
        done[v] = True
        for j in range(indptr[v], indptr[v + 1]):
            u = nbr[j]
            nd = d + w[j]
            if nd < dist[u]:
                dist[u] = nd
                size = _push(hk, hv, size, nd, u)


@njit(cache=True, nogil=True)
def _document_closeness_novelty(n, src, dst, cost, is_source, is_prior, cc, nov):
    indptr, nbr, w = _adjacency(n, src, dst, cost)
    done = np.zeros(n, np.bool_)
    hk = np.empty(2 * len(src) + n + 1)
    hv = np.empty(2 * len(src) + n + 1, np.int64)
    n_sources = 0
    for v in range(n):
        n_sources += is_source[v]
    pivot_is_source = n_sources <= n - n_sources
    pivots = np.flatnonzero(is_source == pivot_is_source)
    row_of = np.full(n, -1, np.int64)
    dist = np.empty((len(pivots), n))
    one = np.empty(1, np.int64)
    sums = np.zeros(n)
    reach = np.ones(n)
    for i in range(len(pivots)):
        row_of[pivots[i]] = i
        one[0] = pivots[i]
        _dijkstra(indptr, nbr, w, one, dist[i], done, hk, hv)
        s = 0.0
        k = 0
        for u in range(n):
            if dist[i, u] < _INF:
                s += dist[i, u]
                k += 1
        sums[pivots[i]] = s
        reach[pivots[i]] = k
    row = np.empty(n)
    for o in range(n):
        if row_of[o] >= 0:
            continue
        row[:] = _INF
        for j in range(indptr[o], indptr[o + 1]):
            r = row_of[nbr[j]]
            c = w[j]
            for u in range(n):
                x = c + dist[r, u]
                if x < row[u]:
                    row[u] = x
        row[o] = 0.0
        s = 0.0
        k = 0
        for u in range(n):
            if row[u] < _INF:
                s += row[u]
                k += 1
        sums[o] = s
        reach[o] = k
    for v in range(n):
        cc[v] = (reach[v] - 1.0) ** 2 / (n - 1.0) / sums[v] if n > 1 and reach[v] > 1 else 0.0

    priors = np.flatnonzero(is_prior)
    to_prior = np.full(n, _INF)
    if len(priors):
        _dijkstra(indptr, nbr, w, priors, to_prior, done, hk, hv)
    far = -1.0
    for v in range(n):
        if not is_source[v] and to_prior[v] < _INF and to_prior[v] > far:
            far = to_prior[v]
    fill = far + 1.0 if far >= 0.0 else 1.0
    for v in range(n):
        nov[v] = 0.0 if is_source[v] else (to_prior[v] if to_prior[v] < _INF else fill)


@njit(cache=True, nogil=True)
def _closeness_novelty(node_offsets, edge_offsets, src, dst, cost, is_source, is_prior):
    cc = np.zeros(node_offsets[-1])
    nov = np.zeros(node_offsets[-1])
    for d in range(len(node_offsets) - 1):
        a, b = node_offsets[d], node_offsets[d + 1]
        ea, eb = edge_offsets[d], edge_offsets[d + 1]
        _document_closeness_novelty(b - a, src[ea:eb], dst[ea:eb], cost[ea:eb], is_source[a:b], is_prior[a:b], cc[a:b], nov[a:b])
    return cc, nov


def _flat(node_offsets, edge_offsets, src, dst, cost):
    return (np.ascontiguousarray(node_offsets, np.int64), np.ascontiguousarray(edge_offsets, np.int64),
            np.ascontiguousarray(src, np.int64), np.ascontiguousarray(dst, np.int64), np.ascontiguousarray(cost, np.float64))


def closeness_and_novelty(node_offsets, edge_offsets, src, dst, cost, is_source, is_prior) -> tuple[np.ndarray, np.ndarray]:
    r"""Closeness of every vertex and novelty of every claim vertex, document by document.

    ``is_source`` marks the source vertices (the other side are claims), ``is_prior`` the
    prior sources (document passages and verified claims). Returns ``(closeness, novelty)``,
    one value per vertex (novelty 0 on sources).

    **Closeness** is the weighted Wasserman–Faust closeness:

    .. math::

        CC(v) = \frac{n_v - 1}{N - 1} \cdot \frac{n_v - 1}{\sum_{u \in V_v} d_W(v, u)}

    where ``N`` is the number of vertices of the document's graph, ``V_v`` the connected
    component of ``v``, ``n_v = |V_v|`` and ``d_W`` the Dijkstra distance with edge cost ``1/w``.

    Normalisation: the first factor scales a component's closeness by the share of the graph
    it reaches, so a vertex of a small component scores less than one of the same shape in a
    large component.

    Disconnected graphs: distances are summed within ``V_v`` only; an isolated vertex
    (``n_v = 1``) and every vertex of a one-vertex graph get ``CC = 0``.

    Equals ``networkx.closeness_centrality(G, distance="cost", wf_improved=True)``.

    **Novelty** is the distance of a claim to its nearest prior (one multi-source Dijkstra):

    .. math::

        Nov(c) = \min_{p \in P} d_W(c, p)

    Disconnected graphs: a claim with no path to any prior gets the largest finite novelty of
    the document's claims plus 1 (1 when none is finite, e.g. a document without priors).

    References
    ----------
    S. Wasserman and K. Faust, *Social Network Analysis: Methods and Applications*,
    Cambridge University Press, 1994, ch. 5.3.
    """
    return _closeness_novelty(*_flat(node_offsets, edge_offsets, src, dst, cost),
                              np.ascontiguousarray(is_source, np.bool_), np.ascontiguousarray(is_prior, np.bool_))


BETWEENNESS_BATCH_VERTICES = 128
"""Kept vertices of the consecutive documents whose subgraphs go to graph-tool in one call (a
document starting before this many belongs to the call). graph-tool's call and graph cost
≈ 0.2 ms each, more than its Brandes on a few dozen vertices, while its Brandes resets arrays
of the whole graph per source: one to a few hundred vertices per call cost least
(bench_scoring). A call on usual documents stays under graph-tool's OpenMP threshold (300
vertices), so it runs on one thread and sums in one order."""


def subgraph_betweenness(node_offsets, edge_offsets, src, dst, cost, keep) -> np.ndarray:
    r"""Weighted shortest-path betweenness inside each document's subgraph induced by the
    vertices ``keep``:

    .. math::

        B(v) = \frac{2}{(n - 1)(n - 2)} \sum_{s \ne v \ne t} \frac{\sigma_{st}(v)}{\sigma_{st}}

    over unordered pairs ``{s, t}`` of the document's ``n`` kept vertices, with ``σ_st`` the
    number of cheapest paths (cost ``1/w``) and ``σ_st(v)`` those through ``v``; computed by
    graph-tool's ``betweenness`` (Brandes) on the documents' kept subgraphs, a few side by side
    per call (:data:`BETWEENNESS_BATCH_VERTICES`): no path joins two documents, so each
    document's sums are those of its subgraph alone, and pairs from two documents add nothing.

    Normalisation: as networkx's ``betweenness_centrality(normalized=True)`` for undirected
    graphs (no normalisation when ``n ≤ 2``, where every value is 0).

    Disconnected graphs: pairs in different components have no path and contribute nothing.
    Vertices outside ``keep`` get 0.

    References
    ----------
    U. Brandes, "A faster algorithm for betweenness centrality", *Journal of Mathematical
    Sociology* 25(2), 2001.
    """
    node_offsets, edge_offsets, src, dst, cost = _flat(node_offsets, edge_offsets, src, dst, cost)
    keep = np.asarray(keep, dtype=bool)
    out = np.zeros(int(node_offsets[-1]))
    kept_before = np.concatenate([[0], np.cumsum(keep)])  # kept vertices before each vertex: a kept vertex's label
    vertex_of = np.flatnonzero(keep)  # the vertex of each label
    first = kept_before[node_offsets]  # each document's first label
    n = np.diff(first).astype(float)  # kept vertices per document
    with np.errstate(divide="ignore"):
        scale = np.repeat(np.where(n > 2, 2.0 / ((n - 1.0) * (n - 2.0)), 0.0), np.diff(first))
    doc_of_edge = np.repeat(np.arange(len(n)), np.diff(edge_offsets))
    s, t = src + node_offsets[doc_of_edge], dst + node_offsets[doc_of_edge]
    inside = keep[s] & keep[t]
    s, t, c = kept_before[s[inside]], kept_before[t[inside]], cost[inside]
    edge_at = np.concatenate([[0], np.cumsum(inside)])[edge_offsets]  # each document's first kept edge
    batch = first[:-1] // BETWEENNESS_BATCH_VERTICES
    starts = np.flatnonzero(np.diff(batch, prepend=-1))
    for a, b in zip(starts, np.append(starts[1:], len(n))):
        lo, hi, e0, e1 = first[a], first[b], edge_at[a], edge_at[b]
        if hi - lo <= 2:
            continue
        g = Graph(directed=False)
        g.add_vertex(int(hi - lo))
        weight = g.new_edge_property("double")
        g.add_edge_list(np.column_stack([s[e0:e1] - lo, t[e0:e1] - lo, c[e0:e1]]), eprops=[weight])
        vb, _ = betweenness(g, weight=weight, norm=False)
        out[vertex_of[lo:hi]] = vb.a * scale[lo:hi]
    return out
