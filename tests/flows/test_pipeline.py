"""End to end: the flows on three QASPER dev papers with the offline backend and the verifier
as reviewer, against a real temporary Prefect server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from flows.expansion import expansion_round, next_round
from flows.ingest import ingest_batch, watch_inbox
from flows.maintenance import maintain_lake
from flows.params import InboxOptions, IngestParams, MaintenanceParams, RoundParams, RunOptions
from storage.lake import Lake
from tests.conftest import REPO

pytestmark = [pytest.mark.usefixtures("prefect_server"), pytest.mark.slow, pytest.mark.e2e]  # flows on the session's Prefect server

TABLES = ("documents", "sources", "questions", "claims", "edges", "scores", "deferrals", "verdicts", "llm_calls")
COMMON = dict(hallucination_rate=0.2, prior_sections=["Abstract", "Introduction"], budget=3.0)


def snapshot(lake: Lake) -> dict[str, int]:
    return {t: lake.read(t).height for t in TABLES} | {"files": len(lake.query("SELECT * FROM lake_files"))}


def metrics(lake: Lake) -> dict[int, dict]:
    return {r["round"]: r for r in lake.query("SELECT * FROM round_metrics ORDER BY round").to_dicts()}


@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory) -> Lake:
    root = str(tmp_path_factory.mktemp("lake"))
    ingest_batch(IngestParams(batch=str(REPO / "flows/samples/qasper_demo.jsonl"), lake=root, **COMMON))
    for r in (1, 2):
        expansion_round(RoundParams(round_id=r, lake=root, **COMMON))
    return Lake.open(RunOptions(lake=root).settings())


def test_two_rounds_grow_grounded_knowledge(two_rounds: Lake) -> None:
    m = metrics(two_rounds)
    assert set(m) == {1, 2}
    assert m[1]["n_documents"] == 3 and m[1]["n_claims"] > 30
    assert m[1]["n_deferred"] > 0 and m[1]["n_confirmed"] > 0
    assert m[2]["pcr"] >= m[1]["pcr"]
    assert m[2]["n_grounded"] > m[1]["n_grounded"] and m[2]["kf"] < m[1]["kf"]


def test_confirmed_claims_become_priors_and_rejected_ones_are_refuted(two_rounds: Lake) -> None:
    votes = two_rounds.read("verdicts", rounds=[1])
    confirmed = votes.filter(pl.col("verdict") == "confirm").select("doc_id", "claim_id")
    verified = two_rounds.read("sources", rounds=[2]).filter(pl.col("source_kind") == "verified")
    assert verified.select("doc_id", "claim_id").sort("claim_id").equals(confirmed.sort("claim_id"))
    assert (verified["source_id"] == "v:" + verified["claim_id"]).all()
    status2 = two_rounds.read("scores", rounds=[2]).select("doc_id", "claim_id", "status")
    assert set(confirmed.join(status2, on=["doc_id", "claim_id"])["status"]) == {"grounded"}
    rejected = votes.filter(pl.col("verdict") == "reject").select("doc_id", "claim_id")
    assert set(rejected.join(status2, on=["doc_id", "claim_id"])["status"]) <= {"refuted"}
    # every vote names its reviewer and channel
    assert votes["reviewer"].null_count() == 0 and set(votes["channel"]) == {"verifier"}


def test_deferrals_respect_the_budget(two_rounds: Lake) -> None:
    d = two_rounds.read("deferrals")
    assert d.height > 0
    assert d.group_by("round").agg(pl.col("cost").sum())["cost"].max() <= COMMON["budget"] + 1e-9
    assert (d["gain"] > 0).all()


def test_rerunning_a_round_changes_nothing(two_rounds: Lake) -> None:
    before = snapshot(two_rounds)
    expansion_round(RoundParams(round_id=2, lake=two_rounds.uri, **COMMON))
    assert snapshot(two_rounds) == before
    assert next_round(RunOptions(lake=two_rounds.uri).settings()) == 3


def test_the_maintenance_flow_compacts_once_and_keeps_every_row(two_rounds: Lake, tmp_path: Path) -> None:
    """On a copy of the two-round lake: the tables keep their rows and views, fewer files; a
    second run rewrites nothing; a lake that does not exist fails the run in one line."""
    root = tmp_path / "lake"
    shutil.copytree(two_rounds.uri, root)
    lake = Lake.open(RunOptions(lake=str(root)).settings())
    views = "SELECT * FROM claim_status ORDER BY doc_id, claim_id"
    before, rows, files = lake.query(views), snapshot(lake), lake.query("SELECT count(*) AS n FROM lake_files")["n"][0]
    lines = maintain_lake(MaintenanceParams(lake=str(root)))
    assert any("tables/edges: " in line and "compacted into 1" in line for line in lines), lines
    assert lines[-1].startswith("compacted ") and "deleted 0 file(s)" in lines[-1]  # the replaced files are within the retention
    lake = Lake.open(RunOptions(lake=str(root)).settings())
    assert lake.query(views).equals(before)
    assert {t: n for t, n in snapshot(lake).items() if t != "files"} == {t: n for t, n in rows.items() if t != "files"}
    assert lake.query("SELECT count(*) AS n FROM lake_files")["n"][0] < files
    again = maintain_lake(MaintenanceParams(lake=str(root)))
    assert again == [f"compacted 0 table(s); {again[-1].split('; ', 1)[1]}"]

    state = maintain_lake(MaintenanceParams(lake=str(tmp_path / "nowhere")), return_state=True)
    assert state.is_failed() and "LakeError: no lake at" in state.message and "nowhere" in state.message


def _assert_no_duplicates(lake: Lake) -> None:
    keys = {
        "claims": ["doc_id", "claim_id", "source_id"], "edges": ["doc_id", "source_id", "claim_id", "label"],
        "scores": ["doc_id", "claim_id", "round"], "sources": ["doc_id", "source_id"], "deferrals": ["doc_id", "claim_id", "round", "reviewer"],
        "verdicts": ["doc_id", "claim_id", "round", "reviewer"],
    }
    for table, cols in keys.items():
        df = lake.read(table)
        assert df.height == df.select(cols).n_unique(), f"duplicate rows in {table}"


def test_a_round_killed_midway_and_rerun_leaves_no_duplicates(tmp_path: Path) -> None:
    root = str(tmp_path / "lake")
    env = {**os.environ, "GRACE_DOCS_PER_TASK": "1", "GRACE_PRIOR_SECTIONS": json.dumps(COMMON["prior_sections"])}
    from prefect.settings import PREFECT_API_URL

    env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    ingest_batch(IngestParams(batch=str(REPO / "flows/samples/qasper_demo.jsonl"), lake=root, **COMMON))
    lake = Lake.open(RunOptions(lake=root).settings())
    # The round runs for real; only its lake commits are watched: the first build chunk commits,
    # the others stop just before their commit, so the kill lands between the chunks whatever
    # the machine's speed.
    script = f"""
