"""`grace ingest` and `grace sql`: output formats, read-only refusals, one-line errors, S3 via settings."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from flows.cli import main
from storage.config import LakeConfig
from tests.storage.conftest import make_bucket
from tests.grace_cli import run_grace

REPO = Path(__file__).resolve().parents[2]
DOCS = [
    {"id": "a", "title": "A", "text": "Alpha.", "questions": [{"id": "qa", "question": "Which?", "options": ["x", "y"]}]},
    {"id": "b", "title": "B", "text": "Beta, with a comma."},
]


run = run_grace


@pytest.fixture
def batch(tmp_path: Path) -> Path:
    path = tmp_path / "batch.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return path


@pytest.fixture(scope="module")
def filled_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:data:`DOCS` ingested once by ``grace ingest`` for the module; :func:`filled` copies it."""
    base = tmp_path_factory.mktemp("filled")
    path = base / "batch.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["grace", "ingest", str(path), "--lake", str(base / "lake")])
        try:
            main()
        except SystemExit as exc:
            assert exc.code in (0, None), f"grace ingest exited {exc.code}"
    assert (base / "lake" / "tables" / "documents").is_dir()
    return base / "lake"


@pytest.fixture
def filled(filled_template: Path, tmp_path: Path) -> Path:
    """A lake of this test's own holding :data:`DOCS`: a copy of :func:`filled_template` (its
    catalog, which names the template's files, is rebuilt by the first query that finds it moved)."""
    return Path(shutil.copytree(filled_template, tmp_path / "lake", symlinks=True))


def test_ingest_reports_once_then_changes_nothing(tmp_path: Path, batch: Path, monkeypatch, capsys) -> None:
    lake = tmp_path / "lake"
    code, out, err = run(monkeypatch, capsys, "ingest", str(batch), "--lake", str(lake))
    assert (code, err) == (0, "")
    assert out.startswith("batch.jsonl: batch ") and "ingested 2 new documents, 2 priors, 1 questions" in out
    versions = sorted((lake / "tables").glob("*/_delta_log/*.json")) + sorted((lake / "_grace").glob("*/_delta_log/*.json"))
    code, out, _ = run(monkeypatch, capsys, "ingest", str(batch), "--lake", str(lake))
    assert code == 0 and "already ingested" in out
    assert sorted((lake / "tables").glob("*/_delta_log/*.json")) + sorted((lake / "_grace").glob("*/_delta_log/*.json")) == versions


def test_bad_batch_is_one_line_exit_2_and_no_lake(tmp_path: Path, monkeypatch, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"id": "a", "title": "A", "text": "ok"}\n{"id": "b", "title": "B", "text": "\xff"}\n')
    lake = tmp_path / "lake"
    code, out, err = run(monkeypatch, capsys, "ingest", str(bad), "--lake", str(lake))
    assert (code, out) == (2, "")
    assert err == "grace: error: bad.jsonl: line 2: not valid UTF-8 (byte 0xff at column 36)\n"
    assert not lake.exists()
    code, _, err = run(monkeypatch, capsys, "ingest", str(tmp_path / "missing.jsonl"), "--lake", str(lake))
    assert code == 2 and "missing.jsonl: cannot read" in err and err.count("\n") == 1


