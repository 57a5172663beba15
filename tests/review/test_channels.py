"""Every review channel end to end on synthetic lakes, against a real temporary Prefect server:
files (packets in the outbox, `grace review ingest`, the review inbox read by the nightly flow)
on a local lake and on moto S3, the terminal tool driven through its input, and the Prefect UI
form resumed programmatically with ``resume_flow_run``."""

from __future__ import annotations

import csv
import io
import json
import threading
import time
from pathlib import Path

import boto3
import polars as pl
import pytest
from typer.testing import CliRunner

from flows.cli import _register, app
from flows.review import dispatch_reviews, ingest_verdicts
from flows.score import score_round
from flows.review_ui import PacketParams, review_packet
from flows.verdicts import ingest_verdict_file
from storage.lake import Lake
from tests.review.conftest import CLAIMS, DOC, RESPONSE, T0, build_lake, key_of, signed_as, stage
from tests.storage.conftest import make_bucket

pytestmark = [pytest.mark.usefixtures("prefect_server"), pytest.mark.slow, pytest.mark.e2e]  # flows on the session's Prefect server

_register()
RUNNER = CliRunner()


def votes(lake: Lake) -> list[tuple]:
    """Every stored vote: claim, round, reviewer, verdict, channel, seconds, note (sorted)."""
    rows = lake.read("verdicts").select("claim_id", "round", "reviewer", "verdict", "channel", "seconds_spent", "note")
    return sorted(rows.rows())


def fill(packet_csv: str, answers: dict[str, tuple[str, float, str]]) -> str:
    """The packet with ``verdict, seconds_spent, note`` filled in for the claims in ``answers``."""
    rows = list(csv.DictReader(io.StringIO(packet_csv)))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        if row["claim_id"] in answers:
            row["verdict"], seconds, row["note"] = answers[row["claim_id"]]
            row["seconds_spent"] = str(seconds)
        writer.writerow(row)
    return out.getvalue()


