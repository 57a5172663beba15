"""Atomic, idempotent commits on a local lake and on S3 (moto), including writers killed mid-way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from grace_core.errors import InvalidTable, LakeError
from storage.commit import commit_tables
from storage.config import LakeConfig
from storage.filesystem import LocalStore
from storage.lake import Lake
from storage.manifest import CHECKPOINT, CHECKPOINT_EVERY, COMMITS_DIR, commit_id, record_path
from tests.storage.sample_rows import claims, edges

REPO = Path(__file__).resolve().parents[2]


def all_files(lake: Lake, folder: str) -> set[str]:
    """Every object under ``folder`` of the lake, hidden temporary files included."""
    from pyarrow import fs

    infos = lake.store.arrow_fs.get_file_info(fs.FileSelector(lake.store.arrow_path(folder), recursive=True, allow_not_found=True))
    return {i.path for i in infos if i.type == fs.FileType.File}


def test_commit_writes_one_zstd_file_per_table_and_round(lake: Lake) -> None:
    rows = pl.concat([claims(30, 10, 1), claims(30, 10, 2, prefix="x")])
    result = lake.commit("build/chunk=1", {"claims": rows, "edges": edges(rows)})
    assert result.created and result.rows == {"claims": 600, "edges": 600}
    paths = sorted(f.path for f in result.files)
    assert [p.rsplit("/", 1)[0] for p in paths] == [
        "tables/claims/round=1", "tables/claims/round=2", "tables/edges/round=1", "tables/edges/round=2",
    ]
    meta = pq.ParquetFile(lake.store.arrow_path(paths[0]), filesystem=lake.store.arrow_fs)
    assert meta.metadata.row_group(0).column(0).compression == "ZSTD"
    assert meta.schema_arrow.metadata[b"grace.schema_version"] == b"1"
    back = lake.read("claims").sort("claim_id")
    assert back["call_key"].null_count() == 600  # optional column not given: nulls
    assert back.drop("call_key").equals(rows.sort("claim_id"))
    assert lake.read("claims", rounds=[2]).height == 300
    assert lake.read("claims", columns=["claim_id"], filter=ds.field("doc_id") == "doc3").height == 20


def test_committing_the_same_key_twice_leaves_the_same_rows(lake: Lake) -> None:
    rows = claims(10, 10, 1)
    first = lake.commit("k", {"claims": rows})
    state = lake.state()
    again = lake.commit("k", {"claims": rows})
    changed = lake.commit("k", {"claims": claims(10, 10, 1, prefix="other")})
    assert first.created and not again.created and not changed.created
    assert again.files == first.files == changed.files
    assert lake.state().state_id == state.state_id
    assert lake.read("claims").height == 100
    assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 100


def test_identical_rows_under_two_keys_are_stored_once(lake: Lake) -> None:
    rows = claims(5, 4, 1)
    a, b = lake.commit("a", {"claims": rows}), lake.commit("b", {"claims": rows})
    assert a.created and b.created and a.files[0].path == b.files[0].path
    assert lake.read("claims").height == 20
    assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 20


def test_a_fresh_reader_sees_commits_of_another_lake_object(lake_config: LakeConfig) -> None:
    writer, reader = Lake.open(lake_config), Lake.open(lake_config)
    assert reader.read("claims").height == 0
    writer.commit("one", {"claims": claims(2, 3, 1)})
    assert reader.read("claims").height == 6
    assert reader.is_committed("one") and not reader.is_committed("two")


def test_rows_that_do_not_fit_the_schema_write_nothing(lake: Lake) -> None:
    good = claims(3, 3, 1)
    bad = good.with_columns(label=pl.lit("entails")).drop("text")
    with pytest.raises(InvalidTable, match="table edges: row 1: field 'label' has unknown value 'maybe'"):
        lake.commit("k", {"claims": good, "edges": edges(good).with_columns(label=pl.lit("maybe"))})
    with pytest.raises(InvalidTable, match="unknown column"):
        lake.commit("k", {"claims": bad})
    assert all_files(lake, "tables") == set() and lake.state().records == {}
    assert not lake.is_committed("k")


def test_empty_tables_write_no_file_but_mark_the_unit_done(lake: Lake) -> None:
    result = lake.commit("nothing/to/do", {"claims": claims(0, 0, 1)})
    assert result.created and result.files == ()
    assert lake.is_committed("nothing/to/do") and all_files(lake, "tables") == set()


def test_concurrent_writers_of_one_key_publish_exactly_one_commit(lake_config: LakeConfig) -> None:
    results = []
    variants = [claims(4, 5, 1, prefix=f"t{i}-") for i in range(4)]

    def write(i: int) -> None:
        results.append(Lake.open(lake_config).commit("same", {"claims": variants[i]}))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.created for r in results) == 1
    winner = next(r for r in results if r.created)
    assert all(r.files == winner.files for r in results)
    assert Lake.open(lake_config).read("claims").height == 20


def test_writers_in_parallel_processes_lose_no_commit(local_config: LakeConfig) -> None:
    code = (
        "import json,sys; from storage.config import LakeConfig; from storage.lake import Lake;"
        "from tests.storage.sample_rows import claims;"
        "lake=Lake.open(LakeConfig(**json.loads(sys.argv[1])));"
        "[lake.commit(f'p{sys.argv[2]}/{i}', {'claims': claims(2, 5, 1, prefix=f'p{sys.argv[2]}-{i}-')}) for i in range(5)]"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, local_config.model_dump_json(), str(p)], cwd=REPO)
        for p in range(2)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    lake = Lake.open(local_config)
    assert len(lake.state().records) == 10
    assert lake.read("claims").height == 100
    assert lake.query("SELECT count(DISTINCT claim_id) AS n FROM claims")["n"][0] == 100


@pytest.mark.parametrize("pause_at", ["data-file-2", "record"])
def test_a_writer_killed_mid_commit_leaves_the_previous_state(lake_config: LakeConfig, pause_at: str) -> None:
    lake = Lake.open(lake_config)
    lake.commit("base", {"claims": claims(5, 4, 1)})
    before_state, before_rows = lake.state().state_id, lake.read("claims").sort("claim_id")
    before_catalog = lake.query("SELECT round, count(*) AS n FROM claims GROUP BY round ORDER BY round")

    child = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.writer_process", lake_config.model_dump_json(), "killed-unit", pause_at],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "READY"
        written = all_files(lake, "tables")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)

    if pause_at == "data-file-2" and isinstance(lake.store, LocalStore):
        assert any(Path(p).name.startswith(".part-") for p in written), "the second file was mid-write"
    assert len(written) > 1, "the killed writer had written data files"
    reader = Lake.open(lake_config)
    assert not reader.is_committed("killed-unit")
    assert reader.state().state_id == before_state
    assert reader.read("claims").sort("claim_id").equals(before_rows)
    assert reader.read("edges").height == 0
    assert reader.query("SELECT round, count(*) AS n FROM claims GROUP BY round ORDER BY round").equals(before_catalog)

    rows = pl.concat([claims(20, 50, 1, prefix="k1-"), claims(20, 50, 2, prefix="k2-")])
    redo = reader.commit("killed-unit", {"claims": rows, "edges": edges(rows)})
    assert redo.created
    assert reader.read("claims").height == before_rows.height + 2000
    assert reader.commit("killed-unit", {"claims": rows, "edges": edges(rows)}).created is False
    counts = reader.query("SELECT count(*) AS n, count(DISTINCT claim_id) AS d FROM claims")
    assert counts.row(0) == (before_rows.height + 2000, before_rows.height + 2000)


def test_checkpoint_holds_many_records_and_new_ones_still_count(local_config: LakeConfig) -> None:
    lake = Lake.open(local_config)
    for i in range(CHECKPOINT_EVERY):
        commit_tables(lake.store, lake.manifest, f"unit/{i}", {"claims": claims(1, 2, 1, prefix=f"u{i}-")})
    assert lake.manifest.maybe_checkpoint(lake.state())
    assert not lake.manifest.maybe_checkpoint(lake.state())
    lake.commit("after", {"claims": claims(1, 2, 1, prefix="after-")})
    checkpoint = json.loads(Path(lake.store.arrow_path(CHECKPOINT)).read_bytes())
    assert len(checkpoint["records"]) == CHECKPOINT_EVERY
    fresh = Lake.open(local_config)
    assert fresh.read("claims").height == 2 * (CHECKPOINT_EVERY + 1)
    assert fresh.state().state_id == lake.state().state_id


def test_a_file_of_another_schema_version_is_refused(local_config: LakeConfig) -> None:
    lake = Lake.open(local_config)
    lake.commit("v", {"claims": claims(1, 1, 1)})
    rec = Path(lake.store.arrow_path(record_path(commit_id("v"))))
    body = json.loads(rec.read_bytes())
    body["files"][0]["schema_version"] = 99
    rec.write_text(json.dumps(body))
    with pytest.raises(LakeError, match="has schema version 99, this GRACE reads version 1"):
        Lake.open(local_config).read("claims")
    lake.store.catalog_path.unlink()  # as after an upgrade: the catalog is rebuilt and refuses it too
    with pytest.raises(LakeError, match="has schema version 99, this GRACE reads version 1"):
        Lake.open(local_config).query("SELECT count(*) FROM claims")
    assert not lake.store.catalog_path.exists()


def test_a_damaged_commit_record_is_reported_with_its_path(local_config: LakeConfig) -> None:
    lake = Lake.open(local_config)
    lake.commit("ok", {"claims": claims(1, 1, 1)})
    Path(lake.store.arrow_path(f"{COMMITS_DIR}/{'0' * 32}.json")).write_text("{not json")
    with pytest.raises(LakeError, match=f"{COMMITS_DIR}/{'0' * 32}.json: not valid JSON"):
        Lake.open(local_config).read("claims")


def test_s3_lake_errors_are_one_clear_line_without_credentials(s3_endpoint: str, tmp_path: Path) -> None:
    missing = LakeConfig(lake="s3://no-such-bucket-here/x", s3_endpoint_url=s3_endpoint, catalog_cache=str(tmp_path))
    with pytest.raises(LakeError) as err:
        Lake.open(missing)
    assert str(err.value) == "lake s3://no-such-bucket-here/x: bucket 'no-such-bucket-here' does not exist"
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in str(err.value)
    with pytest.raises(LakeError, match="unsupported location"):
        Lake.open(LakeConfig(lake="gs://bucket/x"))


def test_a_lake_pickles_as_its_settings_and_reopens(lake: Lake) -> None:
    import pickle

    from flows.settings import build_settings

    lake.commit("p", {"claims": claims(2, 2, 1)})
    settings = build_settings(**lake.config.model_dump())
    copy = pickle.loads(pickle.dumps(Lake.open(settings)))
    assert type(copy.config) is LakeConfig and copy.uri == lake.uri
    assert copy.read("claims").height == 4
