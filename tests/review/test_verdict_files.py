"""Verdict files mean one thing or are refused ("Nothing silently wrong", item 6): a repeated
JSON key is a bad row naming it and a repeated CSV column refuses the file (the last value no
longer wins silently); ``seconds_spent`` over 24 h is a bad row (1e308 made the reviewer's mean
review time 1e308); a verdict file of any name is recorded (a 230-character name failed whole
when its quarantine name did not fit the file system), and a quarantine that cannot be written
costs no good row; a vote after its deadline is recorded, counts and is reported as late.

Every file is signed by a registered reviewer (tests/review/conftest.py's :func:`signed_as`).
The lake is the synthetic document with round 1's deferrals: alice c:1, c:3 and bob c:2, due
72 hours after T0; ingests run at a given ``now``, so no Prefect server is needed.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from flows.review import ingest_review_inbox
from flows.reviewers import sign_verdict_file
from flows.verdicts import ingest_verdict_file
from grace_core.decisions import decide
from grace_core.verdict_files import MAX_SECONDS_SPENT, InvalidVerdictFile, parse_verdict_file
from storage.lake import Lake
from storage.review_files import content_name
from tests.review.conftest import T0, build_lake, key_of, signed_as, stage

DEADLINE = T0 + timedelta(hours=72)
ASSIGNED = {"c:1": "alice", "c:3": "alice", "c:2": "bob"}


def deferrals(round_id: int, assigned: dict[str, str], deadline) -> pl.DataFrame:
    n = len(assigned)
    return pl.DataFrame({
        "doc_id": ["d1"] * n, "claim_id": list(assigned), "round": [round_id] * n, "reviewer": list(assigned.values()),
        "priority": [1.0] * n, "confidence": [0.0] * n, "cost": [0.07] * n, "gain": [1.0] * n, "rank": list(range(1, n + 1)),
        "deadline": [deadline] * n, "created_at": [deadline - timedelta(hours=72)] * n,
    }, schema_overrides={"round": pl.Int32, "rank": pl.Int32})


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    opened = build_lake(str(tmp_path / "lake"))
    opened.commit("fixture/deferrals/round=1", {"deferrals": deferrals(1, ASSIGNED, DEADLINE)})
    return opened


def row(claim: str, verdict: str = "confirm", reviewer: str = "alice", **more: object) -> str:
    return json.dumps({"claim_id": claim, "verdict": verdict, "reviewer": reviewer, **more})


def jsonl(*lines: str) -> bytes:
    return "".join(f"{line}\n" for line in lines).encode()


def votes(lake: Lake) -> list[tuple]:
    return sorted(lake.read("verdicts").select("claim_id", "round", "reviewer", "verdict", "seconds_spent").rows())


# repeated keys and columns


def test_a_json_object_with_a_repeated_key_is_a_bad_row_naming_the_key() -> None:
    parsed = parse_verdict_file("a.jsonl", jsonl(
        '{"claim_id": "c:1", "verdict": "confirm", "reviewer": "alice", "reviewer": "bob"}',   # 1 who voted?
        '{"claim_id": "c:1", "verdict": "confirm", "verdict": "reject", "reviewer": "alice"}',  # 2 which vote?
        '{"claim_id": "c:3", "verdict": "confirm", "reviewer": "alice", "x": {"a": 1, "a": 2}}',  # 3 nested: ambiguous too
        row("c:3"),                                                                              # 4 good
    ))
    assert [(b.line, b.reason) for b in parsed.bad] == [
        (1, "ambiguous line: the key 'reviewer' appears more than once in one object"),
        (2, "ambiguous line: the key 'verdict' appears more than once in one object"),
        (3, "ambiguous line: the key 'a' appears more than once in one object"),
    ]
    assert [(r.line, r.claim_id, r.reviewer) for r in parsed.rows] == [(4, "c:3", "alice")]


@pytest.mark.parametrize(("header", "column"), [
    ("claim_id,verdict,reviewer,reviewer", "'reviewer'"),
    ("claim_id,verdict,reviewer, Reviewer ", "'reviewer'"),    # the same column after strip and lower case
    ("claim_id,VERDICT,verdict,reviewer", "'verdict'"),
    ("claim_id,verdict,reviewer,note,note", "'note'"),          # any column: which note is the note?
])
def test_a_csv_header_repeating_a_column_refuses_the_whole_file(header: str, column: str) -> None:
    width = header.count(",") + 1
    data = f"{header}\nc:1,confirm,alice{',bob' * (width - 3)}\n".encode()
    with pytest.raises(InvalidVerdictFile) as caught:
        parse_verdict_file("alice.csv", data)
    assert str(caught.value) == (f"alice.csv: line 1: the header names column {column} more than once "
                                 "(which one holds the value would be a guess)")


def test_unnamed_empty_columns_may_repeat() -> None:
    """A spreadsheet's trailing empty columns name nothing, so nothing is ambiguous."""
    parsed = parse_verdict_file("alice.csv", b"claim_id,verdict,reviewer,,\nc:1,confirm,alice,,\n")
    assert [(r.claim_id, r.verdict) for r in parsed.rows] == [("c:1", "confirm")] and parsed.bad == []


