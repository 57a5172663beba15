"""Lake benchmark: commit 1M claim rows (and their 1M score rows) and query status counts per
document through the DuckDB catalog, on a local lake and on a moto S3 endpoint.

    .venv/bin/python -m benchmarks.bench_lake [--rows 1000000] [--per-doc 100] [--repeat 5]

A commit is everything ``Lake.commit`` does: schema check, reading the stored keys of the
round (insert-if-absent), zstd Parquet through delta-rs, the Delta commit, the commit-log
record and the catalog rebuild. ``small commit`` is the median of 20 commits of 100 claim rows
each (round 2) into the filled lake. The query is
``SELECT doc_id, status, count(*) FROM claim_status GROUP BY ALL`` through ``Lake.query``
(catalog freshness check, read-only connection, result as polars); the first run is shown
apart (cold), then the median of ``--repeat`` runs. moto runs in its own process on
127.0.0.1, so S3 figures include real HTTP round trips (moto is slower than S3 for large
bodies). Targets (local, this project's 2-core machines): commit ≤ 2 s, query ≤ 0.2 s.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from storage.config import LakeConfig
from storage.lake import Lake

QUERY = "SELECT doc_id, status, count(*) AS n FROM claim_status GROUP BY ALL"
TARGETS = {"commit claims": 2.0, "query (median)": 0.2}


def make_rows(n: int, per_doc: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``n`` claim rows of round 1 (``per_doc`` per document) and their score rows."""
    i = pl.int_range(n, eager=True)
    claims = pl.DataFrame({"i": i}).select(
        doc_id=pl.format("doc{}", pl.col("i") // per_doc),
        claim_id=pl.format("{}", (pl.col("i") * 2654435761 % (1 << 32)).cast(pl.Utf8).str.zfill(10)),
        round=pl.lit(1, pl.Int32),
        source_id=pl.format("r:{}:{}", pl.col("i") // per_doc, pl.col("i") % 5),
        source_kind=pl.lit("response"),
        ord=(pl.col("i") % per_doc).cast(pl.Int32),
        text=pl.format("claim number {} says something checkable about the paper", pl.col("i")),
    )
    rng = np.random.default_rng(0)
    status = np.array(["grounded", "boundary", "refuted"])[rng.integers(0, 3, n)]
    closeness = rng.random(n)
    scores = claims.select("doc_id", "claim_id", "round").with_columns(
        in_prior=pl.Series(status == "grounded"), contradicted=pl.lit(False), rejected=pl.lit(False),
        closeness=pl.Series(closeness), closeness_norm=pl.Series(closeness), status=pl.Series(status),
        novelty=pl.Series(rng.random(n)), confidence=pl.Series(rng.random(n)),
    )
    return claims, scores


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run(name: str, config: LakeConfig, claims: pl.DataFrame, scores: pl.DataFrame, repeat: int) -> dict[str, float]:
    lake = Lake.open(config)
    t_claims, _ = timed(lambda: lake.commit("bench/claims", {"claims": claims}))
    t_scores, _ = timed(lambda: lake.commit("bench/scores", {"scores": scores}))
    t_again, res = timed(lambda: lake.commit("bench/claims", {"claims": claims}))
    assert not res.created
    t_cold, counts = timed(lambda: lake.query(QUERY))
    assert counts["n"].sum() == claims.height
    runs = [timed(lambda: lake.query(QUERY))[0] for _ in range(repeat)]
    small = [timed(lambda i=i: lake.commit(f"bench/small/{i}", {"claims": claims.head(100).with_columns(
        round=pl.lit(2, pl.Int32), claim_id=pl.format("s{}-{}", pl.lit(i), pl.col("claim_id")))}))[0] for i in range(20)]
    return {
        "commit claims": t_claims, "commit scores": t_scores, "re-commit (skipped)": t_again,
        "small commit (median)": statistics.median(small),
        "query (cold)": t_cold, "query (median)": statistics.median(runs), "query (min)": min(runs),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, str]:
    """A moto S3 server in its own process, with dummy credentials in this process's environment."""
    os.environ.update({
        "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    })
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint)
    for _ in range(100):
        try:
            client.create_bucket(Bucket="grace-bench")
            return proc, endpoint
        except Exception:  # the server is still starting
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--per-doc", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-s3", action="store_true")
    args = parser.parse_args()

    claims, scores = make_rows(args.rows, args.per_doc)
    print(f"{args.rows:,} claim rows over {args.rows // args.per_doc:,} documents; {os.cpu_count()} cores")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["local"] = run("local", LakeConfig(lake=str(Path(tmp) / "lake")), claims, scores, args.repeat)
        if not args.skip_s3:
            proc, endpoint = start_moto()
            try:
                config = LakeConfig(lake="s3://grace-bench/lake", s3_endpoint_url=endpoint, catalog_cache=str(Path(tmp) / "cache"))
                results["moto S3"] = run("s3", config, claims, scores, args.repeat)
            finally:
                proc.kill()
                proc.wait()

    names = list(results)
    print(f"{'step':<22}" + "".join(f"{n:>12}" for n in names) + "   target (local)")
    for step in results["local"]:
        target = TARGETS.get(step)
        verdict = "" if target is None else f"   ≤ {target:g} s {'ok' if results['local'][step] <= target else 'MISSED'}"
        print(f"{step:<22}" + "".join(f"{results[n][step]:>11.3f}s" for n in names) + verdict)


if __name__ == "__main__":
    main()
