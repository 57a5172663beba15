"""Upkeep of a Delta lake: compaction, vacuum (files of killed writers, replaced files) and the
integrity check, through the library and the `grace` commands."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import boto3
import polars as pl
import pyarrow.parquet as pq
import pytest

from storage.catalog import catalog_is_current
from storage.config import LakeConfig
from storage.delta_tables import table_rel
from storage.lake import Lake
from storage.maintenance import compact, maintain, vacuum
from tests.storage.sample_rows import claims, edges
from tests.grace_cli import run_grace


grace = run_grace


def files_of(lake: Lake, table: str) -> list[str]:
    return sorted(lake.state().table(table).files and [f.uri for f in lake.state().table(table).files])


def test_compaction_keeps_the_rows_and_merges_small_files(lake: Lake) -> None:
    for i in range(6):
        lake.commit(f"small/{i}", {"claims": claims(2, 3, 1, prefix=f"s{i}-"), "edges": edges(claims(2, 3, 1, prefix=f"s{i}-"))})
    before = lake.query("SELECT * FROM claims ORDER BY claim_id")
    assert len(files_of(lake, "claims")) == 6
    done = {c.table: c for c in compact(lake)}
    assert done[table_rel("claims")].files_removed == 6 and done[table_rel("claims")].files_added == 1
    assert len(files_of(lake, "claims")) == 1
    assert lake.query("SELECT * FROM claims ORDER BY claim_id").equals(before)
    assert lake.read("claims").height == 36 and lake.read("edges").height == 36
    assert lake.query("SELECT count(*) AS n FROM claims", as_of_round=1)["n"][0] == 36  # older versions still readable
    versions = {rel: lake.tables.load(rel).version() for rel in done}
    assert all(c.files_removed == 0 for c in compact(lake))  # a second run rewrites nothing and commits nothing
    assert {rel: lake.tables.load(rel).version() for rel in done} == versions
    again = lake.commit("small/6", {"claims": claims(1, 3, 1, prefix="s6-")})  # writers carry on after compaction
    assert again.rows == {"claims": 3} and lake.read("claims").height == 39


def test_maintenance_leaves_the_catalog_showing_the_compacted_lake(lake: Lake) -> None:
    for i in range(3):
        lake.commit(f"small/{i}", {"claims": claims(2, 3, 1, prefix=f"s{i}-")})
    lake.query("SELECT count(*) FROM claims")  # the catalog shows the lake before maintenance
    compactions, _ = maintain(lake, retention_hours=168)
    assert any(c.files_removed for c in compactions)
    assert catalog_is_current(lake.store, lake.state())  # the next query does not rebuild it


def test_compaction_writes_a_table_keyed_by_document_in_document_order(local_config: LakeConfig) -> None:
    """As every commit writes its rows, so a read by key decodes only the row groups of its documents."""
    lake = Lake.open(local_config)
    for i in range(6):  # each commit holds both documents: concatenated files would be out of order
        lake.commit(f"small/{i}", {"claims": claims(2, 3, 1, prefix=f"s{i}-")})
    compact(lake)
    [compacted] = files_of(lake, "claims")
    doc_ids = pq.read_table(compacted, columns=["doc_id"])["doc_id"].to_pylist()
    assert doc_ids == sorted(doc_ids) == ["doc0"] * 18 + ["doc1"] * 18
    assert lake.read("claims", doc_ids=["doc1"]).height == 18
    lake.commit("round 2", {"claims": claims(2, 3, 2, prefix="r2-")})
    lake.commit("round 2 again", {"claims": claims(2, 3, 2, prefix="r2b-")})
    [done] = [c for c in compact(lake) if c.table == table_rel("claims")]
    assert (done.files_removed, done.files_added) == (2, 1)  # round 2's partition only: round 1's one file is sorted
    assert compacted in files_of(lake, "claims")


def test_compaction_sorts_only_partitions_out_of_order_or_of_small_files(local_config: LakeConfig) -> None:
    """A sort's files follow each other in document order: the next compaction leaves them alone
    (here files of about 6 KB for a target of 20 KB). Small files that do not overlap are merged."""
    lake = Lake.open(local_config)
    for i in range(4):  # 40 documents in each commit: the files overlap
        lake.commit(f"c{i}", {"claims": claims(40, 100, 1, prefix=f"s{i}-")})
    [done] = [c for c in compact(lake, target_bytes=20_000) if c.table == table_rel("claims")]
    assert done.files_removed == 4 and done.files_added > 4  # files of the target size, in document order
    sorted_files = files_of(lake, "claims")
    ranges = [(t["doc_id"][0].as_py(), t["doc_id"][-1].as_py()) for t in map(pq.read_table, sorted_files)]
    ranges.sort()
    assert all(low >= high for (_, high), (low, _) in zip(ranges, ranges[1:]))
    assert all(c.files_removed == 0 for c in compact(lake, target_bytes=20_000))
    assert files_of(lake, "claims") == sorted_files

    other = Lake.open(local_config.model_copy(update={"lake": local_config.lake + "-disjoint"}))
    for i in range(3):  # documents of their own in each commit: small files that do not overlap
        other.commit(f"d{i}", {"claims": claims(1, 3, 1, prefix=f"d{i}-").with_columns(doc_id=pl.lit(f"doc{i}"))})
    [done] = [c for c in compact(other, target_bytes=20_000) if c.table == table_rel("claims")]
    assert (done.files_removed, done.files_added) == (3, 1)


def test_vacuum_deletes_old_files_no_version_names_and_nothing_else(local_config: LakeConfig) -> None:
    lake = Lake.open(local_config)
    lake.commit("base", {"claims": claims(2, 2, 1)})
    folder = Path(lake.store.file_uri("tables/claims/round=1"))
    killed = folder / "part-00000-0000dead-c000.zstd.parquet"  # a writer killed before its Delta commit
    running = folder / "part-00000-0000beef-c000.zstd.parquet"  # a writer at work right now
    shutil.copy(next(folder.glob("part-*.parquet")), killed)
    shutil.copy(next(folder.glob("part-*.parquet")), running)
    two_hours_ago = time.time() - 7200
    for f in [killed, *folder.glob("part-*.parquet")]:  # committed files age too, and must survive
        if f != running:
            os.utime(f, (two_hours_ago, two_hours_ago))
    dry = vacuum(lake, retention_hours=1, dry_run=True)
    assert dry.deleted[table_rel("claims")] == [f"round=1/{killed.name}"] and killed.exists()
    done = vacuum(lake, retention_hours=1)
    assert done.deleted[table_rel("claims")] == [f"round=1/{killed.name}"]
    assert not killed.exists() and running.exists()
    assert lake.read("claims").height == 4
    with pytest.raises(Exception, match="at least 1 hour"):
        vacuum(lake, retention_hours=0)


def test_grace_compact_and_vacuum_commands(local_config: LakeConfig, monkeypatch, capsys) -> None:
    lake = Lake.open(local_config)
    for i in range(3):
        lake.commit(f"u{i}", {"claims": claims(1, 2, 1, prefix=f"u{i}-")})
    code, out, err = grace(monkeypatch, capsys, "compact", "--lake", local_config.lake)
    assert (code, err) == (0, "") and "tables/claims: 3 file(s) compacted into 1" in out
    code, out, err = grace(monkeypatch, capsys, "vacuum", "--lake", local_config.lake, "--dry-run")
    assert code == 0 and "would delete 0 file(s)" in out and "; removed" not in out  # the replaced files are inside the retention
    code, out, err = grace(monkeypatch, capsys, "vacuum", "--lake", local_config.lake, "--older-than-hours", "0")
    assert code == 2 and "--older-than-hours" in err
    assert lake.read("claims").height == 6
    # migrate on a lake of the current format is a no-op, safe at any time
    code, out, err = grace(monkeypatch, capsys, "migrate", "--lake", local_config.lake)
    assert (code, err) == (0, "") and "nothing to migrate" in out


def damage(lake: Lake, uri: str, how: str) -> None:
    """Delete or truncate one data file of the lake, locally or on S3."""
    if uri.startswith("s3://"):
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        s3 = boto3.client("s3", endpoint_url=lake.config.s3_endpoint_url, region_name="us-east-1")
        if how == "delete":
            s3.delete_object(Bucket=bucket, Key=key)
        else:
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            s3.put_object(Bucket=bucket, Key=key, Body=body[: len(body) // 2])
    elif how == "delete":
        os.remove(uri)
    else:
        with open(uri, "r+b") as f:
            f.truncate(os.path.getsize(uri) // 2)


@pytest.mark.parametrize("how", ["delete", "truncate"])
def test_grace_check_names_a_missing_or_truncated_file(lake_config: LakeConfig, how: str, monkeypatch, capsys) -> None:
    lake = Lake.open(lake_config)
    rows = claims(3, 4, 1) if how == "delete" else claims(3, 4, 2)
    lake.commit("c", {"claims": rows, "edges": edges(rows)})
    env = {"GRACE_S3_ENDPOINT_URL": lake_config.s3_endpoint_url or "", "GRACE_CATALOG_CACHE": lake_config.catalog_cache or ""}
    for k, v in env.items():
        if v:
            monkeypatch.setenv(k, v)
    code, out, err = grace(monkeypatch, capsys, "check", "--lake", lake_config.lake)
    assert (code, err) == (0, "") and "checked 3 file(s) of 3 table(s): all present, sizes and row counts match" in out
    victim = lake.state().table("edges").files[0].uri
    size = pq.ParquetFile(lake.store.arrow_path_of_uri(victim), filesystem=lake.store.arrow_fs).metadata.num_rows
    assert size == 12
    damage(lake, victim, how)
    code, out, err = grace(monkeypatch, capsys, "check", "--lake", lake_config.lake)
    assert code == 2 and out == ""
    lines = err.splitlines()
    reason = "missing" if how == "delete" else "bytes, the table version records"
    assert lines[0].startswith(f"error: {victim} (table edges): ") and reason in lines[0]
    assert lines[-1].endswith("checked 3 file(s) of 3 table(s): 1 problem(s)")
