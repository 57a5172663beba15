"""Per-document scoring time: grace_core (closeness/novelty compiled with numba, betweenness by graph-tool) vs a plain networkx implementation of the
same computation, in the same run, on synthetic documents of ≈200 claims and 13 sources.

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.bench_scoring --docs 200

Targets (issue 17): ≤ 1.5 ms per document on one thread for indexing + closeness +
betweenness + novelty + status + priority (3.1 ms with graph-tool, 42× networkx, when networkx
took 130 ms per document; compare ratios, the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("POLARS_MAX_THREADS", "1")  # one thread: the target is per document on one thread

import polars as pl  # noqa: E402

from benchmarks.nx_reference import nx_score  # noqa: E402
from benchmarks.synthetic import synthetic_edges  # noqa: E402
from grace_core.edges import validate_edges  # noqa: E402
from grace_core.params import ScoringParams  # noqa: E402
from grace_core.scoring import score_edges  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=200, help="documents scored by grace_core")
    ap.add_argument("--nx-docs", type=int, default=20, help="documents scored by networkx (slower)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    params = ScoringParams()
    edges = validate_edges(synthetic_edges(args.docs, seed=args.seed))
    score_edges(edges.head(2000), params)  # warm-up (imports, allocation)
    t0, c0 = time.perf_counter(), time.process_time()
    scores = score_edges(edges, params)
    gt_ms, gt_cpu = ((time.perf_counter() - t0) * 1000 / args.docs, (time.process_time() - c0) * 1000 / args.docs)

    nx_rows = edges.filter(pl.col("doc_id").is_in(edges["doc_id"].unique().sort().head(args.nx_docs).implode())).to_dicts()
    w = {"anchor": params.w_anchor, "agree": params.w_agree, "neutral": params.w_neutral, "contra": params.w_contra}
    t0, c0 = time.perf_counter(), time.process_time()
    nx_score(nx_rows, w)
    nx_ms, nx_cpu = ((time.perf_counter() - t0) * 1000 / args.nx_docs, (time.process_time() - c0) * 1000 / args.nx_docs)

    claims = scores.height / args.docs
    print(f"documents: {args.docs} (networkx: {args.nx_docs}), ≈{claims:.0f} claims and 13 sources each, "
          f"{edges.height / args.docs:.0f} judgement rows per document, POLARS_MAX_THREADS={os.environ['POLARS_MAX_THREADS']}")
    print("                         wall ms/document   CPU ms/document (CPU time: fairer on a shared machine)")
    print(f"grace_core:              {gt_ms:8.2f}           {gt_cpu:8.2f}   (whole table: validate-free score_edges incl. indexing)")
    print(f"networkx reference:      {nx_ms:8.2f}           {nx_cpu:8.2f}")
    print(f"speed-up:                {nx_ms / gt_ms:8.1f}×          {nx_cpu / gt_cpu:8.1f}×   (target: ≤ 1.5 ms/document on one thread)")


if __name__ == "__main__":
    main()
