"""The lake notices loss (issue "Nothing silently wrong", item 1): a table whose Delta log (or
whole folder) was removed, a table rolled back to an older version, a commit log that is gone.
Before, each read as an empty table: ``grace check`` passed, ``grace sql`` answered 0 rows and
``grace round`` ran on. Now ``grace check`` names the table and fails, and every reader and
writer refuses the lake in one line (exit 2) without touching what is left."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from grace_core.errors import LakeError
from storage.config import LakeConfig
from storage.lake import Lake
from tests.grace_cli import run_grace
from tests.reliability.conftest import Tally
from tests.review.conftest import build_lake

pytestmark = pytest.mark.reliability


def damaged(tmp_path: Path, how: str) -> tuple[Lake, str]:
    """A synthetic lake (tests/review/conftest.py) with ``how`` done to it; the table named."""
    lake = build_lake(str(tmp_path / "lake"), rounds=(1, 2))
    tables = Path(lake.uri) / "tables"
    if how == "claims log removed":
        shutil.rmtree(tables / "claims" / "_delta_log")
        return lake, "claims"
    if how == "edges folder removed":
        shutil.rmtree(tables / "edges")
        return lake, "edges"
    if how == "scores rolled back":  # the newest log entry of scores removed: the table reads as its older version
        newest = sorted((tables / "scores" / "_delta_log").glob("*.json"))[-1]
        newest.unlink()
        return lake, "scores"
    raise AssertionError(how)


CASES = ["claims log removed", "edges folder removed", "scores rolled back"]


@pytest.mark.parametrize("how", CASES)
def test_a_lost_table_is_named_by_check_and_refused_by_every_command(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tally: Callable[[str], Tally],
) -> None:
    lake, table = damaged(tmp_path, how)
    left = {p.relative_to(lake.uri) for p in Path(lake.uri).rglob("*") if p.is_file() and "tables" in p.parts}
    code, out, err = run_grace(monkeypatch, capsys, "check", "--lake", lake.uri)
    assert code == 2 and f"(table {table})" in err and "problem" in err, (out, err)
    commands = [
        ("sql", "SELECT count(*) FROM claims", "--lake", lake.uri),
        ("round", "--lake", lake.uri),
        ("ask", "What was the parser trained on?", "--lake", lake.uri),
        ("report", "--lake", lake.uri, "--out", str(tmp_path / "report")),
    ]
    for args in commands:
        code, out, err = run_grace(monkeypatch, capsys, *args)
        lines = err.strip().splitlines()
        clear = code == 2 and len(lines) == 1 and f"table {table} is" in lines[0] and "restored from a backup" in lines[0]
        tally("lake damage").record(clear_error=clear, traceback="Traceback" in out + err)
        assert clear, (args, code, out, err)
    fresh = Lake.open(LakeConfig(lake=lake.uri))
    with pytest.raises(LakeError, match=f"table {table} is"):
        fresh.query("SELECT 1")
    with pytest.raises(LakeError, match=f"table {table} is"):
        fresh.read(table)
    with pytest.raises(LakeError, match=f"table {table} is"):  # refused before anything is written
        fresh.commit("after the damage", {"rounds": pl.DataFrame({"round": [9], "stage": ["probe"], "started_at": [pl.datetime(2026, 1, 1)]})})
    # nothing that was left was changed or removed by the refusals
    assert {p.relative_to(lake.uri) for p in Path(lake.uri).rglob("*") if p.is_file() and "tables" in p.parts} == left


def test_a_missing_commit_log_is_named_by_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    lake = build_lake(str(tmp_path / "lake"), rounds=(1,))
    shutil.rmtree(Path(lake.uri) / "_grace" / "commits")
    code, out, err = run_grace(monkeypatch, capsys, "check", "--lake", lake.uri)
    assert code == 2 and "(table commit log): missing while tables hold data" in err, (out, err)


def test_a_healthy_lake_passes_check_and_a_new_table_is_no_loss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture) -> None:
    lake = build_lake(str(tmp_path / "lake"), rounds=(1,))
    assert lake.lost_tables() == {}
    code, out, err = run_grace(monkeypatch, capsys, "check", "--lake", lake.uri)
    assert code == 0 and "all present" in out, (out, err)
    assert lake.read("verdicts").height == 0  # never written: empty, not lost
