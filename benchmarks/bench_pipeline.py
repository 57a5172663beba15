"""Wall time and peak memory of one expansion round per stage over N QASPER dev papers with the
offline backend, and Prefect's share of the wall time.

    .venv/bin/python -m benchmarks.bench_pipeline --papers 20 100

Each stage flow (ingest, verdicts, build, score, dispatch) runs on a temporary Prefect server
(PREFECT_HOME in a temp folder); its wall time is compared with the time GRACE's own code spent
in it (the stage rows each task commits to the ``rounds`` table, merged where tasks overlapped).
Prefect's share = 1 − own time / wall time. Target (issue 5): ≤ 15 %.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from benchmarks.shared_data import QASPER_DEV, require_data

os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="grace-bench-prefect-")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

DATA = QASPER_DEV


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of time intervals (overlapping parallel tasks count once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(n_papers: int, workdir: Path) -> list[dict]:
    import polars as pl

    from flows.build import build_graphs
    from flows.ingest import ingest_batch
    from flows.params import IngestParams, RoundParams, StageParams
    from flows.review import dispatch_reviews, ingest_verdicts
    from flows.score import score_round
    from storage.lake import Lake

    batch = workdir / f"qasper_{n_papers}.jsonl"
    with open(DATA) as src, open(batch, "w") as out:
        for i, line in zip(range(n_papers), src):
            out.write(line)
    lake_dir = str(workdir / f"lake_{n_papers}")
    common = dict(lake=lake_dir, prior_sections=["Abstract", "Introduction"], hallucination_rate=0.2)
    rows = []
    t = time.perf_counter()
    ingest_batch(IngestParams(batch=str(batch), **common))
    rows.append({"stage": "ingest", "wall_s": time.perf_counter() - t, "own_s": None, "peak_mb": peak_mb()})
    for rnd in (1, 2):
        stage = StageParams(round_id=rnd, **common)
        steps = ([("verdicts", ingest_verdicts, "verdicts")] if rnd > 1 else []) + [
            ("build", build_graphs, "build"), ("score", score_round, "score"), ("dispatch", dispatch_reviews, "dispatch|verify")]
        for name, flow_fn, stages in steps:
            t = time.perf_counter()
            flow_fn(stage)
            wall = time.perf_counter() - t
            lake = Lake.open(RoundParams(**common).settings())
            spans = lake.read("rounds", rounds=[rnd]).filter(pl.col("stage").str.contains(f"^({stages})$"))
            own = busy_seconds([(a.timestamp(), b.timestamp()) for a, b in spans.select("started_at", "finished_at").iter_rows()])
            rows.append({"stage": f"round {rnd} {name}", "wall_s": wall, "own_s": own, "peak_mb": peak_mb()})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--papers", type=int, nargs="+", default=[20, 100])
    args = ap.parse_args()
    require_data(DATA)
    for n in args.papers:
        with tempfile.TemporaryDirectory() as tmp:
            rows = run(n, Path(tmp))
        print(f"\n{n} QASPER dev papers, offline backend (ingest + two rounds):")
        print(f"{'stage':<20}{'wall s':>9}{'own s':>9}{'Prefect %':>11}{'peak MB':>9}")
        walls = owns = 0.0
        for r in rows:
            share = "" if r["own_s"] is None else f"{100 * (1 - r['own_s'] / r['wall_s']):.1f}"
            print(f"{r['stage']:<20}{r['wall_s']:9.2f}{(r['own_s'] or 0):9.2f}{share:>11}{r['peak_mb']:9.0f}")
            if r["own_s"] is not None:
                walls += r["wall_s"]
                owns += r["own_s"]
        print(f"{'rounds total':<20}{walls:9.2f}{owns:9.2f}{100 * (1 - owns / walls):11.1f}   (target ≤ 15 %)")


if __name__ == "__main__":
    main()