def test_a_signed_file_with_a_repeated_column_is_refused_whole_and_cannot_be_signed(lake: Lake) -> None:
    data = b"claim_id,verdict,reviewer,reviewer\nc:2,confirm,alice,bob\n"
    with pytest.raises(InvalidVerdictFile, match="alice.csv: line 1: the header names column 'reviewer' more than once"):
        sign_verdict_file(lake, "alice.csv", data, "alice", key_of(lake, "alice"))
    forged = data + b"# grace-signature reviewer=alice key=x hmac-sha256=" + b"0" * 64 + b"\n"  # refused before its signature is read
    with pytest.raises(InvalidVerdictFile, match="header names column 'reviewer'"):
        ingest_verdict_file(lake, "alice.csv", forged, T0)
    assert votes(lake) == []


# seconds_spent


def test_seconds_spent_over_24_hours_is_a_bad_row() -> None:
    parsed = parse_verdict_file("alice.csv", (
        "claim_id,verdict,reviewer,seconds_spent\n"
        f"c:1,confirm,alice,{MAX_SECONDS_SPENT}\n"       # 2 a whole day: accepted
        "c:1,confirm,alice,86400.5\n"                    # 3
        "c:1,confirm,alice,1e308\n"                      # 4 the probe: its mean poisoned every review cost
        "c:1,confirm,alice,1e309\n"                      # 5 inf
    ).encode())
    assert [r.seconds_spent for r in parsed.rows] == [86400.0]
    assert [(b.line, b.reason) for b in parsed.bad] == [
        (3, "seconds_spent must be at most 86400 (24 h), got '86400.5'"),
        (4, "seconds_spent must be at most 86400 (24 h), got '1e308'"),
        (5, "seconds_spent must be a non-negative number of seconds, got '1e309'"),
    ]
    (bad,) = parse_verdict_file("a.jsonl", jsonl('{"claim_id": "c:1", "verdict": "confirm", "reviewer": "alice", "seconds_spent": 1e308}')).bad
    assert bad.reason == "seconds_spent must be at most 86400 (24 h), got 1e+308"


# file names


def test_a_verdict_file_with_a_230_character_name_is_recorded_with_its_bad_rows_kept(lake: Lake) -> None:
    name = "r" * 224 + ".jsonl"
    data = signed_as(lake, "alice", name, jsonl(row("c:1"), row("c:9")))
    report = ingest_verdict_file(lake, name, data, T0)
    assert report.recorded == 1 and votes(lake) == [("c:1", 1, "alice", "confirm", None)]
    quarantined = Path(report.quarantine)
    assert quarantined.parent == Path(lake.uri) / "review" / "quarantine"
    assert quarantined.name == f"{'r' * 64}.{quarantined.name.split('.')[1]}.bad.jsonl" and len(quarantined.name) <= 90
    (kept,) = [json.loads(line) for line in quarantined.read_text().splitlines()]
    assert (kept["file"], kept["line"], kept["reason"]) == (name, 2, "unknown claim id 'c:9'")  # the name as received


