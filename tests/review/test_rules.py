"""Pure review rules: the reviewer pool, assignment with overlap, expected review seconds, open
assignments and deadlines, and the parsing and checking of returned verdict rows (every
bad-input case with its file, line and reason)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from flows.settings import build_settings
from grace_core.assignment import (
    assign_reviewers, busy_claims, expected_review_seconds, mean_review_seconds, open_assignments,
)
from grace_core.errors import InvalidSettings
from grace_core.settings_groups import VERIFIER, ReviewConfig
from grace_core.verdict_files import InvalidVerdictFile, check_verdicts, parse_verdict_file

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)


def test_the_default_pool_is_the_verifier_alone_and_names_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_settings().pool == (VERIFIER,)
    monkeypatch.setenv("GRACE_REVIEWERS", '["alice", "bob"]')
    monkeypatch.setenv("GRACE_USE_VERIFIER", "false")
    assert build_settings().pool == ("alice", "bob")
    assert ReviewConfig(reviewers=("alice",)).pool == ("alice", VERIFIER)
    with pytest.raises(InvalidSettings, match="reviewer name 'a/b'"):
        ReviewConfig(reviewers=("a/b",))
    with pytest.raises(InvalidSettings, match="set use_verifier instead"):
        ReviewConfig(reviewers=("verifier",))
    with pytest.raises(InvalidSettings, match="listed twice: bob"):
        ReviewConfig(reviewers=("bob", "ann", "bob"))


def chosen(*ids: str) -> pl.DataFrame:
    """Selected claims of document d, in selection order."""
    return pl.DataFrame({"doc_id": ["d"] * len(ids), "claim_id": list(ids), "rank": list(range(1, len(ids) + 1))})


def pairs(df: pl.DataFrame) -> list[tuple[str, str]]:
    """(claim, reviewer) of each assignment row, in order."""
    return list(df.select("claim_id", "reviewer").iter_rows())


def test_assignment_gives_each_claim_overlap_reviewers_in_rotation() -> None:
    got = assign_reviewers(chosen("x", "y", "z"), ["a", "b", "c"], overlap=2, round_id=1)
    assert pairs(got) == [("x", "a"), ("x", "b"), ("y", "b"), ("y", "c"), ("z", "c"), ("z", "a")]
    assert got["reviewer"].value_counts()["count"].to_list() == [2, 2, 2]  # even load
    assert got["rank"].to_list() == [1, 1, 2, 2, 3, 3]  # selection columns kept, in selection order
    # the next round starts further along the pool, so the top claim goes to someone else
    assert pairs(assign_reviewers(chosen("x"), ["a", "b", "c"], overlap=2, round_id=2)) == [("x", "c"), ("x", "b")]
    # overlap above the pool size: everyone, once
    assert pairs(assign_reviewers(chosen("x"), ["a", "b"], overlap=5, round_id=1)) == [("x", "a"), ("x", "b")]
    assert assign_reviewers(chosen("x", "y"), ["a", "b"], 1, 3).equals(assign_reviewers(chosen("x", "y"), ["a", "b"], 1, 3))


@pytest.mark.parametrize("pool_size", [3, 4, 5, 6])
@pytest.mark.parametrize("overlap", [2, 3])
def test_every_pair_of_reviewers_shares_claims_within_pool_size_rounds(pool_size: int, overlap: int) -> None:
    # the old round robin started every claim at a multiple of k: with four reviewers and overlap 2
    # the pairs were always {a, b} and {c, d}, so reliability could never compare a with c
    pool = [f"r{j}" for j in range(pool_size)]
    met: set[frozenset[str]] = set()
    for round_id in range(1, pool_size + 1):
        got = assign_reviewers(chosen(*(f"c{i}" for i in range(pool_size))), pool, overlap=overlap, round_id=round_id)
        loads = got["reviewer"].value_counts()["count"]
        assert loads.max() - loads.min() <= 1  # the load stays even
        for _, group in got.group_by("claim_id"):
            names = sorted(group["reviewer"])
            assert len(set(names)) == min(overlap, pool_size)
            met |= {frozenset((p, q)) for i, p in enumerate(names) for q in names[i + 1:]}
    assert met == {frozenset((p, q)) for i, p in enumerate(pool) for q in pool[i + 1:]}


def test_assignment_prefers_reviewers_who_have_not_voted_on_the_claim() -> None:
    voted = pl.DataFrame({"doc_id": ["d", "d"], "claim_id": ["x", "x"], "reviewer": ["a", "b"]})
    assert pairs(assign_reviewers(chosen("x"), ["a", "b", "c"], overlap=2, round_id=1, answered=voted)) == [("x", "c"), ("x", "a")]
    with pytest.raises(InvalidSettings, match="no reviewers"):
        assign_reviewers(chosen("x"), [], overlap=1, round_id=1)


def test_expected_seconds_come_from_the_human_pools_history() -> None:
    history = pl.DataFrame({
        "reviewer": ["alice", "alice", "bob", "bob", VERIFIER, "carol"],
        "seconds_spent": [10.0, 20.0, 60.0, None, None, 500.0],
    })
    assert mean_review_seconds(history, ["alice", "bob"], default=30.0) == pytest.approx(30.0)  # (10+20+60)/3
    assert mean_review_seconds(history, ["dave"], default=30.0) == 30.0  # no history: the default
    poisoned = pl.concat([history, pl.DataFrame({"reviewer": ["alice"], "seconds_spent": [1e308]})])
    assert mean_review_seconds(poisoned, ["alice", "bob"], default=30.0) == pytest.approx(30.0)  # stored before the 24 h bound: left out
    # t(c) = mean × expected human reviewers per claim
    assert expected_review_seconds(["alice", "bob", VERIFIER], overlap=1, mean_seconds=30.0) == pytest.approx(20.0)
    assert expected_review_seconds(["alice", "bob", VERIFIER], overlap=3, mean_seconds=30.0) == pytest.approx(60.0)
    assert expected_review_seconds(["alice", "bob"], overlap=2, mean_seconds=30.0) == pytest.approx(60.0)
    assert expected_review_seconds([VERIFIER], overlap=1, mean_seconds=30.0) == 0.0
    with pytest.raises(InvalidSettings, match="no reviewers"):
        expected_review_seconds([], overlap=1, mean_seconds=30.0)


def deferral(claim: str, rnd: int, reviewer: str, deadline: datetime | None) -> dict:
    """One deferral row of document d."""
    return {"doc_id": "d", "claim_id": claim, "round": rnd, "reviewer": reviewer, "deadline": deadline, "rank": 1}


def test_open_assignments_close_on_answer_or_redeferral_and_turn_overdue_at_the_deadline() -> None:
    deferrals = pl.DataFrame([
        deferral("x", 1, "alice", NOW + timedelta(hours=1)), deferral("x", 1, "bob", NOW + timedelta(hours=1)),
        deferral("y", 1, "alice", NOW - timedelta(hours=1)),  # overdue
        deferral("z", 1, "alice", NOW - timedelta(hours=5)), deferral("z", 2, "bob", NOW + timedelta(hours=9)),  # deferred again
        deferral("w", 1, VERIFIER, NOW),  # the verifier's: due at once
    ], schema_overrides={"deadline": pl.Datetime("us", "UTC")})
    verdicts = pl.DataFrame([{"doc_id": "d", "claim_id": "x", "round": 1, "reviewer": "bob"}])
    got = open_assignments(deferrals, verdicts, NOW).sort("claim_id", "reviewer")
    assert got.select("claim_id", "round", "reviewer", "overdue").rows() == [
        ("w", 1, VERIFIER, True), ("x", 1, "alice", False), ("y", 1, "alice", True), ("z", 2, "bob", False),
    ]
    assert sorted(busy_claims(got)["claim_id"]) == ["x", "z"]  # overdue claims are back in the pool


STATE = dict(
    claims=pl.DataFrame({"doc_id": ["d", "d", "d"], "claim_id": ["x", "y", "z"]}),
    deferrals=pl.DataFrame({
        "doc_id": ["d"] * 5, "claim_id": ["x", "x", "y", "z", "z"], "round": [2, 2, 2, 1, 3],
        "reviewer": ["alice", "bob", "alice", "alice", "bob"],
    }),
    verdicts=pl.DataFrame({"doc_id": ["d"], "claim_id": ["y"], "round": [2], "reviewer": ["alice"]}),
)


def test_every_bad_row_of_a_csv_file_is_reported_with_its_line_and_reason() -> None:
    text = (
        "round,doc_id,claim_id,reviewer,claim,verdict,seconds_spent,note\n"     # 1 header (a returned packet)
        '2,d,x,alice,"The parser, trained",confirm,12.5,fine\n'              # 2 good
        "2,d,x,bob,text,Reject,8,\n"                                        # 3 good (case is ignored)
        "2,d,x,alice,text,reject,3,\n"                                      # 4 duplicate of line 2
        "2,d,nope,alice,text,confirm,3,\n"                                  # 5 unknown claim id
        "2,d,x,carol,text,confirm,3,\n"                                     # 6 not assigned to carol
        "2,d,x,bob,text,maybe,3,\n"                                         # 7 invalid verdict
        "5,d,x,bob,text,confirm,3,\n"                                       # 8 wrong round
        "1,d,z,alice,text,confirm,3,\n"                                     # 9 round closed: deferred again in round 3
        "2,d,y,alice,text,reject,3,\n"                                      # 10 already answered
        "2,d,x,bob,text,confirm\n"                                          # 11 malformed: too few fields
        "2,d,x,bob,text,confirm,soon,\n"                                    # 12 malformed seconds
        "2,d,y,alice,text,,,\n"                                             # 13 unanswered: skipped, not bad
        "3,e,z,bob,text,confirm,1,\n"                                       # 14 claim not in that document
        '3,d,z,bob,"a note\nover two lines",abstain,4,"ok"\n'              # 15 good (a quoted field spans lines 15-16)
    )
    parsed = parse_verdict_file("alice.csv", text.encode())
    good, bad = check_verdicts(parsed.rows, **STATE)
    bad = sorted([*parsed.bad, *bad], key=lambda b: b.line)
    assert [(b.line, b.reason) for b in bad] == [
        (4, "duplicate of line 2 (same claim, reviewer and round)"),
        (5, "unknown claim id 'nope'"),
        (6, "claim 'x' is not assigned to reviewer 'carol'"),
        (7, "invalid verdict 'maybe' (expected confirm, reject, abstain)"),
        (8, "wrong round 5: claim 'x' was assigned to 'bob' in round 2"),
        (9, "wrong round 1: claim 'z' returned to the pool after its deadline and was deferred again in round 3"),
        (10, "claim 'y' was already answered by 'alice' in round 2 (stored verdicts never change)"),
        (11, "malformed line: 6 fields where the header has 8"),
        (12, "seconds_spent must be a number of seconds, got 'soon'"),
        (14, "unknown claim id 'z' in document 'e' (it belongs to 'd')"),
    ]
    assert all(b.file == "alice.csv" for b in bad) and bad[0].raw == "2,d,x,alice,text,reject,3,"
    assert str(bad[0]) == "alice.csv: line 4: duplicate of line 2 (same claim, reviewer and round)"
    assert parsed.unanswered == 1
    assert good.rows() == [
        ("d", "x", 2, "alice", "confirm", 12.5, "fine"), ("d", "x", 2, "bob", "reject", 8.0, None),
        ("d", "z", 3, "bob", "abstain", 4.0, "ok"),
    ]


def test_jsonl_rows_without_round_answer_the_latest_assignment_and_bad_lines_are_reported() -> None:
    lines = [
        '{"claim_id": "x", "verdict": "confirm", "reviewer": "bob", "seconds_spent": 3}',   # 1 good, round 2
        '{"claim_id": "z", "verdict": "reject", "reviewer": "bob"}',                       # 2 good, round 3
        '{"claim_id": "z", "verdict": "reject", "reviewer": "alice"}',                     # 3 alice's round 1 is closed
        "{not json",                                                                       # 4 malformed
        '["x", "confirm"]',                                                                # 5 not an object
        '{"claim_id": "x", "verdict": "confirm"}',                                         # 6 no reviewer
        '{"claim_id": "x", "verdict": "confirm", "reviewer": "bob", "round": 0}',         # 7 bad round
        '{"claim_id": "x", "verdict": "confirm", "reviewer": "bob", "seconds_spent": -1}',  # 8 negative seconds
        '{"claim_id": 7, "verdict": "confirm", "reviewer": "bob"}',                        # 9 id not text
        "",                                                                                # 10 blank: ignored
    ]
    data = "\n".join(lines).encode() + b'\n{"claim_id": "x", "verdict": "confirm", "reviewer": "b\xffob"}\n'  # 11 not UTF-8
    parsed = parse_verdict_file("bob.jsonl", data)
    good, bad = check_verdicts(parsed.rows, **STATE)
    assert good.select("claim_id", "round", "reviewer", "verdict", "seconds_spent").rows() == [
        ("x", 2, "bob", "confirm", 3.0), ("z", 3, "bob", "reject", None),
    ]
    reasons = {b.line: b.reason for b in [*parsed.bad, *bad]}
    assert reasons == {
        3: "wrong round 1: claim 'z' returned to the pool after its deadline and was deferred again in round 3",
        4: "malformed line: not valid JSON (Expecting property name enclosed in double quotes at column 2)",
        5: "malformed line: not a JSON object",
        6: "no reviewer",
        7: "round must be a positive whole number, got 0",
        8: "seconds_spent must be a non-negative number of seconds, got -1",
        9: "claim_id must be text, got 7",
        11: "malformed line: not UTF-8 text",
    }


def test_a_file_without_required_columns_or_of_another_kind_is_refused() -> None:
    parsed = parse_verdict_file("a.csv", b"claim_id,decision,reviewer\nx,confirm,bob\n\ny,reject,bob\n")
    assert [(b.line, b.reason) for b in parsed.bad] == [
        (2, "the header has no column verdict (needs claim_id, verdict, reviewer)"),
        (4, "the header has no column verdict (needs claim_id, verdict, reviewer)"),
    ]
    assert parsed.rows == []
    with pytest.raises(InvalidVerdictFile, match="a.xlsx: not a verdict file"):
        parse_verdict_file("a.xlsx", b"whatever")
