"""A lake that travels: copied, moved or restored anywhere, it reads its own data, through
``grace sql`` and through a plain ``duckdb`` session on its ``catalog.duckdb`` with no GRACE
command run first; a session that cannot tell where the catalog lies fails in one line instead
of reading another lake (:func:`storage.catalog._located_sql`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3
import duckdb
import pytest

import storage.catalog as catalog_module
from storage.catalog import ensure_catalog
from storage.config import LakeConfig
from storage.lake import Lake
from tests.grace_cli import run_grace
from tests.storage.conftest import make_bucket
from tests.storage.sample_rows import claims
from tests.storage.test_catalog import two_rounds  # noqa: F401 (the fixture: a lake of two rounds)

QUERIES = [
    "SELECT count(*) FROM claims",
    "SELECT string_agg(claim_id || ':' || round, ',' ORDER BY claim_id, round) FROM claims",
    "SELECT string_agg(claim_id || ':' || status, ',' ORDER BY claim_id) FROM claim_status",
    "SELECT string_agg(round || ':' || n_claims || ':' || n_grounded, ',' ORDER BY round) FROM round_metrics",
    "SELECT count(*) FROM verdict_outcomes",
]
PLAIN = ("import duckdb, json, sys; con = duckdb.connect(sys.argv[1], read_only=True);"
         "print(json.dumps([con.sql(q).fetchall()[0][0] for q in sys.argv[2:]]))")


def plain(catalog: Path, cwd: Path) -> list:
    """The answers to :data:`QUERIES` of a plain ``duckdb`` process (no GRACE code) that opens
    ``catalog`` from the folder ``cwd``."""
    done = subprocess.run([sys.executable, "-c", PLAIN, str(catalog), *QUERIES], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def through_grace(lake: Path) -> list:
    target = Lake.open(LakeConfig(lake=str(lake)), must_exist=True)
    return [target.query(q).to_series(0)[0] for q in QUERIES]


@pytest.fixture
def original(two_rounds: Lake, tmp_path: Path) -> Path:  # noqa: F811
    """A lake of its own (a copy of the module's two-round lake, its catalog current)."""
    folder = tmp_path / "site-a" / "lake"
    shutil.copytree(two_rounds.uri, folder)
    Lake.open(LakeConfig(lake=str(folder))).catalog()
    return folder


def test_a_copied_lake_reads_its_own_data_after_the_original_is_deleted(
    original: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
) -> None:
    expected = plain(original / "catalog.duckdb", tmp_path)
    assert expected == through_grace(original) and expected[0] == 7 and expected[3]
    copy = tmp_path / "site-b" / "restored lake"
    shutil.copytree(original, copy)
    shutil.rmtree(original)
    assert plain(copy / "catalog.duckdb", tmp_path) == expected  # no GRACE command run on the copy first
    assert plain(Path("catalog.duckdb"), copy) == expected  # opened by a relative path, from inside the lake
    assert through_grace(copy) == expected
    code, out, err = run_grace(monkeypatch, capsys, "sql", QUERIES[2], "--lake", str(copy), "--format", "json")
    assert code == 0 and list(json.loads(out)[0].values()) == [expected[2]], (out, err)
    assert plain(copy / "catalog.duckdb", tmp_path) == expected  # and after grace rebuilt it for the copy


def test_a_copy_does_not_see_later_changes_of_the_original(original: Path, tmp_path: Path) -> None:
    before = plain(original / "catalog.duckdb", tmp_path)
    copy = tmp_path / "laptop" / "lake"
    shutil.copytree(original, copy)
    Lake.open(LakeConfig(lake=str(original))).commit("later", {"claims": claims(3, 4, 2, prefix="later-")})
    after = plain(original / "catalog.duckdb", tmp_path)
    assert after[0] == before[0] + 12
    assert plain(copy / "catalog.duckdb", tmp_path) == before  # the copy's files, not the original's
    assert through_grace(copy) == before
    assert plain(copy / "catalog.duckdb", tmp_path) == before
    assert through_grace(original) == after


def test_a_moved_lake_reads_plainly_before_any_grace_command(original: Path, tmp_path: Path) -> None:
    expected = plain(original / "catalog.duckdb", tmp_path)
    moved = tmp_path / "elsewhere=2" / "lake"  # an "=" in a folder above the lake
    moved.parent.mkdir()
    shutil.move(original, moved)
    assert plain(moved / "catalog.duckdb", tmp_path) == expected
    assert through_grace(moved) == expected


def test_a_session_that_cannot_tell_where_the_catalog_lies_fails_loudly(original: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy" / "lake"
    shutil.copytree(original, copy)
    shutil.rmtree(original / "tables" / "claims")  # had it read the original, it would find nothing there
    attached = duckdb.connect()
    attached.execute(f"ATTACH '{copy / 'catalog.duckdb'}' AS c (READ_ONLY)")
    with pytest.raises(duckdb.Error, match=f"this catalog names the files of the lake {original} .*open the lake's catalog.duckdb"):
        attached.sql("SELECT count(*) FROM c.claims").fetchall()
    attached.close()
    con = duckdb.connect(str(copy / "catalog.duckdb"), read_only=True)
    con.execute(f"SET temp_directory = '{tmp_path / 'spill'}'")
    with pytest.raises(duckdb.Error, match="cannot tell where it lies"):
        con.sql("SELECT count(*) FROM claim_status").fetchall()
    con.execute("RESET temp_directory")
    assert con.sql("SELECT count(*) FROM claims").fetchall()[0][0] == 7
    con.close()


def test_time_travel_and_private_catalogs_read_the_lake_they_were_built_for(
    original: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    lake = Lake.open(LakeConfig(lake=str(original)))
    lake.commit("later", {"claims": claims(3, 4, 2, prefix="later-")})
    assert lake.query("SELECT count(*) AS n FROM claims", as_of_round=1)["n"][0] == 6
    as_of = ensure_catalog(lake.store, lake.state_as_of_round(1))
    assert as_of.name != "catalog.duckdb" and not str(as_of).startswith(str(original))
    with duckdb.connect(str(as_of), read_only=True) as con:  # a plain session on the time-travel catalog
        assert con.sql("SELECT count(*) FROM claims").fetchall()[0][0] == 6
    monkeypatch.setattr(catalog_module, "_writable", lambda folder: False)  # a reader who may not write the lake folder
    (original / "catalog.duckdb").unlink()
    assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 19
    private = catalog_module.private_catalog_dir(lake.store) / catalog_module.PRIVATE_CATALOG_FILE
    assert private.is_file() and not (original / "catalog.duckdb").exists()
    with duckdb.connect(str(private), read_only=True) as con:
        assert con.sql("SELECT count(*) FROM claims").fetchall()[0][0] == 19


@pytest.mark.slow
def test_an_s3_lake_copied_to_another_bucket_is_another_lake_that_reads_its_own_data(
    s3_endpoint: str, tmp_path: Path,
) -> None:
    source = LakeConfig(lake=f"s3://{make_bucket(s3_endpoint)}/grace/lake", s3_endpoint_url=s3_endpoint,
                        catalog_cache=str(tmp_path / "cache"))
    lake = Lake.open(source)
    lake.commit("a", {"claims": claims(2, 5, 1)})
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    bucket = make_bucket(s3_endpoint)
    src_bucket = source.lake.split("/")[2]
    for obj in s3.list_objects_v2(Bucket=src_bucket)["Contents"]:
        s3.copy_object(Bucket=bucket, Key=obj["Key"], CopySource={"Bucket": src_bucket, "Key": obj["Key"]})
    copy = Lake.open(source.model_copy(update={"lake": f"s3://{bucket}/grace/lake"}))
    lake.commit("b", {"claims": claims(2, 5, 2, prefix="b")})
    assert copy.catalog() != lake.catalog()  # each lake uri has its own catalog in the cache
    assert copy.query("SELECT count(*) AS n FROM claims")["n"][0] == 10
    assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 20
    with duckdb.connect(str(copy.catalog()), read_only=True) as con:
        sql = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'claims'").fetchone()[0]
    assert f"s3://{bucket}/grace/lake/tables/claims/" in sql and src_bucket not in sql


DELTA_COUNTS = ("import deltalake, json, sys, pathlib, polars as pl; root = pathlib.Path(sys.argv[1]);"
                "print(json.dumps({p.name: pl.read_delta(str(p)).height for p in sorted(root.iterdir()) if (p / '_delta_log').is_dir()}))")


def test_plain_deltalake_and_polars_read_every_table_as_grace_sql_counts_it(two_rounds: Lake) -> None:  # noqa: F811
    """Readable by the engines users outgrow to: a process with only deltalake and polars (no
    GRACE code) reads every table the lake holds, and each count equals ``grace sql``'s."""
    done = subprocess.run([sys.executable, "-c", DELTA_COUNTS, str(Path(two_rounds.uri) / "tables")],
                          capture_output=True, text=True, timeout=120, check=True)
    counts = json.loads(done.stdout)
    assert {"claims", "scores", "deferrals", "verdicts", "decisions"} <= set(counts)
    for table, n in counts.items():
        assert two_rounds.query(f'SELECT count(*) AS n FROM "{table}"')["n"][0] == n, table


def test_a_lake_whose_folder_is_writable_gets_no_private_catalog_folder(
    original: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    lake = Lake.open(LakeConfig(lake=str(original)))
    lake.commit("later", {"claims": claims(3, 4, 2, prefix="later-")})
    assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 19
    assert not list((tmp_path / "tmp").iterdir()), "a query of a lake it may write leaves nothing in the temporary folder"
    assert lake.query("SELECT count(*) AS n FROM claims", as_of_round=1)["n"][0] == 6  # time travel: a private folder
    (base,) = (tmp_path / "tmp").iterdir()
    (folder,) = base.iterdir()
    assert [p.name.startswith("asof-round-1-") for p in folder.iterdir() if p.suffix == ".duckdb"] == [True]


def test_private_catalogs_of_a_lake_unused_for_a_week_are_removed_and_a_lake_in_use_keeps_its_own(
    original: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(catalog_module, "_PRUNED", set())
    lake = Lake.open(LakeConfig(lake=str(original)))
    assert lake.query("SELECT count(*) AS n FROM claims", as_of_round=1)["n"][0] == 6
    folder = catalog_module.private_catalog_dir(lake.store)
    base, week = folder.parent, catalog_module.PRIVATE_KEEP_SECONDS
    idle, recent = base / "0123456789abcdef", base / "fedcba9876543210"
    for other, age in ((idle, week + 3600), (recent, week - 3600)):
        other.mkdir()
        (other / "asof-round-1-0000.duckdb").write_bytes(b"an old time-travel catalog")
        os.utime(other, (time.time() - age, time.time() - age))
    os.utime(folder, (time.time() - 2 * week, time.time() - 2 * week))  # this lake too was last used two weeks ago…
    monkeypatch.setattr(catalog_module, "_PRUNED", set())  # … and a new process queries it as of round 1
    assert lake.query("SELECT count(*) AS n FROM claims", as_of_round=1)["n"][0] == 6
    assert sorted(p.name for p in base.iterdir()) == sorted([folder.name, recent.name]), "only the idle lake's folder is removed"
    assert (recent / "asof-round-1-0000.duckdb").is_file() and any(folder.glob("asof-round-1-*.duckdb"))
    assert folder.stat().st_mtime > time.time() - 60, "a use sets the lake folder's time"
    both = sorted(base.iterdir())
    assert catalog_module.prune_private_catalogs(base, now=time.time() + week + 60) == both and not list(base.iterdir())
    assert lake.query("SELECT count(*) AS n FROM claims", as_of_round=1)["n"][0] == 6, "a removed catalog is built again"
