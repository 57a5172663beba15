"""Whole-process ``grace score`` (start-up, reading, scoring, writing) against a plain networkx
implementation of the same computation, and the command's peak memory.

    .venv/bin/python -m benchmarks.bench_score_cli --docs 1000
    .venv/bin/python -m benchmarks.bench_score_cli --docs 10000 --nx-docs 0     # memory at scale

Synthetic documents (≈200 claims, 13 sources, 1–8 sources per claim) are written to one
Parquet edge table; ``grace score`` runs on it as a separate process (after one warm-up run
that leaves Python's bytecode and numba's compiled-code caches behind, as any second run of
an installed command finds them), best of ``--runs``. Peak memory is the child's own ``VmHWM``.
networkx's time per document is measured in this process on ``--nx-docs`` documents and
multiplied by ``--docs`` (its start-up is left out, in its favour).

Targets (issue 17): ≥ 40× networkx at 1,000 documents; peak RSS ≤ 1.5 GB whatever the size.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.nx_reference import nx_score
from benchmarks.synthetic import synthetic_edges

REPO = Path(__file__).resolve().parents[1]
PEAK = ("import atexit, sys\n"
        "peak = lambda: next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:'))\n"
        "rss = sys.argv.pop(1)\n"
        "atexit.register(lambda: open(rss, 'w').write(peak()))\n"
        "from flows.cli import main\nmain()\n")


def write_edges(path: Path, n_docs: int, seed: int) -> int:
    """Write ``n_docs`` synthetic documents to one Parquet file, 1,000 at a time; returns the rows."""
    import polars as pl

    parts, rows = [], 0
    for start in range(0, n_docs, 1000):
        part = synthetic_edges(min(1000, n_docs - start), seed=seed + start).with_columns(
            doc_id=pl.format("doc{}-", pl.lit(start)) + pl.col("doc_id"))
        rows += part.height
        parts.append(part)
    pl.concat(parts).write_parquet(path)
    return rows


def run_score(edges: Path, out: Path, workdir: Path) -> tuple[float, int, str, float]:
    """One ``grace score`` process: wall seconds, peak KiB, its stdout, CPU seconds (user + system)."""
    rss = workdir / "vmhwm"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", PEAK, str(rss), "score", str(edges), str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(proc.stderr)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, int(rss.read_text()), proc.stdout.strip(), cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--nx-docs", type=int, default=20, help="documents scored by networkx to measure its time per document")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="grace-bench-score-") as tmp:
        work = Path(tmp)
        edges = work / "edges.parquet"
        rows = write_edges(edges, args.docs, args.seed)
        run_score(edges, work / "warm.parquet", work)
        runs = [run_score(edges, work / "scores.parquet", work) for _ in range(args.runs)]
        wall = min(r[0] for r in runs)
        peak_mb = max(r[1] for r in runs) / 1024
        print(f"documents: {args.docs:,} ({rows:,} edge rows, {edges.stat().st_size / 1e6:.0f} MB Parquet)")
        print(f"grace score:      {wall:8.2f} s whole process (best of {args.runs}: "
              f"{', '.join(f'{r[0]:.2f}' for r in runs)}), {1000 * wall / args.docs:.2f} ms/document, peak RSS {peak_mb:,.0f} MB")
        cpu = min(r[3] for r in runs)
        print(f"                  {cpu:8.2f} s CPU (user + system, best run; polars may use 2 threads)")
        print(f"                  {runs[0][2]}")
        if args.nx_docs:
            import polars as pl

            from grace_core.params import ScoringParams

            p = ScoringParams()
            sample = pl.read_parquet(edges)
            sample = sample.filter(pl.col("doc_id").is_in(sample["doc_id"].unique().sort().head(args.nx_docs).implode()))
            w = {"anchor": p.w_anchor, "agree": p.w_agree, "neutral": p.w_neutral, "contra": p.w_contra}
            t, c = time.perf_counter(), time.process_time()
            nx_score(sample.to_dicts(), w)
            nx_ms, nx_cpu = (time.perf_counter() - t) * 1000 / args.nx_docs, (time.process_time() - c) * 1000 / args.nx_docs
            nx_s, nx_cpu_s = nx_ms * args.docs / 1000, nx_cpu * args.docs / 1000
            print(f"networkx:         {nx_ms:8.2f} ms/document on {args.nx_docs} documents → {nx_s:.1f} s for {args.docs:,} "
                  f"({nx_cpu:.2f} ms CPU → {nx_cpu_s:.1f} s)")
            print(f"speed-up:         {nx_s / wall:8.1f}× wall, {nx_cpu_s / cpu:.1f}× CPU   (target ≥ 40× at 1,000 documents, start-up included)")


if __name__ == "__main__":
    main()
