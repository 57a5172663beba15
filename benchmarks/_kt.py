import os, time
os.environ.setdefault("OMP_NUM_THREADS", "1"); os.environ.setdefault("POLARS_MAX_THREADS", "1")
import numpy as np, polars as pl
from benchmarks.synthetic import synthetic_edges
from grace_core.edges import validate_edges, claim_flags, type_edges, SOURCE_KINDS, LABELS
from grace_core.graph import index_documents
from grace_core.params import ScoringParams
from grace_core.scoring import score_edges
from grace_core.centrality import closeness_and_novelty, subgraph_betweenness
p = ScoringParams()
E = validate_edges(synthetic_edges(1000, seed=0))
score_edges(E.head(2000), p)
T = {}
def tick(name, t0):
    T[name] = T.get(name, 0) + time.perf_counter() - t0
    return time.perf_counter()
for _ in range(5):
    t = time.perf_counter()
    ids = [pl.col(c).cast(pl.Categorical) for c in ("doc_id", "source_id", "claim_id")]
    kinds = [pl.col("source_kind").cast(pl.Enum(SOURCE_KINDS)), pl.col("label").cast(pl.Enum(LABELS))]
    edges = E.with_columns(*ids, *kinds); t = tick("cast", t)
    flags = claim_flags(edges, None, None); t = tick("flags", t)
    typed = type_edges(edges, flags, p); t = tick("type", t)
    src_keys = edges.select("doc_id", "source_id", pl.col("source_kind").cast(pl.Utf8))
    idx = index_documents(src_keys, flags, typed); t = tick("index", t)
    t0 = time.perf_counter(); score_edges(E, p); T["total"] = T.get("total", 0) + time.perf_counter() - t0
print({k: round(v / 5, 3) for k, v in T.items()}, pl.__version__, E.schema)
import grace_core.graph as g
src = open(g.__file__).read()
body = src[src.index("def index_documents"):]
lines = body.splitlines()
# instrument: time statements in index_documents body
import re
from grace_core.graph import pair_key, IndexedTables
def run(sources, claims, typed_edges):
    R = {}
    t = time.perf_counter()
    src_nodes = sources.select("doc_id", pl.col("source_id").alias("node_id"), pl.col("source_kind").alias("kind"))
    claim_nodes = claims.rename({"claim_id": "node_id"}).with_columns(kind=pl.lit("claim"))
    nodes = pl.concat([src_nodes.with_columns(_key=pair_key("doc_id", "node_id")).unique("_key", keep="first"),
                       claim_nodes.with_columns(_key=pair_key("doc_id", "node_id")).unique("_key", keep="first")], how="diagonal")
    R["nodes"] = time.perf_counter() - t; t = time.perf_counter()
    docs = nodes.select("doc_id").unique().sort(pl.col("doc_id").cast(pl.Utf8)).with_row_index("doc")
    R["docs"] = time.perf_counter() - t; t = time.perf_counter()
    nodes = (nodes.join(docs, on="doc_id").with_columns(_is_claim=pl.col("kind") == "claim")
        .sort(["doc", "_is_claim", pl.col("node_id").cast(pl.Utf8)]).drop("_is_claim"))
    R["sortnodes"] = time.perf_counter() - t; t = time.perf_counter()
    doc_ids = docs["doc_id"].cast(pl.Utf8).to_list()
    node_counts = np.bincount(nodes["doc"].to_numpy(), minlength=len(doc_ids))
    node_offsets = np.concatenate([[0], np.cumsum(node_counts)])
    nodes = nodes.with_columns(vertex=pl.Series(np.arange(nodes.height) - np.repeat(node_offsets[:-1], node_counts), dtype=pl.Int64))
    keys = nodes.select("_key", "doc", "vertex")
    R["vertex"] = time.perf_counter() - t; t = time.perf_counter()
    joined = (typed_edges.select(_src=pair_key("doc_id", "source_id"), _dst=pair_key("doc_id", "claim_id"), cost=1.0 / pl.col("weight"))
        .join(keys.rename({"_key": "_src", "vertex": "src"}), on="_src")
        .join(keys.select(pl.col("_key").alias("_dst"), pl.col("vertex").alias("dst")), on="_dst"))
    R["join"] = time.perf_counter() - t; t = time.perf_counter()
    doc, src, dst = (joined[c].to_numpy().astype(np.int64) for c in ("doc", "src", "dst"))
    width = int(node_counts.max()) + 1
    pair = (doc * width + src) * width + dst
    order = np.argsort(pair, kind="stable")
    pair = pair[order]
    first = np.ones(len(pair), bool); first[1:] = pair[1:] != pair[:-1]
    keep = order[first]
    R["dedupe"] = time.perf_counter() - t; t = time.perf_counter()
    edges = pl.DataFrame({"doc": doc[keep], "src": src[keep], "dst": dst[keep], "cost": joined["cost"].to_numpy()[keep]})
    R["frame"] = time.perf_counter() - t
    return R, nodes, typed_edges
for _ in range(3):
    R, nodes, te = run(src_keys, flags, typed)
print({k: round(v, 3) for k, v in R.items()}, nodes.height, te.height, te.schema, src_keys.height)