def test_file_channel_on_a_local_lake(tmp_path: Path, local_lake: Lake, reviewers) -> None:
    reviewers("alice", "bob", overlap=2)
    out = dispatch_reviews(stage(local_lake, 1))
    assert out["deferred"] == 4 and out["packets"] == {"alice": 4, "bob": 4}
    outbox = Path(local_lake.uri) / "review" / "outbox"
    packet = (outbox / "alice.csv").read_text()
    rows = list(csv.DictReader(io.StringIO(packet)))
    assert [r["claim_id"] for r in rows] == list(CLAIMS)  # in selection order
    first = rows[0]
    assert first["claim"] == CLAIMS["c:1"] and first["nearest_prior"] == CLAIMS["c:1"] and first["source_passage"] == RESPONSE
    assert (first["status"], first["round"], first["reviewer"], first["verdict"]) == ("boundary", "1", "alice", "")
    assert first["deadline"] == "2026-03-05T09:00:00Z"  # 72 hours after the dispatch
    assert [json.loads(line)["claim_id"] for line in (outbox / "bob.jsonl").read_text().splitlines()] == list(CLAIMS)

    # alice returns her packet, signed: three answers, one claim left empty, and two bad rows
    returned = fill(packet, {"c:1": ("confirm", 20, "in the abstract"), "c:2": ("reject", 40, ""), "c:3": ("confirm", 30, "")})
    returned += "1,d1,c:9,alice,,,,,,,,,confirm,5,\n" + "1,d1,c:1,alice,,,,,,,,,maybe,5,\n"
    answer = tmp_path / "alice.csv"
    answer.write_text(returned)
    signing = RUNNER.invoke(app, ["review", "sign", str(answer), "--reviewer", "alice", "--lake", local_lake.uri],
                            env={"GRACE_REVIEWER_KEY": key_of(local_lake, "alice")})
    assert signing.exit_code == 0 and "alice.csv: signed by alice (4 verdicts)" in signing.stdout, signing.output
    assert answer.read_text().startswith(returned) and answer.read_text().splitlines()[-1].startswith("# grace-signature reviewer=alice key=")
    result = RUNNER.invoke(app, ["review", "ingest", str(answer), "--lake", local_lake.uri])
    assert result.exit_code == 1, result.output
    assert "alice.csv: 3 verdicts recorded, 1 unanswered row skipped, 2 bad rows quarantined in" in result.stdout
    assert "alice.csv: line 6: unknown claim id 'c:9'" in result.stderr
    assert "alice.csv: line 7: invalid verdict 'maybe'" in result.stderr
    assert votes(local_lake) == [
        ("c:1", 1, "alice", "confirm", "file", 20.0, "in the abstract"), ("c:2", 1, "alice", "reject", "file", 40.0, None),
        ("c:3", 1, "alice", "confirm", "file", 30.0, None),
    ]
    (quarantined,) = (Path(local_lake.uri) / "review" / "quarantine").glob("alice.csv.*.bad.jsonl")
    kept = [json.loads(line) for line in quarantined.read_text().splitlines()]
    assert [(k["file"], k["line"], k["row"]) for k in kept] == [("alice.csv", 6, "1,d1,c:9,alice,,,,,,,,,confirm,5,"),
                                                                 ("alice.csv", 7, "1,d1,c:1,alice,,,,,,,,,maybe,5,")]
    # alice's packet now holds only the claim she left empty; bob's is left alone
    exported = RUNNER.invoke(app, ["review", "export", "--reviewer", "alice", "--lake", local_lake.uri])
    assert exported.exit_code == 0 and "alice: 1 claim →" in exported.stdout and "bob" not in exported.stdout
    assert "grace review sign FILE --reviewer alice" in exported.stdout
    assert [r["claim_id"] for r in csv.DictReader(io.StringIO((outbox / "alice.csv").read_text()))] == ["c:4"]
    assert len((outbox / "bob.jsonl").read_text().splitlines()) == 4
    # the same file again changes nothing
    before = (votes(local_lake), local_lake.state())
    again = RUNNER.invoke(app, ["review", "ingest", str(answer), "--lake", local_lake.uri])
    assert again.exit_code == 0 and "already ingested, nothing changed" in again.stdout
    assert (votes(local_lake), local_lake.state()) == before
    # a second file cannot change a stored verdict, but its new answer is applied
    second = tmp_path / "alice-2.jsonl"
    second.write_bytes(signed_as(local_lake, "alice", second.name,
                                 '{"claim_id": "c:1", "verdict": "reject", "reviewer": "alice"}\n{"claim_id": "c:4", "verdict": "abstain", "reviewer": "alice"}\n'))
    result = RUNNER.invoke(app, ["review", "ingest", str(second), "--lake", local_lake.uri])
    assert "alice-2.jsonl: line 1: claim 'c:1' was already answered by 'alice' in round 1" in result.stderr
    assert votes(local_lake) == sorted([*before[0], ("c:4", 1, "alice", "abstain", "file", None, None)])

    # bob's answers arrive in the review inbox with a stray file; the nightly round reads them
    inbox = Path(local_lake.uri) / "review" / "inbox"
    inbox.mkdir()
    (inbox / "bob.jsonl").write_bytes(signed_as(local_lake, "bob", "bob.jsonl", "".join(
        json.dumps({"claim_id": c, "verdict": v, "reviewer": "bob", "seconds_spent": 10}) + "\n"
        for c, v in [("c:1", "confirm"), ("c:2", "confirm"), ("c:3", "reject"), ("c:4", "abstain")]
    )))
    (inbox / "notes.txt").write_text("call me\n")
    state = ingest_verdicts(stage(local_lake, 2), return_state=True)  # run on its own: Failed, naming the refused file
    assert state.is_failed() and "1 verdict file(s) refused whole" in state.message and "notes.txt: quarantined: " in state.message
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    with get_client(sync_client=True) as client:  # the quarantined file is listed where the run shows it, not only logged
        (artifact,) = client.read_artifacts(artifact_filter=ArtifactFilter(  # this run's: the server is the session's
            key=ArtifactFilterKey(any_=["grace-verdict-problems"]), flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])))
    assert "notes.txt: quarantined: " in artifact.data
    assert sorted(p.name for p in inbox.iterdir()) == []
    (processed,) = (Path(local_lake.uri) / "review" / "processed").iterdir()
    assert processed.name.startswith("bob.") and processed.name.endswith(".jsonl") and len(processed.name) == len("bob.jsonl") + 13
    (report,) = (Path(local_lake.uri) / "review" / "quarantine").glob("notes.*.txt.error.txt")
    assert "notes.txt: not a verdict file" in report.read_text()
    # round 2's settle step, quorum 1, majority of non-abstain votes: c:1 2×confirm; c:2 and c:3 ties; c:4 abstentions
    score_round(stage(local_lake, 2))
    verified = local_lake.read("sources", rounds=[2])
    assert verified.select("source_id", "source_kind", "text").rows() == [("v:c:1", "verified", CLAIMS["c:1"])]
    assert len(votes(local_lake)) == 8  # every raw vote is kept


