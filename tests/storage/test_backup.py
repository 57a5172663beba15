"""``grace backup`` and ``grace restore``: a restored lake passes ``grace check`` and answers as
the source did at the backup's commit (round_metrics, claim_status, --as-of-round), also when a
writer process commits during the backup, on S3 too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from storage.backup import MANIFEST, backup_lake, open_location, restore_lake
from storage.check import check_lake
from storage.config import LakeConfig
from storage.lake import Lake
from storage.maintenance import maintain
from tests.grace_cli import run_grace
from tests.storage.conftest import back_up_while, make_bucket
from tests.storage.sample_rows import claims, edges
from tests.storage.test_catalog import two_rounds  # noqa: F401 (the fixture: a lake of two rounds)

REPO = Path(__file__).resolve().parents[2]
WRITER = [sys.executable, "-m", "tests.storage.writer_process"]
ANSWERS = {
    "round_metrics": "SELECT * FROM round_metrics ORDER BY round",
    "claim_status": "SELECT * FROM claim_status ORDER BY doc_id, claim_id",
    "verdict_outcomes": "SELECT * FROM verdict_outcomes ORDER BY ALL",
    "claims": "SELECT * FROM claims ORDER BY ALL",
}


def answers(lake: Lake) -> dict[str, list]:
    out = {name: lake.query(sql).rows() for name, sql in ANSWERS.items()}
    for r in (1, 2):
        out |= {f"{name}@{r}": lake.query(sql, as_of_round=r).rows() for name, sql in ANSWERS.items()}
    return out


@pytest.fixture
def source(two_rounds: Lake, tmp_path: Path) -> Lake:  # noqa: F811
    folder = tmp_path / "source"
    shutil.copytree(two_rounds.uri, folder)
    return Lake.open(LakeConfig(lake=str(folder)))


def test_grace_backup_and_restore_give_a_lake_that_answers_as_the_source(
    source: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
) -> None:
    expected = answers(source)
    assert expected["round_metrics"] and expected["claim_status"] and expected["round_metrics@1"] != expected["round_metrics"]
    code, out, err = run_grace(monkeypatch, capsys, "backup", str(tmp_path / "bk"), "--lake", source.uri)
    assert code == 0 and out.startswith(f"backed up lake {source.uri} to {tmp_path / 'bk'}: "), err
    manifest = json.loads((tmp_path / "bk" / MANIFEST).read_text())
    assert manifest["last_round"] == 2 and manifest["commits"] == len(source.log.records())
    code, out, err = run_grace(monkeypatch, capsys, "restore", str(tmp_path / "bk"), str(tmp_path / "restored"))
    assert code == 0 and "all present, sizes and row counts match" in out, err
    restored = Lake.open(LakeConfig(lake=str(tmp_path / "restored")))
    assert not check_lake(restored).problems
    assert answers(restored) == expected
    source.commit("after", {"claims": claims(2, 2, 2, prefix="after-")})  # the backup and its restore do not move
    assert answers(restored) == expected

    code, _, err = run_grace(monkeypatch, capsys, "restore", str(tmp_path / "bk"), str(tmp_path / "restored"))
    assert code == 2 and "is not empty" in err and err.count("\n") == 1
    code, _, err = run_grace(monkeypatch, capsys, "backup", str(tmp_path / "bk"), "--lake", source.uri)
    assert code == 2 and "is not empty" in err
    code, _, err = run_grace(monkeypatch, capsys, "backup", str(Path(source.uri) / "inside"), "--lake", source.uri)
    assert code == 2 and "overlaps the lake" in err
    (tmp_path / "bk" / MANIFEST).unlink()  # a backup cut short
    code, _, err = run_grace(monkeypatch, capsys, "restore", str(tmp_path / "bk"), str(tmp_path / "other"))
    assert code == 2 and "not a complete GRACE backup" in err and not (tmp_path / "other").exists()


def test_a_backup_after_compaction_carries_the_compacted_versions(tmp_path: Path) -> None:
    lake = Lake.open(LakeConfig(lake=str(tmp_path / "lake")))
    for r in (1, 2, 3):
        for k in range(3):
            rows = claims(3, 4, r, prefix=f"r{r}k{k}-")
            lake.commit(f"round{r}/{k}", {"claims": rows, "edges": edges(rows)})
    maintain(lake, retention_hours=1)
    expected = {r: lake.query("SELECT count(*) AS n, sum(hash(claim_id)) AS h FROM claims", as_of_round=r).rows() for r in (1, 2, 3)}
    report = backup_lake(lake, open_location(lake.config, str(tmp_path / "bk")))
    assert report.tables["claims"] > max(w.version for rec in lake.log.records().values() for t, w in rec.tables.items() if t == "claims")
    _, restored = restore_lake(open_location(lake.config, str(tmp_path / "bk")), LakeConfig(lake=str(tmp_path / "restored")))
    assert not check_lake(restored).problems
    assert {r: restored.query("SELECT count(*) AS n, sum(hash(claim_id)) AS h FROM claims", as_of_round=r).rows()
            for r in (1, 2, 3)} == expected
    assert restored.tables.load("tables/claims").version() == report.tables["claims"]


def test_backups_taken_while_a_writer_process_commits_are_consistent(tmp_path: Path) -> None:
    config = LakeConfig(lake=str(tmp_path / "lake"))
    Lake.open(config).commit("seed", {"claims": claims(2, 5, 1, prefix="seed-")})
    units = 10
    writer = subprocess.Popen([*WRITER, "units", config.model_dump_json(), "w", str(units)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    backups, err = back_up_while(writer, Lake.open(config), tmp_path, limit=8, pause=0.3)
    assert writer.returncode == 0, err
    seen = []
    for i, dest in enumerate(backups):
        _, restored = restore_lake(open_location(config, str(dest)), LakeConfig(lake=str(tmp_path / f"restored{i}")))
        assert not check_lake(restored).problems, dest
        done = [k for k in restored.log.records() if k.startswith("w/")]
        counts = restored.query("SELECT (SELECT count(*) FROM claims) AS c, (SELECT count(DISTINCT claim_id || round) FROM claims) AS u, "
                                "(SELECT count(*) FROM edges) AS e").row(0)
        assert counts == (10 + 400 * len(done), 10 + 400 * len(done), 400 * len(done)), (dest, done)  # whole units, no partial one
        seen.append(len(done))
    assert any(0 < n < units for n in seen), f"no backup was taken while the writer was midway: {seen}"
    assert seen == sorted(seen)


@pytest.mark.slow
def test_a_backup_to_s3_restores_into_a_local_lake(source: Lake, s3_endpoint: str, tmp_path: Path) -> None:
    expected = answers(source)
    config = LakeConfig(lake=source.uri, s3_endpoint_url=s3_endpoint, catalog_cache=str(tmp_path / "cache"))
    dest = f"s3://{make_bucket(s3_endpoint)}/backups/one"
    report = backup_lake(Lake.open(config), open_location(config, dest))
    assert report.dest == dest and report.files > 0
    _, restored = restore_lake(open_location(config, dest), LakeConfig(lake=str(tmp_path / "restored")))
    assert not check_lake(restored).problems
    assert answers(restored) == expected
    assert len(expected["claims"]) == 7
