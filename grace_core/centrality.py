"""Weighted centralities on one document's claim graph (DESIGN §2, §4), with graph-tool.

Every function takes an undirected graph-tool graph and its edge ``cost`` property
(``cost = 1 / weight``) and returns a NumPy array indexed by vertex.
"""

from __future__ import annotations

import numpy as np
from graph_tool import Graph, GraphView
from graph_tool.centrality import betweenness, closeness
from graph_tool.topology import label_components, shortest_distance


def wf_closeness(g: Graph, cost) -> np.ndarray:
    r"""Weighted Wasserman–Faust closeness of every vertex.

    .. math::

        CC(v) = \frac{n_v - 1}{N - 1} \cdot \frac{n_v - 1}{\sum_{u \in V_v} d_W(v, u)}

    where ``N`` is the number of vertices of the graph, ``V_v`` the connected component of
    ``v``, ``n_v = |V_v|`` and ``d_W`` the Dijkstra distance with edge cost ``1/w``.

    Normalisation: the first factor scales a component's closeness by the share of the graph
    it reaches, so a vertex of a small component scores less than one of the same shape in a
    large component; values lie in ``[0, max_w]``.

    Disconnected graphs: distances are summed within ``V_v`` only; an isolated vertex
    (``n_v = 1``) and every vertex of a one-vertex graph get ``CC = 0``.

    Equals ``networkx.closeness_centrality(G, distance="cost", wf_improved=True)``.

    References
    ----------
    S. Wasserman and K. Faust, *Social Network Analysis: Methods and Applications*,
    Cambridge University Press, 1994, ch. 5.3.
    """
    n = g.num_vertices()
    if n <= 1:
        return np.zeros(n)
    inv_sum = closeness(g, weight=cost, norm=False).a.copy()  # 1 / Σ d within the component
    comp, _ = label_components(g)
    sizes = np.bincount(comp.a)
    n_v = sizes[comp.a].astype(float)
    alone = n_v <= 1
    inv_sum[alone] = 0.0  # graph-tool reports inf for isolated vertices
    cc = inv_sum * (n_v - 1.0) ** 2 / (n - 1.0)
    return cc


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


def novelty(g: Graph, cost, priors: np.ndarray, claims: np.ndarray) -> np.ndarray:
    r"""Distance of every claim vertex to its nearest prior (multi-source Dijkstra).

    .. math::

        Nov(c) = \min_{p \in P} d_W(c, p)

    computed with one Dijkstra run from a virtual source joined to every prior at cost 0.

    Disconnected graphs: a claim with no path to any prior gets the largest finite novelty of
    the document's claims plus 1 (1 when none is finite, e.g. a document without priors).
    Returns values for the vertices in ``claims`` (a boolean mask), in vertex order.

    The graph is modified (a virtual vertex and its edges are added): call it last.
    """
    n = g.num_vertices()
    priors = np.flatnonzero(np.asarray(priors, dtype=bool))
    dist = np.full(n, np.inf)
    if len(priors):
        virt = int(g.add_vertex())
        g.add_edge_list(np.column_stack([np.full(len(priors), virt), priors, np.zeros(len(priors))]), eprops=[cost])
        dist = shortest_distance(g, source=g.vertex(virt), weights=cost).a[:n].copy()
    dist = dist[np.asarray(claims, dtype=bool)]
    finite = np.isfinite(dist)
    fill = (dist[finite].max() + 1.0) if finite.any() else 1.0
    dist[~finite] = fill
    return dist