def test_inbox_files_of_any_name_are_recorded_moved_and_quarantined(lake: Lake) -> None:
    inbox = Path(lake.uri) / "review" / "inbox"
    inbox.mkdir(parents=True)
    long_good = "a" * 244 + ".jsonl"                  # 250 bytes: as long as the file system allows
    odd = "réponse d'alice\n(1).jsonl"                    # non-ASCII, a quote, a newline
    unsigned = "u" * 246 + ".csv"                     # refused whole
    good_data = signed_as(lake, "alice", long_good, jsonl(row("c:1"), row("c:9")))
    odd_data = signed_as(lake, "alice", odd, jsonl(row("c:3", "reject")))
    (inbox / long_good).write_bytes(good_data)
    (inbox / odd).write_bytes(odd_data)
    (inbox / unsigned).write_bytes(b"claim_id,verdict,reviewer\nc:3,confirm,alice\n")
    lines, problems, refused = ingest_review_inbox.fn(stage(lake, 2).settings(), T0)
    assert len(lines) == 2 and lines[1] == f"{odd}: 1 verdict recorded"
    assert lines[0].startswith(f"{long_good}: 1 verdict recorded, 1 bad row quarantined in ")
    assert problems == [f"{long_good}: line 2: unknown claim id 'c:9'", *refused] and len(refused) == 1
    assert votes(lake) == [("c:1", 1, "alice", "confirm", None), ("c:3", 1, "alice", "reject", None)]
    review = Path(lake.uri) / "review"
    assert list(inbox.iterdir()) == []
    processed = sorted(p.name for p in (review / "processed").iterdir())
    assert processed == sorted([content_name(long_good, good_data), content_name(odd, odd_data)])
    assert content_name(odd, odd_data).startswith("r_ponse_d_alice__1_.") and len(content_name(long_good, good_data)) == 64 + 1 + 12 + 6
    names = sorted(p.name for p in (review / "quarantine").iterdir())
    assert all(len(n) <= 100 and n.isascii() and "\n" not in n for n in names), names
    assert len(names) == 3 and any(n.startswith("a" * 64 + ".") and n.endswith(".bad.jsonl") for n in names)
    (report,) = [n for n in names if n.endswith(".error.txt")]
    assert report.startswith("u" * 64 + ".") and "is not signed" in (review / "quarantine" / report).read_text()


def test_a_fifo_in_the_review_inbox_is_quarantined_at_once_and_the_good_file_recorded(lake: Lake) -> None:
    """Before, the verdict inbox listed regular files only: a FIFO lay there unseen (and one
    read would block the scan forever)."""
    import os
    import threading

    inbox = Path(lake.uri) / "review" / "inbox"
    inbox.mkdir(parents=True)
    os.mkfifo(inbox / "stalled.jsonl")
    (inbox / "alice.jsonl").write_bytes(signed_as(lake, "alice", "alice.jsonl", jsonl(row("c:1"))))
    done: list = []
    scan = threading.Thread(target=lambda: done.append(ingest_review_inbox.fn(stage(lake, 2).settings(), T0)), daemon=True)
    scan.start()
    scan.join(60)
    assert done, "the inbox scan blocked on the FIFO"
    lines, problems, refused = done[0]
    assert lines == ["alice.jsonl: 1 verdict recorded"] and len(refused) == 1 and "stalled.jsonl" in refused[0]
    assert "not a regular file" in refused[0] or "FIFO" in refused[0], refused
    assert list(inbox.iterdir()) == [] and votes(lake) == [("c:1", 1, "alice", "confirm", None)]


# a quarantine that cannot be written


