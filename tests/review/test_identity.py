"""Reviewers with an identity ("who said so"): keys and signatures (:mod:`grace_core.reviewer_keys`),
the registry (:mod:`flows.reviewers`, ``grace reviewer``), and the attack on every human
channel: bob's name with no key, a wrong key or alice's key, through a file (unsigned, forged,
tampered, revoked, mixed) and the terminal. Each is refused whole in one line with exit code 2
and no vote stored; the good file and the good terminal session are recorded. Keys never reach
the lake, and the SQL catalog and sandbox never show a salt or key hash.

The lake is tests/review/conftest.py's synthetic document with round 1's deferrals written
directly (alice: c:1, c:3; bob: c:2, c:4), so only the inbox flow test needs a Prefect server.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from flows.cli import main
from flows.review import ingest_review_inbox
from flows.reviewers import prove, register, registry, revoke, sign_verdict_file, unregistered, verify_verdict_file
from flows.verdicts import ingest_verdict_file
from grace_core.errors import ReviewerRegistryRefused, UnprovenReviewer
from grace_core.reviewer_keys import key_hash, key_matches, new_key, new_salt, sign, signature_ok, signed, split_signed
from storage.lake import Lake
from tests.review.conftest import T0, build_lake, key_of, signed_as, stage

RUNNER = CliRunner()
ASSIGNED = {"c:1": "alice", "c:2": "bob", "c:3": "alice", "c:4": "bob"}


def assigned_lake(root: str) -> Lake:
    """The synthetic lake with round 1's deferrals: :data:`ASSIGNED`, due 72 hours after T0."""
    lake = build_lake(root)
    n = len(ASSIGNED)
    lake.commit("fixture/deferrals/round=1", {"deferrals": pl.DataFrame({
        "doc_id": ["d1"] * n, "claim_id": list(ASSIGNED), "round": [1] * n, "reviewer": list(ASSIGNED.values()),
        "priority": [1.0] * n, "confidence": [0.0] * n, "cost": [0.07] * n, "gain": [1.0] * n, "rank": list(range(1, n + 1)),
        "deadline": [T0 + timedelta(hours=72)] * n, "created_at": [T0] * n,
    }, schema_overrides={"round": pl.Int32, "rank": pl.Int32})})
    return lake


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return assigned_lake(str(tmp_path / "lake"))


