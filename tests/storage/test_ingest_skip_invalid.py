"""`grace ingest` on real data as it comes: every shape of the official files ingests whole;
a batch with unusable lines is refused whole by default, and with --skip-invalid the usable
lines are ingested, the others named on stderr and listed beside the batch (or in the
temporary folder when the batch's folder is read-only), exit code 1."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import boto3
import pytest

from storage.config import LakeConfig
from storage.ingest import ingest_batch
from storage.lake import Lake
from tests.real_shapes import UNUSABLE, jsonl, qasper_lines, quality_lines
from tests.storage.conftest import make_bucket
from tests.storage.test_cli import run


def stored_ids(lake: Path) -> list[str]:
    return sorted(Lake.open(LakeConfig(lake=str(lake))).read("documents")["doc_id"].to_list())


def test_every_shape_of_the_official_files_ingests(monkeypatch, capsys, tmp_path: Path) -> None:
    path = tmp_path / "shapes.jsonl"
    path.write_bytes(jsonl([*qasper_lines(), *quality_lines()]))
    code, out, err = run(monkeypatch, capsys, "ingest", str(path), "--lake", str(tmp_path / "lake"))
    assert (code, err) == (0, ""), err
    assert "ingested 11 new documents" in out  # 6 papers, 5 articles (one article is on two lines)
    again = run(monkeypatch, capsys, "ingest", str(path), "--lake", str(tmp_path / "lake"))
    assert again[0] == 0 and "already ingested" in again[1]


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """Two good lines around the unusable ones (lines 2–4)."""
    path = tmp_path / "inbox" / "mixed.jsonl"
    path.parent.mkdir()
    path.write_bytes(jsonl([qasper_lines()[0], *(line for line, _ in UNUSABLE), quality_lines()[0]]))
    return path


def test_all_or_nothing_by_default(monkeypatch, capsys, mixed: Path, tmp_path: Path) -> None:
    code, out, err = run(monkeypatch, capsys, "ingest", str(mixed), "--lake", str(tmp_path / "lake"))
    assert code == 2 and out == ""
    assert err.strip().splitlines() == ["grace: error: mixed.jsonl: line 2: not valid JSON (Expecting value at column 1)"]
    assert not (tmp_path / "lake").exists() and not (mixed.parent / "mixed.invalid.ndjson").exists()


def test_skip_invalid_ingests_the_rest_and_reports_each_bad_line(monkeypatch, capsys, mixed: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    code, out, err = run(monkeypatch, capsys, "ingest", str(mixed), "--lake", str(lake), "--skip-invalid")
    assert code == 1
    assert "ingested 2 new documents" in out and "3 invalid lines skipped" in out
    report = mixed.parent / "mixed.invalid.ndjson"
    lines = err.strip().splitlines()
    assert lines[:3] == [f"grace: skipped mixed.jsonl: line {k}: {m}" for k, m in
                         ((2, "not valid JSON (Expecting value at column 1)"), (3, "field 'title': missing"),
                          (4, "field 'id': id contains '/' (allowed: ASCII letters, digits and . _ : @ + -)"))]
    assert lines[3] == f"grace: every invalid line is listed in {report}"
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    assert [(r["file"], r["line"], r["doc_id"], r["field"]) for r in rows] == [
        (str(mixed), 2, None, None), (str(mixed), 3, "u2", "title"), (str(mixed), 4, None, "id")]
    assert all(r["message"].startswith(f"mixed.jsonl: line {r['line']}: ") and r["reason"] in r["message"] for r in rows)
    ids = stored_ids(lake)
    assert len(ids) == 2 and "2101.00001" in ids
    # a re-run stores nothing new and reports the same lines again
    code, out, err = run(monkeypatch, capsys, "ingest", str(mixed), "--lake", str(lake), "--skip-invalid")
    assert code == 1 and "already ingested" in out and "3 invalid lines skipped" in out and stored_ids(lake) == ids


def test_a_document_stored_with_other_content_is_skipped_too(tmp_path: Path) -> None:
    lake = Lake.open(LakeConfig(lake=str(tmp_path / "lake")))
    ingest_batch(lake, jsonl([{"id": "a", "title": "A", "text": "First."}]), "one.jsonl")
    data = jsonl([{"id": "a", "title": "A", "text": "Changed."}, {"id": "b", "title": "B", "text": "New."}])
    report = ingest_batch(lake, data, "two.jsonl", skip_invalid=True)
    assert (report.n_new_documents, [(s.line, s.doc_id, s.field) for s in report.skipped]) == (1, [(1, "a", "id")])
    assert "already stored with different content" in report.skipped[0].reason
    nothing = ingest_batch(lake, jsonl([{"id": "a", "title": "A", "text": "Other."}]), "three.jsonl", skip_invalid=True)
    assert (nothing.n_documents, len(nothing.skipped)) == (0, 1) and "nothing ingested" in nothing.summary()
    assert sorted(lake.read("documents")["doc_id"]) == ["a", "b"]


def test_an_unwritable_batch_folder_sends_the_report_to_the_temporary_folder(monkeypatch, capsys, mixed: Path,
                                                                             tmp_path: Path) -> None:
    """The report cannot be written beside the batch (its name is taken by a folder: the same
    failure as a read-only folder, also for root): it goes to the temporary folder, and the
    terminal says so."""
    (mixed.parent / "mixed.invalid.ndjson").mkdir()
    elsewhere = tmp_path / "tmp"
    elsewhere.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(elsewhere))
    code, _, err = run(monkeypatch, capsys, "ingest", str(mixed), "--lake", str(tmp_path / "lake"), "--skip-invalid")
    assert code == 1
    fallback = elsewhere / "mixed.invalid.ndjson"
    assert f"grace: every invalid line is listed in {fallback} (not beside the batch: cannot write mixed.invalid.ndjson" in err
    assert [json.loads(line)["line"] for line in fallback.read_text().splitlines()] == [2, 3, 4]


def test_skip_invalid_on_s3_writes_the_report_beside_the_batch(monkeypatch, capsys, s3_endpoint: str, tmp_path: Path) -> None:
    bucket = make_bucket(s3_endpoint)
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    s3.put_object(Bucket=bucket, Key="inbox/mixed.jsonl", Body=jsonl([qasper_lines()[0], UNUSABLE[1][0]]))
    monkeypatch.setenv("GRACE_S3_ENDPOINT_URL", s3_endpoint)
    code, out, err = run(monkeypatch, capsys, "ingest", f"s3://{bucket}/inbox/mixed.jsonl", "--lake", str(tmp_path / "lake"),
                         "--skip-invalid")
    assert code == 1 and "ingested 1 new documents" in out
    assert f"listed in s3://{bucket}/inbox/mixed.invalid.ndjson" in err
    body = s3.get_object(Bucket=bucket, Key="inbox/mixed.invalid.ndjson")["Body"].read()
    assert json.loads(body)["field"] == "title"
