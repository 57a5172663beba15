"""A straightforward networkx implementation of GRACE scoring (DESIGN §1–§4): the test oracle
and the benchmark's reference. Plain Python on purpose; it shares no code with grace_core."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

import networkx as nx


def nx_score(rows: list[dict], w: dict[str, float], delta_refute=0.5, lambda_c=0.5, lambda_n=0.5, k=10.0, delta=0.5,
             rejected: set[tuple[str, str]] = frozenset()) -> dict[tuple[str, str], dict]:
    """Score edge rows (dicts with doc_id, source_id, source_kind, claim_id, label)."""
    by_doc: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_doc[r["doc_id"]].append(r)
    out = {}
    for doc, drows in by_doc.items():
        out.update(_score_doc(doc, drows, w, delta_refute, lambda_c, lambda_n, k, delta, rejected))
    return out


def _minmax(vals: dict, keys) -> dict:
    xs = [vals[c] for c in keys]
    if not xs:
        return {}
    lo, hi = min(xs), max(xs)
    return {c: (vals[c] - lo) / (hi - lo) if hi > lo else 0.5 for c in keys}


def _score_doc(doc, rows, w, delta_refute, lambda_c, lambda_n, k, delta, rejected):
    priors_kinds = {"prior", "verified"}
    kind = {}
    claims = set()
    in_p, contra, disputed = set(), set(), set()
    for r in rows:
        kind[r["source_id"]] = r["source_kind"]
        claims.add(r["claim_id"])
        if r["source_kind"] in priors_kinds:
            (in_p if r["label"] == "entails" else contra).add(r["claim_id"])
        elif r["label"] == "contradicts":
            disputed.add(r["claim_id"])
    rej = {c for (d, c) in rejected if d == doc}
    G = nx.Graph()
    G.add_nodes_from(("s", s) for s in kind)
    G.add_nodes_from(("c", c) for c in claims)
    for r in rows:
        if r["label"] != "entails":
            continue
        c, s = r["claim_id"], r["source_id"]
        if r["source_kind"] in priors_kinds:
            t = "anchor"
        elif c in rej or (c in contra and c not in in_p):
            t = "contra"
        elif c in in_p:
            t = "agree"
        else:
            t = "neutral"
        G.add_edge(("s", s), ("c", c), cost=1.0 / w[t])
    cc_all = nx.closeness_centrality(G, distance="cost", wf_improved=True)
    cc = {c: cc_all[("c", c)] for c in claims}
    med = statistics.median(cc.values())
    status = {}
    for c in claims:
        if c in rej or (c in contra and c not in in_p) or (c not in in_p and c in disputed and cc[c] < delta_refute * med * (1 - 1e-9)):
            status[c] = "refuted"
        elif c in in_p and c not in contra:
            status[c] = "grounded"
        else:
            status[c] = "boundary"
    boundary = [c for c in claims if status[c] == "boundary"]
    sub = G.subgraph([("s", s) for s, kd in kind.items() if kd == "response"] + [("c", c) for c in boundary])
    bt_all = nx.betweenness_centrality(sub, weight="cost", normalized=True)
    bt = {c: bt_all[("c", c)] for c in boundary}
    prior_nodes = [("s", s) for s, kd in kind.items() if kd in priors_kinds]
    dist = nx.multi_source_dijkstra_path_length(G, prior_nodes, weight="cost") if prior_nodes else {}
    finite = [dist[("c", c)] for c in claims if ("c", c) in dist]
    fill = max(finite) + 1.0 if finite else 1.0
    nov = {c: dist.get(("c", c), fill) for c in claims}
    ccn = _minmax(cc, claims)
    novn = _minmax(nov, boundary)
    bmax = max(bt.values(), default=0.0)
    out = {}
    for c in claims:
        b = status[c] == "boundary"
        bn = (bt[c] / bmax if bmax > 0 else 0.0) if b else None
        out[(doc, c)] = {
            "closeness": cc[c], "closeness_norm": ccn[c], "status": status[c],
            "betweenness": bt[c] if b else None, "betweenness_norm": bn,
            "novelty": nov[c], "novelty_norm": novn[c] if b else None,
            "priority": lambda_c * bn + lambda_n * novn[c] if b else None,
            "confidence": 1.0 / (1.0 + math.exp(-k * (ccn[c] - delta))),
        }
    return out
