"""Nightly rounds at scale: a synthetic lake of N documents written straight into the lake's tables
(no models), then whole expansion rounds through the real ``expansion_round`` flow, as the
nightly deployment runs them, with wall time, peak memory, each stage's own time and Prefect's
share.

    .venv/bin/python -m benchmarks.bench_scale --docs 1000 10000

Each document has ≈200 claims decomposed from 8 sampled responses and 5 prior sections (the
edges of benchmarks/synthetic.py), claim and source texts drawn from a pool of a few thousand
sentences (so the offline embedder that prices reviews stays off the critical path; model
throughput is measured elsewhere), and 1% of the documents carry a reviewer's vote from round 0
(confirm or reject) that the score stage settles, promotes and cascades.

Each round runs in a fresh process (its peak memory is its own ``VmHWM``) against one Prefect
server started for the benchmark and kept running, as a nightly deployment's server is (so no
round pays for starting one). A stage's own time is the span of the ``rounds`` rows its tasks
commit (overlapping parallel tasks counted once); Prefect's share is 1 − the stages' own time /
the round's wall time (what is left: flow and task runs, their API calls, the process's
imports, reading which documents to build). ``CPU s`` is the CPU time of the round's process
(every thread; the Prefect server runs apart): on this 2-core machine a round cannot take less
than about half of it.

Round 1 is full: every document is settled and scored, then the dispatch. Then round 2,
incremental: 1% of the documents get a reviewer's vote on a claim (as returned verdict files
would add), and round 2 settles and rescores those documents only (grace_core/changes.py) and
dispatches from every document's latest scores. Then the weekly maintenance (the
``lake-maintenance`` deployment's ``maintain_lake`` flow: compaction, then vacuum), and round 3,
incremental as round 2, on the compacted lake, as a nightly round sees it after a maintenance
(round 2 is the worst case: every file each commit of round 1 wrote). Issue 17's targets:
100,000 documents' full round ≤ 10 min, the incremental round ≤ 30 s, peak RSS ≤ 3 GB whatever N.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl

from benchmarks.synthetic import synthetic_edges

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
WORDS = ("model", "attention", "dataset", "encoder", "baseline", "accuracy", "corpus", "layer", "token", "training",
         "question", "answer", "paper", "method", "result", "score", "graph", "claim", "source", "evidence")
RUN = r'''
import json, sys, time
t = time.perf_counter()
peak = lambda: int(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')))
lake, what = sys.argv[1], sys.argv[2]
if what == "maintain":
    from flows.maintenance import maintain_lake
    from flows.params import MaintenanceParams
    maintain_lake(MaintenanceParams(lake=lake))
else:
    from flows.expansion import expansion_round
    from flows.params import RoundParams
    expansion_round(RoundParams(round_id=int(what), lake=lake))
import resource
use = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": time.perf_counter() - t, "peak_kib": peak(), "cpu_s": use.ru_utime + use.ru_stime}))
'''
STAGES = {"build": "build", "score": "score", "dispatch": "dispatch|verify|recheck"}


def sentence_pool(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(WORDS[i] for i in rng.integers(len(WORDS), size=8)).capitalize() + f" {k}." for k in range(n)]


def write_lake(root: str, n_docs: int, seed: int = 0, per_commit: int = 1000) -> dict[str, int]:
    """Write ``n_docs`` synthetic documents (documents, sources, claims, edges, some votes) into
    the lake at ``root``, ``per_commit`` documents per commit; returns the rows per table."""
    from flows.settings import build_settings
    from storage.lake import Lake

    lake = Lake.open(build_settings(lake=root))
    pool = sentence_pool(4000, seed)
    rows = {"documents": 0, "sources": 0, "claims": 0, "edges": 0, "verdicts": 0}
    for start in range(0, n_docs, per_commit):
        n = min(per_commit, n_docs - start)
        edges = synthetic_edges(n, seed=seed + start).with_columns(doc_id=pl.format("d{}-", pl.lit(start)) + pl.col("doc_id"))
        docs = edges["doc_id"].unique().sort()
        rng = np.random.default_rng([seed, start])
        sources = edges.select("doc_id", "source_id", "source_kind").unique().sort("doc_id", "source_id")
        sources = sources.with_columns(
            round=pl.when(pl.col("source_kind") == "prior").then(0).otherwise(1).cast(pl.Int32),
            name=pl.col("source_id"), ord=pl.int_range(pl.len()).over("doc_id").cast(pl.Int32),
            text=pl.Series([pool[i] for i in rng.integers(len(pool), size=sources.height)]),
            claim_id=pl.lit(None, pl.Utf8), model=pl.lit(None, pl.Utf8), call_key=pl.lit(None, pl.Utf8), batch_id=pl.lit("synthetic"),
        )
        claim_keys = edges.select("doc_id", "claim_id").unique().sort("doc_id", "claim_id")
        first_source = edges.filter(pl.col("source_kind") == "response").group_by("doc_id", "claim_id").agg(pl.col("source_id").min())
        claims = claim_keys.join(first_source, on=["doc_id", "claim_id"], how="left").with_columns(
            round=pl.lit(1, pl.Int32), source_id=pl.col("source_id").fill_null("r0"), source_kind=pl.lit("response"),
            ord=pl.int_range(pl.len()).over("doc_id").cast(pl.Int32),
            text=pl.Series([pool[i] for i in rng.integers(len(pool), size=claim_keys.height)]), call_key=pl.lit(None, pl.Utf8),
        )
        voted = docs.sample(fraction=0.01, seed=seed + start) if n >= 100 else docs.head(1)
        votes = claim_keys.filter(pl.col("doc_id").is_in(voted.implode())).group_by("doc_id").agg(pl.col("claim_id").first()).with_columns(
            round=pl.lit(0, pl.Int32), reviewer=pl.lit("alice"),
            verdict=pl.Series(rng.choice(["confirm", "reject"], size=len(voted))), seconds_spent=pl.lit(40.0),
            note=pl.lit(None, pl.Utf8), channel=pl.lit("file"), created_at=pl.lit(T0),
        )
        documents = pl.DataFrame({"doc_id": docs}).with_columns(
            title=pl.col("doc_id"), content_hash=pl.col("doc_id"), batch_id=pl.lit("synthetic"),
            line=pl.int_range(pl.len()).cast(pl.Int32), source_format=pl.lit("text"), n_words=pl.lit(5000, pl.Int64),
            n_priors=pl.lit(5, pl.Int32), n_questions=pl.lit(0, pl.Int32),
        )
        tables = {"documents": documents, "sources": sources, "claims": claims,
                  "edges": edges.with_columns(round=pl.lit(1, pl.Int32), call_key=pl.lit(None, pl.Utf8)), "verdicts": votes}
        lake.commit(f"synthetic/{start}", tables)
        for k, v in tables.items():
            rows[k] += v.height
    return rows


def vote_on_changed(root: str, fraction: float, round_id: int = 2, seed: int = 1) -> int:
    """Votes of round ``round_id`` − 1 on one claim of ``fraction`` of the documents (confirm or
    reject), as a reviewer's returned file adds them before round ``round_id``; returns the
    number of documents changed."""
    from flows.settings import build_settings
    from storage.lake import Lake

    lake = Lake.open(build_settings(lake=root))
    claims = lake.query("SELECT doc_id, min(claim_id) AS claim_id FROM claims GROUP BY doc_id ORDER BY doc_id")
    changed = claims.sample(fraction=fraction, seed=seed)
    rng = np.random.default_rng(seed)
    lake.commit(f"synthetic/round-{round_id}-votes", {"verdicts": changed.with_columns(
        round=pl.lit(round_id - 1, pl.Int32), reviewer=pl.lit("bob"), verdict=pl.Series(rng.choice(["confirm", "reject"], size=changed.height)),
        seconds_spent=pl.lit(40.0), note=pl.lit(None, pl.Utf8), channel=pl.lit("file"), created_at=pl.lit(T0),
    )})
    return changed.height


def own_seconds(root: str, stage: str, round_id: int) -> float:
    from benchmarks.bench_pipeline import busy_seconds
    from flows.settings import build_settings
    from storage.lake import Lake

    spans = Lake.open(build_settings(lake=root)).read("rounds", rounds=[round_id]).filter(pl.col("stage").str.contains(f"^({stage})$"))
    return busy_seconds([(a.timestamp(), b.timestamp()) for a, b in spans.select("started_at", "finished_at").iter_rows()])


def run_flow(root: str, what: str, env: dict[str, str]) -> dict:
    """One ``expansion_round`` (``what``: the round id) or ``maintain_lake`` (``maintain``) in a
    fresh process (imports included in its wall time)."""
    proc = subprocess.run([sys.executable, "-c", RUN, root, what], cwd=REPO, env=env, capture_output=True, text=True)
    marker = proc.stdout.rfind('{"wall_s"')
    if proc.returncode or marker < 0:  # (another library's output may share the figures' line)
        raise SystemExit(f"{what} on {root}: exit status {proc.returncode}, no figures\n{proc.stdout[-1500:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout[marker:].splitlines()[0])


def main() -> None:
    from flows.prefect_server import prefect_api

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--changed", type=float, default=0.01, help="Share of the documents changed before the incremental round 2.")
    ap.add_argument("--root", help="Keep the lakes here, each written lake also as lake-N-fresh: a later run with the same "
                                   "--root copies it instead of writing it again.")
    args = ap.parse_args()
    if args.root:
        Path(args.root).mkdir(parents=True, exist_ok=True)
    with (contextlib.nullcontext(args.root) if args.root else tempfile.TemporaryDirectory(prefix="grace-bench-scale-")) as tmp:
        os.environ |= {"PREFECT_HOME": str(Path(tmp) / "prefect"), "PREFECT_LOGGING_LEVEL": "WARNING",
                       "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        with prefect_api() as (url, _):
            env = {**os.environ, "PREFECT_API_URL": url, "GRACE_BACKEND": "offline", "OMP_NUM_THREADS": "1"}
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            for n in args.docs:
                bench(str(Path(tmp) / f"lake-{n}"), n, args.changed, env)


def bench(root: str, n: int, changed: float, env: dict[str, str]) -> None:
    t, fresh = time.perf_counter(), Path(f"{root}-fresh")
    if fresh.is_dir():
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(fresh, root)
        print(f"\n{n:,} synthetic documents copied from {fresh}")
    else:
        shutil.rmtree(root, ignore_errors=True)
        rows = write_lake(root, n)
        print(f"\n{n:,} synthetic documents written in {time.perf_counter() - t:.1f} s: " + ", ".join(f"{k} {v:,}" for k, v in rows.items()))
        shutil.copytree(root, fresh)
    print(f"{'round':<28}{'wall s':>8}{'CPU s':>8}{'score s':>9}{'dispatch s':>11}{'Prefect %':>11}{'ms/doc':>8}{'peak MB':>9}")
    for what in ("1", "2", "maintain", "3"):
        if what == "maintain":
            r = run_flow(root, what, env)
            print(f"{'weekly maintenance':<28}{r['wall_s']:8.1f}{r['cpu_s']:8.1f}{'':>9}{'':>11}{'':>11}{1000 * r['wall_s'] / n:8.2f}"
                  f"{r['peak_kib'] / 1024:9.0f}")
            continue
        label = "round 1 (full)" if what == "1" else f"round {what} ({vote_on_changed(root, changed, int(what), seed=int(what) - 1):,} docs changed)"
        r = run_flow(root, what, env)
        own = {stage: own_seconds(root, pattern, int(what)) for stage, pattern in STAGES.items()}
        print(f"{label:<28}{r['wall_s']:8.1f}{r['cpu_s']:8.1f}{own['score']:9.1f}{own['dispatch']:11.1f}{100 * (1 - sum(own.values()) / r['wall_s']):11.1f}"
              f"{1000 * r['wall_s'] / n:8.2f}{r['peak_kib'] / 1024:9.0f}")


if __name__ == "__main__":
    main()
