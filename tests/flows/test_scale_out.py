"""Scale-out: chunk tasks on a Dask cluster (prefect-dask) — settings pickled to worker
processes that reopen the lake and report to the same Prefect server — and a round on a lake in
S3 (a moto server on loopback), as on machines that share one Prefect server, one lake and one
Dask cluster."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import polars as pl
import pytest
from dask.utils import key_split
from distributed import Client, LocalCluster, get_task_stream
from prefect import flow, task
from prefect.cache_policies import NONE
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

from flows.expansion import chunk_task_runner, expansion_round
from flows.ingest import ingest_batch
from flows.params import IngestParams, RoundParams
from flows.settings import GraceSettings, build_settings
from storage.lake import Lake
from tests.conftest import DUMMY_AWS_ENV, REPO
from tests.storage.conftest import make_bucket

COMMON = dict(prior_sections=["Abstract", "Introduction"], hallucination_rate=0.2, budget=3.0)


@pytest.fixture
def one_paper(tmp_path: Path) -> Path:
    """A batch of one bundled QASPER paper (keeps the rounds short)."""
    path = tmp_path / "one-paper.jsonl"
    path.write_text((REPO / "flows/samples/qasper_demo.jsonl").read_text().splitlines()[0] + "\n")
    return path


def assert_round_one_is_in(lake: Lake) -> None:
    """Documents, claims and scores of round 1 are in the lake and its metrics view answers."""
    assert lake.read("documents").height == 1
    claims = lake.read("claims", rounds=[1])
    assert claims.height > 0
    scores = lake.read("scores", rounds=[1])
    assert scores.select("doc_id", "claim_id").unique().height == claims.select("doc_id", "claim_id").unique().height
    metrics = lake.query("SELECT round, n_documents, n_claims FROM round_metrics").to_dicts()
    assert metrics == [{"round": 1, "n_documents": 1, "n_claims": claims["claim_id"].n_unique()}]


def test_settings_and_lakes_pickle_as_their_values(tmp_path: Path) -> None:
    settings = build_settings(lake=str(tmp_path / "lake"), dask_address="tcp://10.0.0.5:8786")
    assert pickle.loads(pickle.dumps(settings)) == settings
    lake = pickle.loads(pickle.dumps(Lake.open(settings)))
    assert lake.uri == str(tmp_path / "lake")


@task(cache_policy=NONE)
def where_the_lake_opens(settings: GraceSettings) -> tuple[str, int]:
    """The lake's URI and the process id, as seen by whatever process runs the task."""
    return Lake.open(settings).uri, os.getpid()


@flow
def probe(settings: GraceSettings) -> tuple[str, int]:
    return where_the_lake_opens.submit(settings).result()


@pytest.mark.usefixtures("prefect_server")
@pytest.mark.slow
@pytest.mark.e2e
def test_chunk_task_runner_is_threads_by_default_and_a_local_dask_cluster_on_request(tmp_path: Path) -> None:
    with chunk_task_runner(build_settings()) as runner:
        assert runner is None  # each sub-flow keeps its own thread pool
    settings = build_settings(lake=str(tmp_path / "lake"), task_runner="dask")
    with chunk_task_runner(settings) as runner:
        with Client(runner.address) as client:
            workers = client.scheduler_info()["workers"].values()
            assert len(workers) >= 1 and all(w["nthreads"] == 1 for w in workers)  # graph-tool: one thread per process
        state = probe.with_options(task_runner=runner)(settings, return_state=True)
    uri, pid = state.result()
    assert uri == settings.lake and pid != os.getpid()  # settings pickled to a worker process, lake reopened there
    with get_client(sync_client=True) as client:  # the worker reported to this Prefect server
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
    assert [r.state.type.value for r in runs] == ["COMPLETED"]
    with pytest.raises(OSError), Client(runner.address, timeout="2s"):
        pass  # the round's cluster is gone with the round