def test_sql_formats(filled: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    query = "SELECT doc_id, title, n_priors FROM documents ORDER BY doc_id"
    code, out, _ = run(monkeypatch, capsys, "sql", query, "--lake", str(filled))
    assert code == 0 and out.endswith("(2 rows)\n")
    assert "doc_id" in out.splitlines()[1] and " a " in out and " B " in out

    code, out, _ = run(monkeypatch, capsys, "sql", query, "--lake", str(filled), "--format", "csv")
    assert pl.read_csv(io.StringIO(out)).rows() == [("a", "A", 1), ("b", "B", 1)]

    code, out, _ = run(monkeypatch, capsys, "sql", query, "--lake", str(filled), "--format", "json")
    assert json.loads(out) == [{"doc_id": "a", "title": "A", "n_priors": 1}, {"doc_id": "b", "title": "B", "n_priors": 1}]

    target = tmp_path / "out.csv"
    code, out, _ = run(monkeypatch, capsys, "sql", "SELECT question_id, options FROM questions", "--lake", str(filled),
                       "--format", "csv", "--output", str(target))
    assert (code, out) == (0, "")
    assert target.read_text() == 'question_id,options\nqa,"[""x"", ""y""]"\n'


def test_sql_reads_the_lake_setting_from_the_environment(filled: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("GRACE_LAKE", str(filled))
    code, out, _ = run(monkeypatch, capsys, "sql", "SELECT count(*) AS n FROM sources", "--format", "json")
    assert (code, json.loads(out)) == (0, [{"n": 2}])


REFUSED = [
    "INSERT INTO documents VALUES ('x')",
    "CREATE TABLE t AS SELECT 1",
    "DROP VIEW claims",
    "ATTACH '/tmp/other.duckdb' AS other",
    "COPY (SELECT * FROM documents) TO '{target}'",
    "EXPORT DATABASE '{target}'",
    "SET threads = 1",
    "PRAGMA enable_profiling",
    "INSTALL httpfs",
    "LOAD httpfs",
    "CALL checkpoint()",
    "SELECT 1; DELETE FROM documents",
]


@pytest.mark.parametrize("statement", REFUSED)
def test_sql_refuses_anything_but_one_select(filled: Path, tmp_path: Path, statement: str, monkeypatch, capsys) -> None:
    catalog = filled / "catalog.duckdb"
    run(monkeypatch, capsys, "sql", "SELECT 1", "--lake", str(filled))  # the catalog is current
    before = hashlib.sha256(catalog.read_bytes()).hexdigest()
    target = tmp_path / "copied"
    code, out, err = run(monkeypatch, capsys, "sql", statement.format(target=target), "--lake", str(filled))
    assert (code, out) == (2, "")
    assert err.startswith("grace: error: grace sql ") and err.count("\n") == 1
    assert "read-only" in err or "exactly one SELECT" in err
    assert hashlib.sha256(catalog.read_bytes()).hexdigest() == before
    assert not target.exists()


def test_sql_errors_are_one_line(filled: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    code, _, err = run(monkeypatch, capsys, "sql", "SELECT nope FROM documents", "--lake", str(filled))
    assert code == 2 and err.startswith("grace: error: Binder Error: ") and err.count("\n") == 1
    code, _, err = run(monkeypatch, capsys, "sql", "SELEC 1", "--lake", str(filled))
    assert code == 2 and err.startswith("grace: error: invalid SQL: ")
    code, _, err = run(monkeypatch, capsys, "sql", "SELECT 1", "--lake", str(tmp_path / "nowhere"))
    assert code == 2 and "no lake at" in err


@pytest.mark.e2e
def test_console_script_on_an_s3_lake(s3_endpoint: str, batch: Path, tmp_path: Path) -> None:
    config = LakeConfig(lake=f"s3://{make_bucket(s3_endpoint)}/grace", s3_endpoint_url=s3_endpoint)
    env = {
        **__import__("os").environ, "GRACE_LAKE": config.lake, "GRACE_S3_ENDPOINT_URL": s3_endpoint,
        "GRACE_CATALOG_CACHE": str(tmp_path / "cache"),
    }
    grace = [sys.executable, "-c", "from flows.cli import main; main()"]
    done = subprocess.run([*grace, "ingest", str(batch)], env=env, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith(f"(lake {config.lake})\n")
    done = subprocess.run([*grace, "sql", "SELECT doc_id FROM documents ORDER BY 1", "--format", "csv"],
                          env=env, cwd=REPO, capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "doc_id\na\nb\n")
    assert "testing" not in done.stdout + done.stderr  # the dummy credentials are never printed
    done = subprocess.run([*grace, "sql", "DELETE FROM documents"], env=env, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr == "grace: error: grace sql is read-only: DELETE statements are refused (only SELECT)\n"