@pytest.fixture
def s3_env(s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on the moto server; the lake settings reach it through the environment."""
    monkeypatch.setenv("GRACE_S3_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("GRACE_CATALOG_CACHE", str(tmp_path / "catalogs"))
    return make_bucket(s3_endpoint)


def test_file_channel_on_an_s3_lake(s3_env: str, s3_endpoint: str, reviewers) -> None:
    reviewers("alice")
    lake = build_lake(f"s3://{s3_env}/grace")
    dispatch_reviews(stage(lake, 1))
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    outbox = s3.list_objects_v2(Bucket=s3_env, Prefix="grace/review/outbox/")["Contents"]
    assert sorted(o["Key"] for o in outbox) == ["grace/review/outbox/alice.csv", "grace/review/outbox/alice.jsonl"]
    packet = s3.get_object(Bucket=s3_env, Key="grace/review/outbox/alice.jsonl")["Body"].read().decode()
    rows = [json.loads(line) for line in packet.splitlines()]
    assert [r["claim_id"] for r in rows] == list(CLAIMS) and rows[2]["nearest_prior"] == CLAIMS["c:3"]
    for r, v in zip(rows, ["confirm", "reject", "confirm", None]):
        r.update(verdict=v, seconds_spent=15)
    rows.append({"claim_id": "c:2", "verdict": "confirm", "reviewer": "alice"})  # a duplicate of line 2
    s3.put_object(Bucket=s3_env, Key="grace/review/inbox/alice.jsonl",
                  Body=signed_as(lake, "alice", "alice.jsonl", "".join(json.dumps(r) + "\n" for r in rows)))
    ingest_verdicts(stage(lake, 2))
    score_round(stage(lake, 2))
    assert lake.read("sources", rounds=[2]).filter(pl.col("source_kind") == "verified").height == 2
    assert [v[:4] for v in votes(lake)] == [("c:1", 1, "alice", "confirm"), ("c:2", 1, "alice", "reject"), ("c:3", 1, "alice", "confirm")]
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=s3_env, Prefix="grace/review/")["Contents"])
    assert any(k.startswith("grace/review/processed/alice.") for k in keys) and not any(k.startswith("grace/review/inbox/") for k in keys)
    (bad_key,) = [k for k in keys if k.startswith("grace/review/quarantine/alice.jsonl.")]
    bad = json.loads(s3.get_object(Bucket=s3_env, Key=bad_key)["Body"].read())
    assert (bad["line"], bad["reason"]) == (5, "duplicate of line 2 (same claim, reviewer and round)")
    # `grace review ingest` reads a file straight from S3 too; the same content twice changes nothing
    s3.put_object(Bucket=s3_env, Key="returns/late.csv", Body=signed_as(lake, "alice", "late.csv", b"claim_id,verdict,reviewer,round\nc:4,abstain,alice,1\n"))
    for expected in ("1 verdict recorded", "already ingested"):
        result = RUNNER.invoke(app, ["review", "ingest", f"s3://{s3_env}/returns/late.csv", "--lake", lake.uri])
        assert result.exit_code == 0 and expected in result.stdout, result.output
    assert len(votes(lake)) == 4


def test_terminal_tool_shows_only_the_reviewers_claims_and_records_seconds(local_lake: Lake, reviewers, monkeypatch: pytest.MonkeyPatch) -> None:
    reviewers("alice", "bob")  # overlap 1: alice gets c:1 and c:3, bob c:2 and c:4
    dispatch_reviews(stage(local_lake, 1))
    clock = iter([100.0, 112.5, 200.0, 300.0, 400.0, 404.0])
    monkeypatch.setattr("flows.cli.review.monotonic", lambda: next(clock))
    session = ["review", "--reviewer", "alice", "--lake", local_lake.uri]
    alice, bob = key_of(local_lake, "alice"), key_of(local_lake, "bob")
    result = RUNNER.invoke(app, session, input=f"{alice}\nmaybe\nc\nin the abstract\ns\n")
    assert result.exit_code == 0, result.output
    assert "2 claims waiting for alice" in result.stdout
    assert "please answer c, r, a, s or q" in result.stdout  # asked again
    assert "claim c:1 ·" in result.stdout and "claim c:3 ·" in result.stdout and "claim c:2 ·" not in result.stdout
    assert "nearest prior" in result.stdout and "status boundary · confidence 0.00" in result.stdout
    assert "recorded: confirm (12 s)" in result.stdout and "alice: 1 recorded, 1 skipped, 0 refused" in result.stdout
    # the skipped claim is still waiting; quitting records nothing
    result = RUNNER.invoke(app, session, input=f"{alice}\nq\n")
    assert "1 claim waiting for alice" in result.stdout and "alice: 0 recorded" in result.stdout
    result = RUNNER.invoke(app, session, input=f"{alice}\nreject\n\n")
    assert "alice: 1 recorded" in result.stdout
    assert votes(local_lake) == [("c:1", 1, "alice", "confirm", "terminal", 12.5, "in the abstract"),
                                 ("c:3", 1, "alice", "reject", "terminal", 4.0, None)]
    assert "no claims waiting for alice" in RUNNER.invoke(app, session, input=f"{alice}\n").stdout
    # bob's claim is answered through a file while the terminal shows it: the terminal's answer is refused
    def racing_clock() -> float:
        ingest_verdict_file(local_lake, "bob.jsonl", signed_as(local_lake, "bob", "bob.jsonl", b'{"claim_id": "c:2", "verdict": "reject", "reviewer": "bob"}\n'), T0)
        return 0.0
    monkeypatch.setattr("flows.cli.review.monotonic", racing_clock)
    result = RUNNER.invoke(app, ["review", "-r", "bob", "--lake", local_lake.uri], input=f"{bob}\nc\n\nq\n")
    assert "not recorded: claim 'c:2' was already answered by 'bob' in round 1" in result.stdout
    assert "bob: 0 recorded, 0 skipped, 1 refused" in result.stdout
    assert local_lake.read("verdicts").filter(pl.col("reviewer") == "bob").select("claim_id", "verdict", "channel").rows() == [
        ("c:2", "reject", "file")]
    missing = RUNNER.invoke(app, ["review", "--lake", local_lake.uri])
    assert missing.exit_code == 2 and "--reviewer" in missing.output


def paused_run(flow_name: str, timeout: float = 90.0, after: dict | None = None):
    """The paused run of ``flow_name`` once its form is saved (a flow run object); with
    ``after``, a pause whose form is not the one of that keyset."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.input.actions import read_flow_run_input

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            for run in client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name]))):
                keyset = run.state.state_details.run_input_keyset if run.state and run.state.is_paused() else None
                if keyset and keyset != after and read_flow_run_input(keyset["schema"], flow_run_id=run.id) is not None:
                    return run  # paused, and its form saved
            time.sleep(0.5)
    raise AssertionError(f"no paused {flow_name} run within {timeout} s")