@pytest.mark.usefixtures("prefect_server")
@pytest.mark.slow
@pytest.mark.e2e
def test_a_round_runs_its_chunk_tasks_on_a_dask_cluster(tmp_path: Path, one_paper: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = str(tmp_path / "lake")
    ingest_batch(IngestParams(batch=str(one_paper), lake=lake, **COMMON))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client, get_task_stream(client) as stream:
        monkeypatch.setenv("GRACE_DASK_ADDRESS", cluster.scheduler_address)
        expansion_round(RoundParams(round_id=1, lake=lake, **COMMON))
        workers = set(cluster.scheduler_info["workers"])
    ran = Counter(key_split(t["key"]) for t in stream.data)
    assert ran == Counter({"build_chunk": 1, "score_chunk": 1})  # the round's chunk tasks, and only those
    assert {t["worker"] for t in stream.data} <= workers
    assert_round_one_is_in(Lake.open(build_settings(lake=lake)))


@pytest.fixture
def bucket(s3_endpoint: str) -> str:
    """A new empty bucket on the session's moto server (tests/conftest.py: a child process, so a
    delta-rs call holding the GIL while it waits for S3 never stalls the server)."""
    return make_bucket(s3_endpoint)


@pytest.mark.usefixtures("prefect_server")
@pytest.mark.slow
@pytest.mark.e2e
def test_a_round_on_a_lake_in_s3(tmp_path: Path, one_paper: Path, s3_endpoint: str, bucket: str,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    s3.upload_file(str(one_paper), bucket, "batches/one-paper.jsonl")
    monkeypatch.setenv("GRACE_S3_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("GRACE_CATALOG_CACHE", str(tmp_path / "catalogs"))
    lake = f"s3://{bucket}/team/lake"
    ingest_batch(IngestParams(batch=f"s3://{bucket}/batches/one-paper.jsonl", lake=lake, **COMMON))
    expansion_round(RoundParams(round_id=1, lake=lake, **COMMON))
    assert_round_one_is_in(Lake.open(build_settings(lake=lake)))
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="team/lake/")["Contents"]]
    assert any(k.endswith(".parquet") and "/claims/" in k for k in keys)


@contextmanager
def dask_cluster(tmp_path: Path, env: dict[str, str], n_workers: int = 2) -> Iterator[str]:
    """A real Dask cluster on loopback, as on separate machines: ``dask scheduler`` and
    ``n_workers`` ``dask worker`` processes (one thread each), started from the command line
    with ``env``; yields the scheduler's address and stops them all."""
    scheduler_file = tmp_path / "scheduler.json"
    bin_dir = Path(sys.executable).parent
    logs = [open(tmp_path / f"dask-{i}.log", "w") for i in range(n_workers + 1)]
    procs = [subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(scheduler_file)], env=env, cwd=tmp_path, stdout=logs[0], stderr=subprocess.STDOUT)]
    try:
        deadline = time.monotonic() + 120
        while not scheduler_file.exists():
            assert procs[0].poll() is None and time.monotonic() < deadline, (tmp_path / "dask-0.log").read_text()[-2000:]
            time.sleep(0.2)
        address = json.loads(scheduler_file.read_text())["address"]
        for i in range(n_workers):
            procs.append(subprocess.Popen([str(bin_dir / "dask"), "worker", address, "--nthreads", "1", "--no-dashboard",
                                           "--name", f"w{i}", "--host", "127.0.0.1"], env=env, cwd=tmp_path,
                                          stdout=logs[i + 1], stderr=subprocess.STDOUT))
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(n_workers, timeout=120)
        yield address
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in logs:
            log.close()


@pytest.mark.usefixtures("prefect_server")
@pytest.mark.slow
@pytest.mark.e2e
def test_a_round_on_a_dask_cluster_of_separate_processes_with_the_lake_in_s3(
    tmp_path: Path, one_paper: Path, s3_endpoint: str, bucket: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``dask scheduler`` and two ``dask worker`` processes on loopback, the lake on S3 (moto),
    the round's chunk tasks on the cluster through ``GRACE_DASK_ADDRESS``: the same scores as the
    thread runner gives on the same batch."""
    from prefect.settings import PREFECT_API_URL

    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    s3.upload_file(str(one_paper), bucket, "batches/one-paper.jsonl")
    monkeypatch.setenv("GRACE_S3_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("GRACE_CATALOG_CACHE", str(tmp_path / "catalogs"))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GRACE_")}, **DUMMY_AWS_ENV,
           "PREFECT_API_URL": PREFECT_API_URL.value(), "GRACE_S3_ENDPOINT_URL": s3_endpoint,
           "GRACE_CATALOG_CACHE": str(tmp_path / "worker-catalogs"), "OMP_NUM_THREADS": "1"}

    def round_one(lake: str) -> pl.DataFrame:
        ingest_batch(IngestParams(batch=f"s3://{bucket}/batches/one-paper.jsonl", lake=lake, **COMMON))
        expansion_round(RoundParams(round_id=1, lake=lake, **COMMON))
        scores = Lake.open(build_settings(lake=lake)).read("scores", rounds=[1])
        return scores.drop("round").sort("doc_id", "claim_id")

    threads = round_one(f"s3://{bucket}/threads/lake")
    with dask_cluster(tmp_path, env) as address:
        monkeypatch.setenv("GRACE_DASK_ADDRESS", address)
        with Client(address) as client, get_task_stream(client) as stream:
            on_cluster = round_one(f"s3://{bucket}/dask/lake")
            workers = set(client.scheduler_info()["workers"])
    ran = Counter(key_split(t["key"]) for t in stream.data)
    assert ran == Counter({"build_chunk": 1, "score_chunk": 1})  # the chunk tasks ran on the cluster's worker processes
    assert len(workers) == 2 and {t["worker"] for t in stream.data} <= workers
    assert threads.height > 0
    assert on_cluster.equals(threads), "the Dask cluster's scores differ from the thread runner's"