import threading, time
from storage.lake import Lake
from flows.expansion import expansion_round
from flows.params import RoundParams
real_commit, lock, builds = Lake.commit, threading.Lock(), []
def commit(self, key, tables):
    if key.startswith("build/"):
        with lock:
            builds.append(key)
            first = len(builds) == 1
        if not first:
            time.sleep(600)
    return real_commit(self, key, tables)
Lake.commit = commit
expansion_round(RoundParams(round_id=1, lake={root!r}, hallucination_rate=0.2, budget=3.0))
"""
    err = tmp_path / "round.err"
    with err.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 600  # only guards a hang: the wait ends at the first build commit
        while "build" not in lake.read("rounds", columns=["stage"])["stage"].to_list():
            assert proc.poll() is None, f"the round ended before it could be killed:\n{err.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no build chunk committed in 600 s:\n{err.read_text()[-3000:]}"
            time.sleep(0.1)
    finally:  # killed whatever happened above, so a failure reports itself, not a wait for a round asleep in its commit
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # the round had ended
            pass
        proc.wait(timeout=60)
    assert lake.read("claims")["doc_id"].n_unique() == 1, "the kill lands after the first build chunk's commit"
    assert lake.read("scores").height == 0
    os.environ["GRACE_DOCS_PER_TASK"] = "1"
    try:
        expansion_round(RoundParams(round_id=1, lake=root, **COMMON))
    finally:
        del os.environ["GRACE_DOCS_PER_TASK"]
    assert lake.read("claims")["doc_id"].n_unique() == 3
    _assert_no_duplicates(lake)
    assert metrics(lake)[1]["n_documents"] == 3


def test_inbox_ingests_good_batches_and_quarantines_bad_ones(tmp_path: Path) -> None:
    inbox, root = tmp_path / "inbox", str(tmp_path / "lake")
    inbox.mkdir()
    lines = (REPO / "flows/samples/qasper_demo.jsonl").read_text().splitlines()
    (inbox / "a-good.jsonl").write_text(lines[0] + "\n")
    (inbox / "b-bad.jsonl").write_text('{"id": "x", "title": "no text at all"}\n')
    (inbox / "c-good.jsonl").write_text(lines[1] + "\n")
    state = watch_inbox(InboxOptions(lake=root, inbox=str(inbox)), return_state=True)
    out = state.result()
    assert len(out) == 3 and "quarantined" in out[1]
    # the quarantine is visible on the run: a WARNING line and an artifact naming the batch
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, LogFilter, LogFilterFlowRunId, LogFilterLevel
    from prefect.logging.handlers import APILogWorker
    APILogWorker.drain_all(timeout=10)
    with get_client(sync_client=True) as client:
        run_id = state.state_details.flow_run_id
        warnings = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id]), level=LogFilterLevel(ge_=30)))
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["grace-inbox-quarantine"])))
    assert [w.message for w in warnings if "b-bad.jsonl: quarantined" in w.message]
    assert any(a.flow_run_id == run_id and "b-bad.jsonl: quarantined" in a.data for a in artifacts)
    assert sorted(p.name for p in inbox.iterdir() if p.is_file()) == []
    assert sorted(p.name for p in (inbox / "processed").iterdir()) == ["a-good.jsonl", "c-good.jsonl"]
    report = (inbox / "quarantine" / "b-bad.jsonl.error.txt").read_text()
    assert "b-bad.jsonl: line 1" in report
    assert Lake.open(RunOptions(lake=root).settings()).read("documents").height == 2
    assert watch_inbox(InboxOptions(lake=root, inbox=str(inbox))) == []  # nothing new


def test_a_missing_batch_file_fails_at_once_with_one_clear_line(tmp_path: Path) -> None:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    missing = tmp_path / "nope.jsonl"
    state = ingest_batch(IngestParams(batch=str(missing), lake=str(tmp_path / "lake")), return_state=True)
    assert state.is_failed() and state.message == f"Flow run encountered an exception: InvalidBatch: {missing}: cannot read: no such file"
    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
    assert [(t.name.rsplit("-", 1)[0], t.run_count) for t in tasks] == [("ingest_file", 1)]  # a domain error: no retry


def test_ask_answers_from_grounded_knowledge_or_abstains(two_rounds: Lake) -> None:
    from typer.testing import CliRunner

    from flows.cli import _register, app

    _register()
    runner = CliRunner()
    grounded = two_rounds.query(
        "SELECT s.doc_id, t.text FROM claim_status s JOIN claim_texts t USING (doc_id, claim_id) "
        "WHERE s.status = 'grounded' AND t.from_response ORDER BY s.closeness DESC LIMIT 1"
    ).row(0, named=True)
    res = runner.invoke(app, ["ask", "--lake", two_rounds.uri, "--doc", grounded["doc_id"], grounded["text"]])
    assert res.exit_code == 0, res.output
    assert "Answer:" in res.output and "abstained" not in res.output
    assert "grounded claim" in res.output or "prior" in res.output
    res = runner.invoke(app, ["ask", "--lake", two_rounds.uri, "What is the boiling point of tungsten in kelvin?"])
    assert res.exit_code == 0 and "abstained" in res.output
    res = runner.invoke(app, ["ask", "--lake", two_rounds.uri, "--doc", "no-such-doc", "anything"])
    assert res.exit_code != 0