def test_a_quarantine_that_cannot_be_written_costs_no_good_row(lake: Lake) -> None:
    review = Path(lake.uri) / "review"
    review.mkdir()
    (review / "quarantine").write_text("not a folder")  # every quarantine write fails
    data = signed_as(lake, "alice", "alice.jsonl", jsonl(row("c:1"), row("c:9"), row("c:3", "reject")))
    report = ingest_verdict_file(lake, "alice.jsonl", data, T0)
    assert votes(lake) == [("c:1", 1, "alice", "confirm", None), ("c:3", 1, "alice", "reject", None)]
    assert report.quarantine is None and [str(b) for b in report.bad] == ["alice.jsonl: line 2: unknown claim id 'c:9'"]
    assert report.summary() == f"alice.jsonl: 2 verdicts recorded, 1 bad row not quarantined ({report.quarantine_error})"
    assert report.quarantine_error.startswith(f"lake {lake.uri}: cannot write review/quarantine/alice.jsonl.")
    assert ingest_verdict_file(lake, "alice.jsonl", data, T0).already_recorded  # the file is ingested: once


# late votes


def test_a_vote_after_its_deadline_is_recorded_counted_and_reported_late(lake: Lake) -> None:
    on_time = signed_as(lake, "alice", "early.jsonl", jsonl(row("c:1")))
    assert ingest_verdict_file(lake, "early.jsonl", on_time, DEADLINE - timedelta(seconds=1)).summary() == "early.jsonl: 1 verdict recorded"
    late = signed_as(lake, "alice", "late.jsonl", jsonl(row("c:3", "reject", seconds_spent=40)))
    report = ingest_verdict_file(lake, "late.jsonl", late, DEADLINE + timedelta(hours=30))
    assert (report.recorded, report.late) == (1, 1)
    assert report.summary() == "late.jsonl: 1 verdict recorded; 1 late vote (after its deadline, counted)"
    assert votes(lake) == [("c:1", 1, "alice", "confirm", None), ("c:3", 1, "alice", "reject", 40.0)]
    decisions = decide(lake.read("verdicts")).select("claim_id", "decision").sort("claim_id").rows()
    assert decisions == [("c:1", "confirm"), ("c:3", "reject")]  # the late vote decides like any other


def test_a_late_vote_for_a_claim_deferred_again_is_refused_and_one_for_an_open_round_is_late(lake: Lake) -> None:
    """c:2 went back to the pool after bob's deadline and was deferred again (to alice, round 2):
    bob's round is closed. c:1 is still alice's round-1 assignment: late, but it counts."""
    lake.commit("fixture/deferrals/round=2", {"deferrals": deferrals(2, {"c:2": "alice"}, DEADLINE + timedelta(hours=96))})
    now = DEADLINE + timedelta(hours=48)
    bob = ingest_verdict_file(lake, "bob.jsonl", signed_as(lake, "bob", "bob.jsonl", jsonl(row("c:2", reviewer="bob"))), now)
    assert bob.recorded == 0 and bob.late == 0
    assert [b.reason for b in bob.bad] == [
        "wrong round 1: claim 'c:2' returned to the pool after its deadline and was deferred again in round 2"]
    data = jsonl(row("c:1"), row("c:2", "reject"), row("c:3", "abstain"))
    report = ingest_verdict_file(lake, "alice.jsonl", signed_as(lake, "alice", "alice.jsonl", data), now)
    assert (report.recorded, report.late) == (3, 2)  # c:1, c:3 after their round-1 deadline; c:2 in time for round 2
    assert report.summary() == "alice.jsonl: 3 verdicts recorded; 2 late votes (after their deadlines, counted)"


def test_the_inbox_logs_late_votes(lake: Lake) -> None:
    inbox = Path(lake.uri) / "review" / "inbox"
    inbox.mkdir(parents=True)
    (inbox / "alice.jsonl").write_bytes(signed_as(lake, "alice", "alice.jsonl", jsonl(row("c:1"), row("c:9"))))
    lines, problems, _ = ingest_review_inbox.fn(stage(lake, 2).settings(), DEADLINE + timedelta(minutes=1))
    (line,) = lines
    assert line.startswith("alice.jsonl: 1 verdict recorded, 1 bad row quarantined in ")
    assert line.endswith("; 1 late vote (after its deadline, counted)")
    assert problems == ["alice.jsonl: line 2: unknown claim id 'c:9'"]