def grace(monkeypatch: pytest.MonkeyPatch, *args: str, input: str = "", env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``grace ARGS`` through its real entry point, with ``input`` on stdin (hidden prompts
    included) and ``env`` set; returns (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["grace", *args])
    with RUNNER.isolation(input=input, env={"GRACE_REVIEWER_KEY": None, **(env or {})}) as (out, err, _):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        return code, out.getvalue().decode(), err.getvalue().decode()


def votes(lake: Lake) -> list[tuple]:
    return sorted(lake.read("verdicts").select("claim_id", "reviewer", "verdict", "channel").rows())


def jsonl(reviewer: str, *answers: tuple[str, str]) -> str:
    return "".join(json.dumps({"claim_id": c, "reviewer": reviewer, "verdict": v}) + "\n" for c, v in answers)


# keys and signatures, pure


def test_key_hash_and_signature_follow_their_formulas() -> None:
    import hashlib
    import hmac

    key, salt = new_key(), new_salt()
    assert key.startswith("grk_") and len(key) == 4 + 43 and new_key() != key
    stored = key_hash(salt, key)
    assert stored == hmac.new(salt.encode(), key.encode(), hashlib.sha256).hexdigest()  # RFC 2104 HMAC-SHA256
    assert key_matches(salt, stored, key) and not key_matches(salt, stored, key + "x") and not key_matches(new_salt(), stored, key)
    payload = b"claim_id,verdict,reviewer\nc:1,confirm,alice\n"
    mac = sign(stored, payload)
    assert mac == hmac.new(stored.encode(), payload, hashlib.sha256).hexdigest()
    assert signature_ok(stored, payload, mac) and not signature_ok(stored, payload + b"c:2,reject,alice\n", mac)


@pytest.mark.parametrize("name, body", [
    ("a.csv", "claim_id,verdict,reviewer\nc:1,confirm,alice\n"),
    ("a.jsonl", '{"claim_id": "c:1", "verdict": "confirm", "reviewer": "alice"}'),  # no final newline: one is added
])
def test_signature_lines_split_off_and_replace(name: str, body: str) -> None:
    stored = key_hash(new_salt(), new_key())
    once = signed(name, body.encode(), "alice", "k1", stored)
    payload, signature = split_signed(name, once)
    assert payload == body.encode().rstrip(b"\n") + b"\n" and once.startswith(payload)
    assert (signature.reviewer, signature.key_id) == ("alice", "k1") and signature_ok(stored, payload, signature.hmac_sha256)
    last = once.decode().splitlines()[-1]
    if name.endswith(".csv"):
        assert last == f"# grace-signature reviewer=alice key=k1 hmac-sha256={signature.hmac_sha256}"
    else:
        assert json.loads(last) == {"grace_signature": {"reviewer": "alice", "key_id": "k1", "hmac_sha256": signature.hmac_sha256}}
    assert signed(name, once, "alice", "k1", stored) == once  # signing again replaces the line
    assert split_signed(name, body.encode()) == (body.encode(), None)
    with pytest.raises(UnprovenReviewer, match="not its last line"):
        split_signed(name, once + b"c:2,reject,alice\n" if name.endswith(".csv") else once + b'{"claim_id": "c:2"}\n')
    if name.endswith(".jsonl"):  # a signature naming two reviewers is malformed, not the last one's
        twice = payload + f'{{"grace_signature": {{"reviewer": "bob", "reviewer": "alice", "key_id": "k1", "hmac_sha256": "{signature.hmac_sha256}"}}}}\n'.encode()
        with pytest.raises(UnprovenReviewer, match="malformed"):
            split_signed(name, twice)


# the registry


def test_register_prove_revoke_and_add_again(lake: Lake) -> None:
    key = register(lake, "alice", T0)
    first = prove(lake, "alice", key)
    with pytest.raises(ReviewerRegistryRefused, match="registered already"):
        register(lake, "alice", T0)
    with pytest.raises(ReviewerRegistryRefused, match="verifier"):
        register(lake, "verifier", T0)
    with pytest.raises(UnprovenReviewer, match="wrong key for reviewer 'alice'"):
        prove(lake, "alice", new_key())
    with pytest.raises(UnprovenReviewer, match="reviewer 'bob' is not registered"):
        prove(lake, "bob", key)
    assert revoke(lake, "alice", T0 + timedelta(hours=1)) == first
    with pytest.raises(UnprovenReviewer, match="revoked"):
        prove(lake, "alice", key)
    with pytest.raises(ReviewerRegistryRefused, match="revoked already"):
        revoke(lake, "alice", T0)
    with pytest.raises(ReviewerRegistryRefused, match="not registered"):
        revoke(lake, "bob", T0)
    again = register(lake, "alice", T0 + timedelta(hours=2))
    second = prove(lake, "alice", again)
    assert second != first
    listed = registry(lake)
    assert listed.columns == ["reviewer", "key_id", "added_at", "revoked_at"]
    assert listed.select("key_id", "revoked_at").rows() == [(first, T0 + timedelta(hours=1)), (second, None)]
    # who of a pool cannot answer their claims (the dispatch warns naming them)
    register(lake, "carol", T0)
    revoke(lake, "carol", T0 + timedelta(hours=1))
    assert unregistered(lake, ["alice", "bob", "carol"]) == ["bob", "carol"]


def test_grace_reviewer_add_prints_the_key_alone_and_list_shows_no_secret(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = grace(monkeypatch, "reviewer", "add", "alice", "--lake", lake.uri)
    assert code == 0 and err == ""
    key = out.splitlines()[-1]
    assert key.startswith("grk_") and key.strip() == key and key not in "\n".join(out.splitlines()[:-1])
    assert prove(lake, "alice", key)
    stored = lake.read("reviewers").row(0, named=True)
    code, out, _ = grace(monkeypatch, "reviewer", "list", "--lake", lake.uri, "--format", "csv")
    assert code == 0 and out.splitlines()[0] == "reviewer,key_id,added_at,revoked_at" and out.count("alice") == 1
    assert key not in out and stored["salt"] not in out and stored["key_hash"] not in out
    code, _, err = grace(monkeypatch, "reviewer", "add", "alice", "--lake", lake.uri)
    assert code == 2 and err.count("\n") == 1 and "registered already" in err
    code, out, _ = grace(monkeypatch, "reviewer", "revoke", "alice", "--lake", lake.uri)
    assert code == 0 and "revoked" in out
    code, _, err = grace(monkeypatch, "reviewer", "revoke", "alice", "--lake", lake.uri)
    assert code == 2 and "revoked already" in err


# the attack, through files


def forged(lake: Lake, name: str, body: str, reviewer: str, key_id: str, key: str) -> bytes:
    """``body`` signed in ``reviewer``'s name with their ``key_id`` but with ``key`` (not theirs)."""
    return signed(name, body.encode(), reviewer, key_id, key_hash(new_salt(), key))


def attacks(lake: Lake) -> dict[str, tuple[str, bytes, str]]:
    """name → (file name, content, what the refusal says) of every file attack on bob's claims."""
    alice, bob = key_of(lake, "alice"), key_of(lake, "bob")
    bob_id = prove(lake, "bob", bob)
    body = jsonl("bob", ("c:2", "confirm"), ("c:4", "confirm"))
    good = signed_as(lake, "bob", "bob.jsonl", body)
    alice_hash = key_hash(lake.read("reviewers").filter(pl.col("reviewer") == "alice")["salt"][0], alice)
    return {
        "unsigned": ("bob.jsonl", body.encode(), "not signed"),
        "wrong key": ("bob.jsonl", forged(lake, "bob.jsonl", body, "bob", bob_id, new_key()), "does not match"),
        "alice's key in bob's name": ("bob.jsonl", forged(lake, "bob.jsonl", body, "bob", bob_id, alice), "does not match"),
        "alice signs bob's rows": ("bob.jsonl", signed("bob.jsonl", body.encode(), "alice", prove(lake, "alice", alice), alice_hash),
                                   "is a vote of 'bob', but only 'alice' was proven"),
        "tampered": ("bob.jsonl", good.replace(b'"c:4", "reviewer": "bob", "verdict": "confirm"', b'"c:4", "reviewer": "bob", "verdict": "reject"'),
                     "does not match"),
        "row added after signing": ("bob.jsonl", good + jsonl("bob", ("c:2", "reject")).encode(), "not its last line"),
        "unknown signer": ("bob.jsonl", forged(lake, "bob.jsonl", jsonl("mallory", ("c:2", "confirm")), "mallory", bob_id, bob),
                           "reviewer 'mallory' is not registered"),
        "csv unsigned": ("bob.csv", b"claim_id,verdict,reviewer\nc:2,confirm,bob\n", "not signed"),
    }


def test_every_forged_file_is_refused_whole_in_one_line(lake: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for what, (name, data, says) in attacks(lake).items():
        path = tmp_path / what.replace(" ", "-").replace("'", "") / name
        path.parent.mkdir()
        path.write_bytes(data)
        code, out, err = grace(monkeypatch, "review", "ingest", str(path), "--lake", lake.uri)
        assert code == 2 and out == "" and err.count("\n") == 1, (what, out, err)
        assert err.startswith(f"grace: error: {name}: refused, nothing recorded: ") and says in err, (what, err)
        assert votes(lake) == [], what
    assert not (Path(lake.uri) / "review" / "quarantine").exists()  # nothing of a refused file is kept as rows


def test_a_signed_file_is_recorded_then_refused_once_its_key_is_revoked(lake: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bob.csv"
    path.write_text("claim_id,verdict,reviewer,note\nc:2,confirm,bob,in the abstract\nc:4,,bob,\n")
    bob, _ = key_of(lake, "bob"), key_of(lake, "alice")
    code, _, err = grace(monkeypatch, "review", "sign", str(path), "--reviewer", "alice", "--lake", lake.uri, env={"GRACE_REVIEWER_KEY": bob})
    assert code == 2 and "wrong key for reviewer 'alice'" in err and bob not in err
    code, _, err = grace(monkeypatch, "review", "sign", str(path), "--reviewer", "bob", "--lake", lake.uri, input=f"{key_of(lake, 'alice')}\n")
    assert code == 2 and "wrong key for reviewer 'bob'" in err and "# grace-signature" not in path.read_text()  # left unchanged
    code, out, err = grace(monkeypatch, "review", "sign", str(path), "--reviewer", "bob", "--lake", lake.uri, input=f"{bob}\n")
    assert code == 0 and "signed by bob (1 verdict)" in out, err
    signed_text = path.read_text()
    code, out, err = grace(monkeypatch, "review", "ingest", str(path), "--lake", lake.uri)
    assert code == 0 and "bob.csv: 1 verdict recorded, 1 unanswered row skipped" in out, err
    assert votes(lake) == [("c:2", "bob", "confirm", "file")]
    # a second file of bob's, signed before his key was revoked, is refused after
    later = tmp_path / "later.jsonl"
    later.write_bytes(signed_as(lake, "bob", "later.jsonl", jsonl("bob", ("c:4", "reject"))))
    revoke(lake, "bob", T0 + timedelta(hours=1))
    code, _, err = grace(monkeypatch, "review", "ingest", str(later), "--lake", lake.uri)
    assert code == 2 and "later.jsonl: refused, nothing recorded: the key of reviewer 'bob' was revoked" in err
    assert votes(lake) == [("c:2", "bob", "confirm", "file")] and path.read_text() == signed_text
    # mixed rows cannot be signed either
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(jsonl("alice", ("c:1", "confirm")) + jsonl("bob", ("c:2", "reject")))
    code, _, err = grace(monkeypatch, "review", "sign", str(mixed), "--reviewer", "alice", "--lake", lake.uri, input=f"{key_of(lake, 'alice')}\n")
    assert code == 2 and "line 2 is a vote of 'bob', not of 'alice'" in err


def test_the_review_inbox_quarantines_refused_files_and_records_the_others(lake: Lake) -> None:
    inbox = Path(lake.uri) / "review" / "inbox"
    inbox.mkdir(parents=True)
    for what, (name, data, _) in attacks(lake).items():
        (inbox / f"{what.replace(' ', '-').replace(chr(39), '')}-{name}").write_bytes(data)
    (inbox / "alice.jsonl").write_bytes(signed_as(lake, "alice", "alice.jsonl", jsonl("alice", ("c:1", "confirm"), ("c:3", "reject"))))
    lines, problems, refused = ingest_review_inbox.fn(stage(lake, 2).settings(), T0)
    assert lines == ["alice.jsonl: 2 verdicts recorded"]
    assert len(refused) == len(attacks(lake)) and problems == refused
    assert all(": quarantined: refused, nothing recorded: " in line for line in refused)
    assert votes(lake) == [("c:1", "alice", "confirm", "file"), ("c:3", "alice", "reject", "file")]
    quarantine = Path(lake.uri) / "review" / "quarantine"
    reports = sorted(quarantine.glob("*.error.txt"))
    assert len(reports) == len(attacks(lake)) and all("refused, nothing recorded" in r.read_text() for r in reports)
    assert list(inbox.iterdir()) == []


# the attack, through the terminal


def test_the_terminal_proves_the_reviewer_before_showing_anything(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    alice, bob = key_of(lake, "alice"), key_of(lake, "bob")
    register(lake, "carol", T0)
    revoke(lake, "carol", T0)
    session = ["review", "--reviewer", "bob", "--lake", lake.uri]
    for what, given, says in [
        ("no key", "\n", "wrong key for reviewer 'bob'"), ("a wrong key", f"{new_key()}\n", "wrong key for reviewer 'bob'"),
        ("alice's key", f"{alice}\n", "wrong key for reviewer 'bob'"),
    ]:
        code, out, err = grace(monkeypatch, *session, input=f"{given}c\n\nc\n\n")
        assert code == 2 and err.count("\n") == 1 and says in err, (what, err)
        assert "waiting" not in out and "claim c:" not in out and alice not in out + err, what
    code, out, err = grace(monkeypatch, "review", "-r", "carol", "--lake", lake.uri, input=f"{alice}\n")
    assert code == 2 and "the key of reviewer 'carol' was revoked" in err
    code, out, err = grace(monkeypatch, "review", "-r", "mallory", "--lake", lake.uri, env={"GRACE_REVIEWER_KEY": bob})
    assert code == 2 and "reviewer 'mallory' is not registered" in err and bob not in out + err
    assert votes(lake) == []
    # bob with his own key, typed or from the environment
    code, out, err = grace(monkeypatch, *session, input=f"{bob}\nc\n\nq\n")
    assert code == 0 and "2 claims waiting for bob" in out and "bob: 1 recorded" in out, err
    code, out, err = grace(monkeypatch, *session, env={"GRACE_REVIEWER_KEY": bob}, input="r\nno source\n")
    assert code == 0 and "bob: 1 recorded" in out, err
    assert votes(lake) == [("c:2", "bob", "confirm", "terminal"), ("c:4", "bob", "reject", "terminal")]
    revoke(lake, "bob", T0)
    code, out, err = grace(monkeypatch, *session, input=f"{bob}\n")
    assert code == 2 and "the key of reviewer 'bob' was revoked" in err


def test_a_valid_signature_over_another_reviewers_rows_is_refused(lake: Lake) -> None:
    alice = key_of(lake, "alice")
    salt = lake.read("reviewers").filter(pl.col("reviewer") == "alice")["salt"][0]
    mixed = signed("x.jsonl", (jsonl("bob", ("c:2", "confirm")) + jsonl("alice", ("c:1", "confirm"))).encode(), "alice",
                   prove(lake, "alice", alice), key_hash(salt, alice))
    assert verify_verdict_file(lake, "x.jsonl", mixed)[0] == "alice"  # the signature holds: the author check refuses
    with pytest.raises(UnprovenReviewer, match="line 1 is a vote of 'bob', but only 'alice' was proven"):
        ingest_verdict_file(lake, "x.jsonl", mixed, T0)
    assert votes(lake) == []
    with pytest.raises(UnprovenReviewer):
        sign_verdict_file(lake, "x.jsonl", mixed, "alice", alice)


# keys never reach the lake; salts and hashes never reach SQL


def test_no_key_in_the_lake_and_no_hash_outside_its_table(lake: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = grace(monkeypatch, "reviewer", "add", "alice", "--lake", lake.uri)
    alice = out.splitlines()[-1]
    path = tmp_path / "alice.jsonl"
    path.write_text(jsonl("alice", ("c:1", "confirm")))
    assert grace(monkeypatch, "review", "sign", str(path), "-r", "alice", "--lake", lake.uri, input=f"{alice}\n")[0] == 0
    assert grace(monkeypatch, "review", "ingest", str(path), "--lake", lake.uri)[0] == 0
    assert grace(monkeypatch, "review", "-r", "alice", "--lake", lake.uri, env={"GRACE_REVIEWER_KEY": alice}, input="r\n\n")[0] == 0
    inbox = Path(lake.uri) / "review" / "inbox"
    inbox.mkdir(parents=True)
    (inbox / "forged.jsonl").write_bytes(forged(lake, "forged.jsonl", jsonl("alice", ("c:3", "reject")), "alice", "x", alice))
    ingest_review_inbox.fn(stage(lake, 2).settings(), T0)
    code, out, _ = grace(monkeypatch, "sql", "SELECT * FROM reviewers", "--lake", lake.uri, "--format", "csv")
    assert code == 0 and out.splitlines()[0] == "reviewer,key_id,event,at"
    assert votes(lake) == [("c:1", "alice", "confirm", "file"), ("c:3", "alice", "reject", "terminal")]
    stored = lake.read("reviewers").row(0, named=True)
    private = Path(lake.uri) / "tables" / "reviewers"
    assert any(stored["key_hash"].encode() in f.read_bytes() for f in private.rglob("*") if f.is_file())  # the search can find it
    for f in Path(lake.uri).rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert alice.encode() not in data, f
            if private not in f.parents:
                assert stored["key_hash"].encode() not in data and stored["salt"].encode() not in data, f


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_parquet('{lake}/tables/reviewers/**/*.parquet')",
    "SELECT * FROM read_parquet('{lake}/tables/reviewers/*.parquet')",
    "SELECT * FROM read_text('{lake}/tables/reviewers/_delta_log/*.json')",
    "SELECT * FROM read_parquet('{lake}/tables/edges/../reviewers/*.parquet')",
    "SELECT salt FROM reviewers",
    "SELECT key_hash FROM reviewers",
])
def test_the_sql_sandbox_never_reads_the_reviewers_files(lake: Lake, monkeypatch: pytest.MonkeyPatch, sql: str) -> None:
    register(lake, "alice", T0)
    code, out, err = grace(monkeypatch, "sql", sql.format(lake=lake.uri), "--lake", lake.uri)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    code, out, _ = grace(monkeypatch, "sql", f"SELECT count(*) AS n FROM read_parquet('{lake.uri}/tables/edges/**/*.parquet')",
                         "--lake", lake.uri, "--format", "csv")
    assert code == 0 and out == "n\n8\n"  # the other tables' files stay readable


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.usefixtures("prefect_server")
def test_a_refused_inbox_file_fails_the_verdicts_run_but_not_the_round_around_it(lake: Lake) -> None:
    from prefect import flow

    from flows.review import ingest_verdicts

    inbox = Path(lake.uri) / "review" / "inbox"
    inbox.mkdir(parents=True)
    (inbox / "bob.jsonl").write_text(jsonl("bob", ("c:2", "confirm")))
    (inbox / "alice.jsonl").write_bytes(signed_as(lake, "alice", "alice.jsonl", jsonl("alice", ("c:1", "confirm"))))
    state = ingest_verdicts(stage(lake, 2), return_state=True)
    assert state.is_failed() and "1 verdict file(s) refused whole" in state.message and "bob.jsonl: quarantined" in state.message
    assert votes(lake) == [("c:1", "alice", "confirm", "file")]  # the good file was recorded first

    @flow
    def nightly() -> list[str]:  # as the expansion round calls it: a sub-flow
        return ingest_verdicts(stage(lake, 2))

    (inbox / "bob.jsonl").write_text(jsonl("bob", ("c:4", "confirm")))
    lines = nightly()
    assert any(line.startswith("bob.jsonl: quarantined: refused, nothing recorded: the file is not signed") for line in lines)
