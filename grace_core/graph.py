"""Claim graphs (DESIGN §1): the vertices, typed edges and claim facts of many documents,
built from an edge table by one compiled pass, documents kept apart by offsets. Never one
graph for many documents: exact closeness grows with N².

Ids are text in the tables and integers here: every document id and every node id is
replaced by its rank in the sorted distinct values, so a document's vertices can be ordered
by id, and looked up, with integer arrays. Why numba (already needed by
:mod:`grace_core.centrality`): the per-document work (distinct ids, a sort of a few hundred
integers, one pass over the rows) costs microseconds compiled, and was most of a scoring's
time as joins, group-bys and sorts of the whole table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from numba import njit

from grace_core.edges import EDGE_TYPES, LABELS, PRIOR_KINDS, SOURCE_KINDS
from grace_core.params import ScoringParams

CLAIM = len(SOURCE_KINDS)  # the kind code of a claim vertex; sources are coded by SOURCE_KINDS
PRIOR_KIND_CODES = len(PRIOR_KINDS)  # kind codes below this are priors (SOURCE_KINDS starts with PRIOR_KINDS)
ANCHOR, AGREE, NEUTRAL, CONTRA = range(len(EDGE_TYPES))
ENTAILS = LABELS.index("entails")


@dataclass(frozen=True)
class ClaimGraphs:
    """Vertices and edges of many documents in document order.

    Document ``d`` has the vertices ``node_offsets[d]:node_offsets[d+1]`` (its sources, then its
    claims, each in id order) and the edges ``edge_offsets[d]:edge_offsets[d+1]``, whose ``src``
    and ``dst`` are vertex indices within the document, in ``(src, dst)`` order. Per vertex:
    ``kind`` (a :data:`~grace_core.edges.SOURCE_KINDS` index, or :data:`CLAIM`), ``node`` (its
    id's index in ``node_ids``) and the claim facts of :func:`build_graphs` (false on sources).
    Per edge: ``edge_type`` (an :data:`~grace_core.edges.EDGE_TYPES` index) and ``cost``.
    """

    doc_ids: pl.Series
    node_ids: pl.Series
    node_offsets: np.ndarray
    edge_offsets: np.ndarray
    kind: np.ndarray
    node: np.ndarray
    in_prior: np.ndarray
    contradicted: np.ndarray
    response_contradicted: np.ndarray
    rejected: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    edge_type: np.ndarray
    cost: np.ndarray

    @property
    def doc(self) -> np.ndarray:
        """The document index of every vertex."""
        return np.repeat(np.arange(len(self.doc_ids)), np.diff(self.node_offsets))


def build_graphs(
    edges: pl.DataFrame,
    params: ScoringParams,
    *,
    rejected: pl.DataFrame | None = None,
    claims: pl.DataFrame | None = None,
    sources: pl.DataFrame | None = None,
) -> ClaimGraphs:
    """The claim graph of every document of a validated edge table
    (:func:`grace_core.edges.validate_edges`).

    Vertices: every source and claim of ``edges``, plus ``claims`` (``doc_id, claim_id``) and
    ``sources`` (``doc_id, source_id, source_kind``) that have no judgement rows. A source's kind
    is that of its first row. ``rejected`` (``doc_id, claim_id``) lists claims reviewers
    rejected; ids it names that are not claims of their document are ignored.

    Claim facts, from all rows (the status rule needs them, DESIGN §3):

    - ``in_prior``: some prior (document passage or verified claim) entails the claim (c ∈ C_P);
    - ``contradicted``: some prior contradicts it;
    - ``response_contradicted``: some sampled response contradicts it;
    - ``rejected``: reviewers rejected it.

    Edges: one per (source, claim) pair with an ``entails`` row (the first such row), typed by
    the first rule that holds (DESIGN §1): a prior source → ``anchor``; a response to a claim
    that reviewers rejected, or that a prior contradicts and none entails → ``contra``; a
    response to a claim some prior entails → ``agree``; otherwise ``neutral``. Its traversal
    cost is ``1 / weight`` of its type. The result does not depend on the order of the rows,
    except for a source listed with two kinds.
    """
    extra_sources = sources if sources is not None else pl.DataFrame(schema={"doc_id": pl.Utf8, "source_id": pl.Utf8, "source_kind": pl.Utf8})
    extra_claims = claims if claims is not None else pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8})
    rejects = rejected if rejected is not None else pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8})
    tables = (edges, extra_sources, extra_claims, rejects)
    docs, doc_ids = _ranks([t["doc_id"] for t in tables])
    nodes, node_ids = _ranks([edges["source_id"], edges["claim_id"], extra_sources["source_id"], extra_claims["claim_id"], rejects["claim_id"]])
    kind = [t["source_kind"].cast(pl.Utf8).cast(pl.Enum(SOURCE_KINDS)).to_physical().to_numpy().astype(np.int8) for t in (edges, extra_sources)]
    label = edges["label"].cast(pl.Enum(LABELS)).to_physical().to_numpy().astype(np.int8)
    weight = np.array([params.w_anchor, params.w_agree, params.w_neutral, params.w_contra])
    built = _build(len(doc_ids), len(node_ids), docs[0], nodes[0], nodes[1], kind[0], label,
                   docs[1], nodes[2], kind[1], docs[2], nodes[3], docs[3], nodes[4], weight)
    return ClaimGraphs(doc_ids, node_ids, *built)


def _ranks(columns: list[pl.Series]) -> tuple[list[np.ndarray], pl.Series]:
    """Each value's index in the sorted distinct values of all ``columns`` (one scale for all),
    per column, and those sorted values. Distinct values are found by hashing (a categorical
    cast), so only they are sorted, not every row."""
    values = pl.concat([c.cast(pl.Utf8) for c in columns])
    if values.len() == 0:
        return [np.zeros(0, np.int64) for _ in columns], values
    codes = values.cast(pl.Categorical).to_physical().to_numpy()
    first = _first_rows(codes, int(codes.max()) + 1)
    used = np.flatnonzero(first >= 0)
    distinct = values.gather(first[used])
    order = distinct.arg_sort().to_numpy()
    rank = np.empty(len(first), np.int64)
    rank[used[order]] = np.arange(len(used))
    ranked = rank[codes]
    bounds = np.cumsum([0] + [c.len() for c in columns])
    return [ranked[a:b] for a, b in zip(bounds[:-1], bounds[1:])], distinct.gather(order)


@njit(cache=True, nogil=True)
def _first_rows(codes, n):
    """The first row of each code in ``0..n-1`` (-1 for a code no row has)."""
    first = np.full(n, -1, np.int64)
    for i in range(len(codes) - 1, -1, -1):
        first[codes[i]] = i
    return first


@njit(cache=True, nogil=True)
def _by_doc(doc, n_docs):
    """Rows grouped by document, in row order within a document (a counting sort): offsets
    (``n_docs + 1``) and row numbers."""
    offsets = np.zeros(n_docs + 1, np.int64)
    for d in doc:
        offsets[d + 1] += 1
    for d in range(n_docs):
        offsets[d + 1] += offsets[d]
    fill = offsets[:-1].copy()
    rows = np.empty(len(doc), np.int64)
    for i in range(len(doc)):
        rows[fill[doc[i]]] = i
        fill[doc[i]] += 1
    return offsets, rows


@njit(cache=True, nogil=True)
def _distinct(lo, hi, rows, ids, kinds, at, seen, seen_kind, n):
    """Note the ids of ``rows[lo:hi]`` not yet seen in the document: ``at[id]`` is set, the id and
    its row's kind go to position ``n`` of ``seen`` and ``seen_kind``; returns the new count."""
    for i in range(lo, hi):
        r = rows[i]
        if at[ids[r]] < 0:
            at[ids[r]] = n
            seen[n] = ids[r]
            seen_kind[n] = kinds[r]
            n += 1
    return n


@njit(cache=True, nogil=True)
def _number(seen, seen_kind, n, at, node, kind, v0, first):
    """Number the ``n`` ids seen in id order from vertex ``first`` of the document starting at
    ``v0``: their ``node`` and ``kind``, and ``at[id]``, the vertex within the document."""
    order = np.argsort(seen[:n])
    for j in range(n):
        node[v0 + first + j] = seen[order[j]]
        kind[v0 + first + j] = seen_kind[order[j]]
        at[node[v0 + first + j]] = first + j


@njit(cache=True, nogil=True)
def _build(n_docs, n_nodes, e_doc, e_src, e_dst, e_kind, e_label, s_doc, s_node, s_kind, c_doc, c_node, r_doc, r_node, weight):
    eo, er = _by_doc(e_doc, n_docs)
    so, sr = _by_doc(s_doc, n_docs)
    co, cr = _by_doc(c_doc, n_docs)
    ro, rr = _by_doc(r_doc, n_docs)
    width = 1
    for d in range(n_docs):
        width = max(width, 2 * (eo[d + 1] - eo[d]) + so[d + 1] - so[d] + co[d + 1] - co[d])
    cap = 2 * len(e_doc) + len(s_doc) + len(c_doc)
    node_offsets = np.zeros(n_docs + 1, np.int64)
    edge_offsets = np.zeros(n_docs + 1, np.int64)
    kind = np.empty(cap, np.int8)
    node = np.empty(cap, np.int64)
    in_prior = np.zeros(cap, np.bool_)
    contradicted = np.zeros(cap, np.bool_)
    disputed = np.zeros(cap, np.bool_)
    rejected = np.zeros(cap, np.bool_)
    src = np.empty(len(e_doc), np.int64)
    dst = np.empty(len(e_doc), np.int64)
    etype = np.empty(len(e_doc), np.int8)
    cost = np.empty(len(e_doc))
    source_at = np.full(n_nodes, -1, np.int64)  # a node's source vertex in the current document
    claim_at = np.full(n_nodes, -1, np.int64)  # a node's claim vertex in the current document
    seen = np.empty(width, np.int64)
    seen_kind = np.empty(width, np.int8)
    claim_kind = np.full(max(len(e_doc), len(c_doc)), CLAIM, np.int8)  # the kind of every claim row
    pair = np.empty(width, np.int64)
    pair_row = np.empty(width, np.int64)
    v0 = 0
    m = 0
    for d in range(n_docs):
        ns = _distinct(eo[d], eo[d + 1], er, e_src, e_kind, source_at, seen, seen_kind, 0)  # sources, with their first kind
        ns = _distinct(so[d], so[d + 1], sr, s_node, s_kind, source_at, seen, seen_kind, ns)
        _number(seen, seen_kind, ns, source_at, node, kind, v0, 0)
        nc = _distinct(eo[d], eo[d + 1], er, e_dst, claim_kind, claim_at, seen, seen_kind, 0)  # claims
        nc = _distinct(co[d], co[d + 1], cr, c_node, claim_kind, claim_at, seen, seen_kind, nc)
        _number(seen, seen_kind, nc, claim_at, node, kind, v0, ns)
        for i in range(eo[d], eo[d + 1]):  # claim facts
            r = er[i]
            v = v0 + claim_at[e_dst[r]]
            prior = e_kind[r] < PRIOR_KIND_CODES
            if e_label[r] == ENTAILS:
                in_prior[v] |= prior
            elif prior:
                contradicted[v] = True
            else:
                disputed[v] = True
        for i in range(ro[d], ro[d + 1]):
            c = claim_at[r_node[rr[i]]]
            if c >= 0:
                rejected[v0 + c] = True
        k = 0  # edges: the first entails row of each (source, claim) pair
        for i in range(eo[d], eo[d + 1]):
            r = er[i]
            if e_label[r] == ENTAILS:
                pair[k] = source_at[e_src[r]] * (nc + ns) + claim_at[e_dst[r]]
                pair_row[k] = r
                k += 1
        order = np.argsort(pair[:k], kind="mergesort")
        last = -1
        for j in range(k):
            if pair[order[j]] == last:
                continue
            last = pair[order[j]]
            r = pair_row[order[j]]
            c = claim_at[e_dst[r]]
            v = v0 + c
            if e_kind[r] < PRIOR_KIND_CODES:
                t = ANCHOR
            elif rejected[v] or (contradicted[v] and not in_prior[v]):
                t = CONTRA
            elif in_prior[v]:
                t = AGREE
            else:
                t = NEUTRAL
            src[m] = source_at[e_src[r]]
            dst[m] = c
            etype[m] = t
            cost[m] = 1.0 / weight[t]
            m += 1
        for j in range(v0, v0 + ns):
            source_at[node[j]] = -1
        for j in range(v0 + ns, v0 + ns + nc):
            claim_at[node[j]] = -1
        v0 += ns + nc
        node_offsets[d + 1] = v0
        edge_offsets[d + 1] = m
    return (node_offsets, edge_offsets, kind[:v0], node[:v0], in_prior[:v0], contradicted[:v0], disputed[:v0], rejected[:v0],
            src[:m], dst[:m], etype[:m], cost[:m])
