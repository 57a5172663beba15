"""``grace ingest batch.jsonl && grace round`` as the README shows it: one expansion round per
call, as a Prefect flow run on the session's real Prefect server, with the metrics printed."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from flows.cli import _register, app, main
from storage.config import LakeConfig
from storage.lake import Lake
from tests.conftest import REPO

_register()
RUNNER = CliRunner()
SAMPLE = REPO / "flows" / "samples" / "qasper_demo.jsonl"


@pytest.mark.slow
@pytest.mark.e2e
def test_ingest_then_round_runs_one_round_per_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("GRACE_HALLUCINATION_RATE", "0.2")
    lake = str(tmp_path / "lake")
    ingested = RUNNER.invoke(app, ["ingest", str(SAMPLE), "--lake", lake, "--prior-sections", "Abstract,Introduction"])
    assert ingested.exit_code == 0, ingested.output
    first = RUNNER.invoke(app, ["round", "--lake", lake])
    assert first.exit_code == 0, first.output
    assert "round 1 done" in first.stdout and "GRACE metrics per round" in first.stdout
    second = RUNNER.invoke(app, ["round", "--lake", lake, "--budget", "5"])
    assert second.exit_code == 0, second.output
    assert "round 2 done" in second.stdout
    rows = {r["round"]: r for r in Lake.open(LakeConfig(lake=lake)).query("SELECT * FROM round_metrics").to_dicts()}
    assert set(rows) == {1, 2} and rows[1]["n_deferred"] > 0
    assert rows[1]["n_pending"] == 0  # the verifier's votes of round 1 were decided in round 2's settle step
    stages = Lake.open(LakeConfig(lake=lake)).read("rounds", columns=["round", "stage"]).unique().sort("round", "stage").rows()
    assert {s for r, s in stages if r == 2} >= {"score", "dispatch", "verify"}  # nothing new to build

    # a round already run may be run again (it changes nothing); a later one would skip a round
    before = Lake.open(LakeConfig(lake=lake)).query("SELECT * FROM round_metrics ORDER BY round")
    again = RUNNER.invoke(app, ["round", "--lake", lake, "--round", "1"])
    assert again.exit_code == 0 and "round 1 done" in again.stdout, again.output
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["grace", "round", "--lake", lake, "--round", "4"])
    with pytest.raises(SystemExit) as exit_:
        main()
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in out + err, err
    assert f"round 4 would skip round 3: the next round of lake {lake} is 3" in err
    assert Lake.open(LakeConfig(lake=lake)).query("SELECT * FROM round_metrics ORDER BY round").equals(before)


def test_round_on_a_lake_without_documents_is_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture) -> None:
    for lake, message in ((tmp_path / "nowhere", "no lake at"), (tmp_path / "empty", "has no documents")):
        if lake.name == "empty":
            Lake.open(LakeConfig(lake=str(lake))).commit("unrelated", {"rounds": pl.DataFrame(
                {"round": [1], "stage": ["ingest"], "started_at": [datetime.now(timezone.utc)]})})
        monkeypatch.setattr(sys, "argv", ["grace", "round", "--lake", str(lake)])
        with pytest.raises(SystemExit) as exit_:
            main()
        out, err = capsys.readouterr()
        assert exit_.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
        assert "Traceback" not in out + err
