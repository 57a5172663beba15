"""`grace migrate`: a lake of the earlier format (Parquet files named by JSON commit records
under _manifest/commits) becomes Delta tables, idempotently, keeping commit keys and rounds."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from grace_core.errors import LakeError
from storage.config import LakeConfig
from storage.lake import Lake
from storage.migrate import migrate_lake
from storage.schemas import TABLES, conform
from tests.storage.sample_rows import claims, edges
from tests.grace_cli import run_grace
from tests.storage.old_format import write_old_file, write_record

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


def old_commit(root: Path, key: str, tables: dict[str, pl.DataFrame], at: datetime) -> list[str]:
    """Write ``tables`` as the earlier GRACE did: one zstd Parquet file per table and round,
    named by the hash of its bytes, then the commit record naming them. Returns the paths."""
    files = []
    for name, df in tables.items():
        table = conform(name, df)
        rounds = sorted(pc.unique(table.column("round")).to_pylist()) if TABLES[name].partitioned else [None]
        for rnd in rounds:
            part = table if rnd is None else table.filter(pc.equal(table.column("round"), rnd))
            files.append(write_old_file(root, name, part, rnd))
    write_record(root, key, at, files)
    return [f["path"] for f in files]


@pytest.fixture
def old_lake(tmp_path: Path) -> Path:
    root = tmp_path / "old-lake"
    r1, r2 = claims(3, 4, 1), claims(3, 4, 2, prefix="second-")
    old_commit(root, "build/round=1", {"claims": r1, "edges": edges(r1)}, T0)
    old_commit(root, "build/round=2", {"claims": r2, "edges": edges(r2)}, T0 + timedelta(hours=1))
    old_commit(root, "again/round=1", {"claims": r1}, T0 + timedelta(hours=2))  # identical rows under another key
    orphan = claims(1, 2, 1, prefix="orphan-")  # a writer killed before its record: never part of the lake
    pq.write_table(conform("claims", orphan), root / "tables/claims/round=1/part-orphan.parquet")
    return root


grace = run_grace


def test_an_old_lake_is_refused_until_migrated_then_reads_the_same(old_lake: Path, monkeypatch, capsys) -> None:
    config = LakeConfig(lake=str(old_lake))
    with pytest.raises(LakeError, match="written by an earlier GRACE .* grace migrate --lake"):
        Lake.open(config)
    code, out, err = grace(monkeypatch, capsys, "migrate", "--lake", str(old_lake))
    assert (code, err) == (0, "")
    assert "migrated 3 commit(s) of the earlier format to Delta tables (0 migrated before); rows inserted: claims 24, edges 24" in out
    lake = Lake.open(config)
    assert lake.read("claims").height == 24 and lake.read("edges").height == 24  # no orphan, no duplicate
    assert lake.query("SELECT count(*) AS n, count(DISTINCT claim_id) AS d FROM claims").row(0) == (24, 24)
    assert all(lake.is_committed(k) for k in ("build/round=1", "build/round=2", "again/round=1"))
    assert lake.commit("build/round=1", {"claims": claims(1, 1, 1, prefix="x")}).created is False  # keys keep working
    assert lake.query("SELECT count(*) AS n FROM claims", as_of_round=1)["n"][0] == 12  # rounds kept for time travel
    assert lake.log.record("build/round=2").committed_at == T0 + timedelta(hours=1)
    code, out, err = grace(monkeypatch, capsys, "migrate", "--lake", str(old_lake))
    assert code == 0 and "migrated 0 commit(s) of the earlier format to Delta tables (3 migrated before); rows inserted: none" in out
    assert lake.read("claims").height == 24
    code, out, err = grace(monkeypatch, capsys, "check", "--lake", str(old_lake))
    assert code == 0 and "all present" in out


def test_a_migration_stopped_half_way_completes_without_duplicates(old_lake: Path) -> None:
    lake = Lake.open(LakeConfig(lake=str(old_lake)), migrating=True)
    first = json.loads(sorted((old_lake / "_manifest/commits").glob("*.json"))[0].read_text())
    rows = {}
    for f in first["files"]:  # as if the migration had been killed after replaying one record
        rows.setdefault(f["table"], []).append(pq.read_table(old_lake / f["path"]))
    lake.commit(first["key"], {t: pa.concat_tables(v) for t, v in rows.items()})
    report = migrate_lake(lake)
    assert (report.migrated, report.skipped) == (2, 1)
    assert lake.read("claims").height == 24 and lake.read("edges").height == 24


def test_a_file_named_by_a_record_but_missing_stops_the_migration_naming_it(old_lake: Path) -> None:
    record = json.loads(next((old_lake / "_manifest/commits").glob("*.json")).read_text())
    victim = record["files"][0]["path"]
    (old_lake / victim).unlink()
    lake = Lake.open(LakeConfig(lake=str(old_lake)), migrating=True)
    with pytest.raises(LakeError, match=f"{victim} \\(table {record['files'][0]['table']}, commit '{record['key']}'\\): the file is missing"):
        migrate_lake(lake)
    with pytest.raises(LakeError, match="grace migrate"):
        Lake.open(LakeConfig(lake=str(old_lake)))  # not marked migrated
