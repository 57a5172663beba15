"""`grace migrate` carries everything: a lake written in the earlier format (the base tables of a
real two-round demo lake, without the tables later versions derive as rounds settle) answers
every view and the report as the lake it came from, and its next round changes no past row and
runs as the original's does.

The source is `grace demo` on the bundled papers (the session's ``demo_lake_template``, copied) (real flows on a temporary Prefect server, the
offline models, the verifier as reviewer); tests/storage/old_format.py writes it back in the
earlier format, commit by commit, from the tables' own Delta logs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from flows.lake_report import report_files
from storage.config import LakeConfig
from storage.lake import Lake
from tests.grace_cli import run_grace
from tests.storage.conftest import copy_lake
from tests.storage.old_format import DERIVED, downgrade

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

GRACE = str(Path(sys.executable).with_name("grace"))
VIEWS = ("round_metrics", "verdict_outcomes", "deferral_outcomes", "claim_status", "reviewer_stats", "round_costs",
         "review_queue", *DERIVED)


def grace_process(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    res = subprocess.run([GRACE, *args], capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    return res


def rows(lake: Path, view: str) -> list[dict]:
    return Lake.open(LakeConfig(lake=str(lake))).query(f"SELECT * FROM {view} ORDER BY ALL").to_dicts()


@pytest.fixture(scope="module")
def lakes(demo_lake_template: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the demo lake after two rounds, the same lake written in the earlier format)."""
    root = tmp_path_factory.mktemp("migrate-rebuild")
    copy_lake(demo_lake_template, root / "demo")
    assert downgrade(root / "demo", root / "old") > 10
    return root / "demo", root / "old"


def test_the_old_format_holds_no_derived_table(lakes) -> None:
    _, old = lakes
    assert sorted(p.name for p in (old / "tables").iterdir()) == [
        "batches", "claims", "deferrals", "documents", "edges", "questions", "rounds", "scores", "sources", "verdicts"]


def test_migrate_rebuilds_every_derived_table_and_view(lakes, tmp_path: Path, monkeypatch, capsys) -> None:
    demo, old = lakes
    lake = tmp_path / "migrated"
    shutil.copytree(old, lake)
    code, out, err = run_grace(monkeypatch, capsys, "migrate", "--lake", str(lake))
    assert (code, err) == (0, ""), err
    assert "rebuilt the derived tables of 2 scored round(s)" in out
    for view in VIEWS:
        assert rows(lake, view) == rows(demo, view), view
    assert len(rows(lake, "round_metrics")) == 2 and rows(lake, "verdict_outcomes")
    # the report reads the same (its lake path and time aside)
    when = datetime(2026, 12, 1, tzinfo=timezone.utc)
    mine = report_files(Lake.open(LakeConfig(lake=str(lake))), top=20, generated=when)
    theirs = report_files(Lake.open(LakeConfig(lake=str(demo))), top=20, generated=when)
    assert mine["index.html"].replace(str(lake).encode(), b"LAKE") == theirs["index.html"].replace(str(demo).encode(), b"LAKE")
    # a re-run is a no-op with exit 0
    stored = {v: rows(lake, v) for v in DERIVED}
    code, out, err = run_grace(monkeypatch, capsys, "migrate", "--lake", str(lake))
    assert code == 0 and "migrated 0 commit(s)" in out and "rebuilt before; nothing to do" in out
    assert {v: rows(lake, v) for v in DERIVED} == stored


def test_the_next_round_of_a_migrated_lake_changes_no_past_row(lakes, tmp_path: Path, monkeypatch, capsys, after_demo_env) -> None:
    demo, old = lakes
    mine, theirs = tmp_path / "migrated", tmp_path / "original"
    shutil.copytree(old, mine)
    shutil.copytree(demo, theirs)
    assert run_grace(monkeypatch, capsys, "migrate", "--lake", str(mine))[0] == 0
    before = rows(mine, "round_metrics")
    for lake in (mine, theirs):
        grace_process(after_demo_env, "round", "--lake", str(lake), "--round", "3")
    after = rows(mine, "round_metrics")
    assert [r["round"] for r in after] == [1, 2, 3]
    # round 1's row and round 2's scoring columns stay; only round 2's pending deferrals got decided
    assert after[0] == before[0]
    settled = ("n_confirmed", "n_rejected", "n_abstained", "n_pending", "yield", "yield_decided")
    assert {k: v for k, v in after[1].items() if k not in settled} == {k: v for k, v in before[1].items() if k not in settled}
    assert before[1]["n_pending"] > 0 and after[1]["n_pending"] == 0
    for view in VIEWS:
        assert rows(mine, view) == rows(theirs, view), view