def test_prefect_ui_form_resumed_with_run_input(local_lake: Lake, reviewers) -> None:
    from prefect.flow_runs import resume_flow_run
    from prefect.input.actions import read_flow_run_input

    reviewers("alice")
    dispatch_reviews(stage(local_lake, 1))
    result: dict = {}
    params = PacketParams(reviewer="alice", lake=local_lake.uri, packet_size=3, poll_seconds=1)
    worker = threading.Thread(target=lambda: result.update(review_packet(params)), daemon=True)
    worker.start()
    run = paused_run("review_packet")
    keyset = run.state.state_details.run_input_keyset
    schema = read_flow_run_input(keyset["schema"], flow_run_id=run.id)
    assert [k for k in schema["properties"] if k.startswith("claim_")] == ["claim_1", "claim_2", "claim_3"]  # packet_size
    description = read_flow_run_input(keyset["description"], flow_run_id=run.id)
    evidence = schema["properties"]["claim_1"]["description"]  # each claim's evidence is its field's description
    assert CLAIMS["c:1"] in evidence and "Nearest prior: " in evidence and "Status: boundary" in evidence
    claim = schema["properties"]["claim_1"]  # a plain select with a default: the default UI and V2 both render it
    assert claim["enum"] == ["confirm", "reject", "abstain", "leave pending"] and claim["default"] == "leave pending"
    assert schema["properties"]["note_1"]["title"] == "Note on claim 1"
    with pytest.raises(RuntimeError, match="Cannot resume this run"):
        resume_flow_run(run.id, run_input={"claim_1": "maybe"})  # the server validates the form
    # a note without a verdict is refused: the run pauses again with the reason, the answers kept
    key = key_of(local_lake, "alice")
    resume_flow_run(run.id, run_input={"claim_1": "confirm", "claim_2": "leave pending", "note_2": "unsure", "key": key})
    again = paused_run("review_packet", after=keyset)
    keyset = again.state.state_details.run_input_keyset
    description = read_flow_run_input(keyset["description"], flow_run_id=run.id)
    assert description.startswith("**Not recorded, please correct:** claim 2: a note was written but the verdict is still 'leave pending'")
    assert read_flow_run_input(keyset["schema"], flow_run_id=run.id)["properties"]["note_2"]["default"] == "unsure"
    assert local_lake.read("verdicts").height == 0
    resume_flow_run(run.id, run_input={"claim_1": "confirm", "note_1": "matches the abstract", "claim_2": "reject", "key": key})
    worker.join(timeout=60)
    assert result == {"claims": 3, "recorded": 2, "bad": []}
    got = local_lake.read("verdicts").sort("claim_id")
    assert got.select("claim_id", "reviewer", "verdict", "channel", "note").rows() == [
        ("c:1", "alice", "confirm", "ui", "matches the abstract"),
        ("c:2", "alice", "reject", "ui", "unsure"),  # the note of the refused answer was kept in the form
    ]
    assert got["seconds_spent"].min() > 0 and got["seconds_spent"].n_unique() == 1  # the packet's time, shared
    # claim 3 was left pending: it is still waiting, first in alice's next packet
    assert got.filter(pl.col("claim_id") == "c:3").height == 0
    assert RUNNER.invoke(app, ["review", "--reviewer", "alice", "--lake", local_lake.uri], input=f"{key}\nq\n").stdout.count("claims waiting") == 1
    assert local_lake.read("deferrals")["doc_id"].unique().to_list() == [DOC]
