"""Idempotent commits to Delta tables on a local lake and on S3 (moto), including writers
killed mid-way."""

from __future__ import annotations

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
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from grace_core.errors import InvalidTable, LakeError
from storage import delta_tables
from storage import lake as lake_module
from storage.commit_log import LOG_REL
from storage.config import LakeConfig
from storage.delta_tables import retry_conflicts
from storage.lake import Lake
from storage.log_listing import ListedCache
from storage.schemas import TABLES, WRITE_ORDER
from tests.storage.conftest import remove_lake
from tests.storage.sample_rows import claims, edges
from tests.storage.writer_process import unit_rows

REPO = Path(__file__).resolve().parents[2]


def data_files(lake: Lake, folder: str) -> set[str]:
    """Every Parquet object under ``folder`` of the lake, named by a Delta version or not."""
    from pyarrow import fs

    infos = lake.store.arrow_fs.get_file_info(fs.FileSelector(lake.store.arrow_path(folder), recursive=True, allow_not_found=True))
    return {i.path for i in infos if i.type == fs.FileType.File and i.path.endswith(".parquet")}


def test_commit_writes_zstd_delta_tables_partitioned_by_round(lake: Lake) -> None:
    rows = pl.concat([claims(30, 10, 1), claims(30, 10, 2, prefix="x")])
    result = lake.commit("build/chunk=1", {"claims": rows, "edges": edges(rows)})
    assert result.created and result.rows == {"claims": 600, "edges": 600}
    dt = DeltaTable(lake.store.file_uri("tables/claims"), storage_options=lake.store.delta_storage_options())
    assert dt.metadata().partition_columns == ["round"] and dt.metadata().description == "grace table claims, schema version 1"
    assert dt.history(1)[0]["grace.commit_key"] == "build/chunk=1"
    files = sorted(dt.file_uris())
    assert [f.rsplit("/", 2)[1] for f in files] == ["round=1", "round=2"]  # one file per round, not per document
    meta = pq.ParquetFile(lake.store.arrow_path_of_uri(files[0]), filesystem=lake.store.arrow_fs).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    back = lake.read("claims").sort("claim_id")
    assert back["call_key"].null_count() == 600  # optional column not given: nulls
    assert back.drop("call_key").equals(rows.sort("claim_id"))
    assert lake.read("claims", rounds=[2]).height == 300
    assert lake.read("claims", columns=["claim_id"], filter=ds.field("doc_id") == "doc3").height == 20
    with pytest.raises(InvalidTable, match="table documents is not stored by round"):
        lake.read("documents", rounds=[1])


def test_every_table_is_written_in_the_declared_order() -> None:
    assert sorted(WRITE_ORDER) == sorted(TABLES)
    assert WRITE_ORDER[0] == "documents" and WRITE_ORDER[-1] == "batches"
    assert WRITE_ORDER.index("claims") > max(WRITE_ORDER.index("sources"), WRITE_ORDER.index("edges"))
    assert WRITE_ORDER.index("rounds") > max(WRITE_ORDER.index(t) for t in TABLES if t not in ("rounds", "batches"))
    for spec in TABLES.values():  # keys name required columns: a null never escapes the MERGE
        assert all(not spec.schema.field(c).nullable for c in spec.key), spec.name


def test_committing_the_same_key_twice_leaves_the_same_rows(lake: Lake) -> None:
    rows = claims(10, 10, 1)
    first = lake.commit("k", {"claims": rows})
    state = lake.state()
    again = lake.commit("k", {"claims": rows})
    changed = lake.commit("k", {"claims": claims(10, 10, 1, prefix="other")})
    assert first.created and not again.created and not changed.created
    assert again.rows == first.rows == changed.rows == {"claims": 100}
    assert lake.state() == state
    assert lake.read("claims").height == 100
    assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 100


def test_rows_whose_key_is_stored_are_not_inserted_again(lake: Lake) -> None:
    rows = claims(5, 4, 1)
    a = lake.commit("a", {"claims": rows})
    b = lake.commit("b", {"claims": pl.concat([rows, claims(1, 3, 1, prefix="new")])})
    assert a.created and b.created and a.rows == {"claims": 20} and b.rows == {"claims": 3}
    assert lake.read("claims").height == 23
    assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 23


def test_a_fresh_reader_sees_commits_of_another_lake_object(lake_config: LakeConfig) -> None:
    writer, reader = Lake.open(lake_config), Lake.open(lake_config)
    assert reader.read("claims").height == 0
    writer.commit("one", {"claims": claims(2, 3, 1)})
    assert reader.read("claims").height == 6
    assert reader.is_committed("one") and not reader.is_committed("two")


def test_a_reader_that_read_before_sees_later_commits_of_another_lake_object(lake_config: LakeConfig) -> None:
    """The lake state a lake object keeps from its previous read is brought up to date, not reused."""
    writer, reader = Lake.open(lake_config), Lake.open(lake_config)
    writer.commit("one", {"claims": claims(2, 3, 1)})
    before = reader.state().table("claims")
    assert reader.query("SELECT count(*) AS n FROM claims")["n"][0] == 6
    writer.commit("two", {"claims": claims(2, 3, 2, prefix="t")})
    after = reader.state().table("claims")
    assert after.version > before.version and {f.round for f in after.files} == {1, 2}
    assert reader.query("SELECT count(*) AS n FROM claims")["n"][0] == 12


def test_a_reader_reads_again_only_the_tables_whose_log_changed(lake_config: LakeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lake object's next state reads again only the tables whose Delta log lists otherwise
    than when it last read them (on S3, every table read again costs requests); a table whose
    log lost its latest entry is read again, and refused."""
    writer, reader = Lake.open(lake_config), Lake.open(lake_config)
    first = claims(2, 3, 1)
    writer.commit("one", {"claims": first, "edges": edges(first)})
    before = reader.state()
    updated: list[str] = []
    real_update = DeltaTable.update_incremental
    monkeypatch.setattr(DeltaTable, "update_incremental", lambda self: updated.append(self.table_uri.rstrip("/").rsplit("/", 1)[-1]) or real_update(self))
    writer.commit("two", {"claims": claims(2, 3, 2, prefix="t")})
    after = reader.state()
    assert updated == ["claims"], "only the table a commit changed is read again"
    assert after.table("claims").version == before.table("claims").version + 1 and after.table("edges") == before.table("edges")
    updated.clear()
    remove_lake(lake_config, f"tables/claims/_delta_log/{after.table('claims').version:020d}.json")
    with pytest.raises(LakeError, match="table claims is at version"):
        reader.state()
    assert updated == [], "a log that lists fewer versions than were read is read afresh, not brought up to date"


def test_what_a_process_read_is_reused_only_while_the_lake_lists_as_it_did(
        lake_config: LakeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table opened for reading and the lake's state are read once per process and reused by
    every lake object while the Delta logs list as they did; a commit of another lake object, or
    the lake removed and made again at the same place up to the same versions, is read afresh."""
    lake = Lake.open(lake_config)
    lake.commit("round1", {"claims": claims(1, 5, 1)})
    opened = []
    real_load = lake.tables.load
    monkeypatch.setattr(delta_tables.DeltaTables, "load", lambda self, rel, version=None: opened.append(rel) or real_load(rel, version))
    first = lake.state()
    assert lake.read("claims").height == 5
    opened.clear()
    again = Lake.open(lake_config)
    assert again.read("claims").height == 5 and again.state() == first and again.is_committed("round1")
    assert opened == [], "nothing opened again while the logs list as they did"
    again.commit("round2", {"claims": claims(1, 3, 2, prefix="t")})
    assert lake.read("claims").height == 8 and lake.state().table("claims").version == first.table("claims").version + 1
    remove_lake(lake_config)
    Lake.open(lake_config).commit("round1", {"claims": claims(1, 7, 1, prefix="n")})
    remade = lake.state()
    assert remade.versions == first.versions and remade.table("claims").files != first.table("claims").files
    assert sorted(lake.read("claims")["claim_id"]) == [f"n{i}" for i in range(7)]
    assert not lake.is_committed("round2")
    third = Lake.open(lake_config)
    assert third.state() == remade  # as `lake` read it: and so what its commit log recorded, which a table is checked against
    remove_lake(lake_config, f"tables/claims/_delta_log/{remade.table('claims').version:020d}.json")
    with pytest.raises(LakeError, match="table claims is at version"):
        third.read("claims")


def test_a_lake_object_opens_only_the_tables_whose_log_changed_since_another_read_them(
        lake_config: LakeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new lake object (a flow's tasks each open their own) takes every table whose log lists
    as when another lake object of the process read it from that read, and opens only the table
    another process's commit changed since; a table with no log is absent without an attempt to
    open it."""
    first = claims(2, 3, 1)
    Lake.open(lake_config).commit("one", {"claims": first, "edges": edges(first)})
    before = Lake.open(lake_config).state()
    code = ("import sys; from storage.config import LakeConfig; from storage.lake import Lake; "
            "from tests.storage.sample_rows import claims; "
            "Lake.open(LakeConfig.model_validate_json(sys.argv[1])).commit('two', {'claims': claims(2, 3, 2, prefix='t')})")
    subprocess.run([sys.executable, "-c", code, lake_config.model_dump_json()], check=True, cwd=REPO, timeout=120)
    opened: list[str] = []
    real_load = delta_tables.DeltaTables.load
    monkeypatch.setattr(delta_tables.DeltaTables, "load", lambda self, rel, version=None: opened.append(rel) or real_load(self, rel, version))
    fresh = Lake.open(lake_config)
    state = fresh.state()
    assert sorted(opened) == [LOG_REL, "tables/claims"], "only the table the other process changed is opened, and the commit log"
    assert state.table("claims").version == before.table("claims").version + 1 and state.table("edges") == before.table("edges")
    assert state.table("verdicts").version is None
    assert fresh.read("verdicts").height == 0
    assert sorted(opened) == [LOG_REL, "tables/claims"], "a table never written is not opened"
    assert fresh.read("claims").height == 12


def test_a_table_first_written_as_it_is_read_is_not_taken_for_lost(
        local_config: LakeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader finds no table, and a writer creates it and records its commit before the reader
    asks the commit log why: the table was written, not lost (a reader polling a round's first
    commit failed with "table rounds is missing")."""
    reader, writer = Lake.open(local_config), Lake.open(local_config)
    real, looked = reader.tables.table, []

    def table(spec, version=None):
        found = real(spec, version)
        if not looked:
            looked.append(spec.name)
            assert found is None  # not written yet
            writer.commit("first", {"claims": claims(1, 5, 1)})  # lands between the look and the log's read
        return found

    monkeypatch.setattr(reader.tables, "table", table)
    assert reader.read("claims").height == 5
    assert looked == ["claims"]


def test_commits_landing_between_a_states_listing_and_its_log_read_are_not_taken_for_lost(
        lake_config: LakeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A state lists the logs, then reads the commit log: a commit landing in between records
    versions the listing did not show (a table's first, a table's next, read before by another
    lake object of the process and kept). Those tables are read again under a new listing, not refused
    as lost; a table really behind its commit log still is."""
    first = claims(1, 3, 1)
    Lake.open(lake_config).commit("one", {"claims": first})
    Lake.open(lake_config).state()  # every table as of "one", kept for the lake objects of this process
    reader, writer = Lake.open(lake_config), Lake.open(lake_config)
    real, landed = reader.log.latest_versions, []

    def latest_versions():
        if not landed:
            landed.append(True)
            more = claims(1, 3, 2, prefix="m")
            writer.commit("two", {"claims": more, "edges": edges(more)})  # lands after the reader's listing
        return real()

    monkeypatch.setattr(reader.log, "latest_versions", latest_versions)
    monkeypatch.setattr(lake_module, "_STATES", ListedCache(16))  # no lake state kept for the listing, as after another process's commit
    state = reader.state()
    assert landed and state.versions == writer.state().versions and state.table("edges").version is not None
    monkeypatch.undo()
    remove_lake(lake_config, f"tables/edges/_delta_log/{state.table('edges').version:020d}.json")
    with pytest.raises(LakeError, match="table edges is"):
        Lake.open(lake_config).state()


def test_rows_that_do_not_fit_the_schema_write_nothing(lake: Lake) -> None:
    good = claims(3, 3, 1)
    bad = good.with_columns(label=pl.lit("entails")).drop("text")
    with pytest.raises(InvalidTable, match="table edges: row 1: field 'label' has unknown value 'maybe'"):
        lake.commit("k", {"claims": good, "edges": edges(good).with_columns(label=pl.lit("maybe"))})
    with pytest.raises(InvalidTable, match="unknown column"):
        lake.commit("k", {"claims": bad})
    assert data_files(lake, "tables") == set() and lake.log.records() == {}
    assert not lake.is_committed("k")


def test_empty_tables_write_no_file_but_mark_the_unit_done(lake: Lake) -> None:
    result = lake.commit("nothing/to/do", {"claims": claims(0, 0, 1)})
    assert result.created and result.rows == {}
    assert lake.is_committed("nothing/to/do") and data_files(lake, "tables") == set()


def test_concurrent_writers_of_one_key_publish_exactly_one_commit(lake_config: LakeConfig) -> None:
    results, errors = [], []
    variants = [claims(4, 5, 1, prefix=f"t{i}-") for i in range(4)]

    def write(i: int) -> None:
        try:
            results.append(Lake.open(lake_config).commit("same", {"claims": variants[i]}))
        except LakeError as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and sum(r.created for r in results) == 1
    stored = Lake.open(lake_config).read("claims")
    assert stored.height == 20 and stored["claim_id"].str.slice(0, 3).n_unique() == 1  # one variant only


@pytest.mark.slow
def test_writers_in_parallel_processes_lose_no_commit(lake_config: LakeConfig) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-m", "tests.storage.writer_process", "units", lake_config.model_dump_json(), f"p{p}", "4"],
                         cwd=REPO, stdout=subprocess.DEVNULL)
        for p in range(3)
    ]
    assert [p.wait(timeout=240) for p in procs] == [0, 0, 0]
    lake = Lake.open(lake_config)
    assert len(lake.log.records()) == 12
    counts = lake.query("SELECT count(*) AS n, count(DISTINCT claim_id) AS d FROM claims").row(0)
    assert counts == (12 * 400, 12 * 400)
    assert lake.read("edges").height == 12 * 400


@pytest.mark.slow
@pytest.mark.parametrize("pause_at", ["table-2", "record"])
def test_a_writer_killed_mid_commit_is_completed_by_a_rerun(lake_config: LakeConfig, pause_at: str) -> None:
    lake = Lake.open(lake_config)
    lake.commit("base", {"claims": claims(5, 4, 1)})
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.writer_process", "pause", lake_config.model_dump_json(), "killed-unit", pause_at],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "READY"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)

    reader = Lake.open(lake_config)
    assert not reader.is_committed("killed-unit")
    # whole Delta versions only: the tables written before the kill, nothing half-written
    assert reader.read("claims").height == 20 + (400 if pause_at == "record" else 0)
    assert reader.read("edges").height == 400
    redo = reader.commit("killed-unit", unit_rows("killed-unit", 0))
    assert redo.created and redo.rows == ({"edges": 0, "claims": 0} if pause_at == "record" else {"edges": 0, "claims": 400})
    assert reader.commit("killed-unit", unit_rows("killed-unit", 0)).created is False
    counts = reader.query("SELECT count(*) AS n, count(DISTINCT claim_id) AS d FROM claims").row(0)
    assert counts == (420, 420) and reader.read("edges").height == 400


def test_conflicts_are_retried_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delta_tables.time, "sleep", lambda s: None)
    calls = []

    def always_conflicting(attempt: int) -> None:
        calls.append(attempt)
        raise CommitFailedError("Commit failed: a concurrent transactions added new data.")

    with pytest.raises(LakeError, match=rf"^unit x: concurrent writers kept conflicting after {delta_tables.MAX_ATTEMPTS} attempts"):
        retry_conflicts(always_conflicting, "unit x")
    assert calls == list(range(delta_tables.MAX_ATTEMPTS))
    assert retry_conflicts(lambda attempt: attempt if attempt == 2 else always_conflicting(attempt), "unit y") == 2


def test_a_table_of_another_schema_version_is_refused(local_config: LakeConfig) -> None:
    lake = Lake.open(local_config)
    DeltaTable.create(lake.store.file_uri("tables/claims"), TABLES["claims"].schema, partition_by=["round"],
                      description="grace table claims, schema version 99")
    with pytest.raises(LakeError, match="table claims has schema version 99, this GRACE reads version 1"):
        lake.read("claims")
    with pytest.raises(LakeError, match="table claims has schema version 99, this GRACE reads version 1"):
        lake.query("SELECT count(*) FROM claims")
    with pytest.raises(LakeError, match="table claims has schema version 99"):
        lake.commit("x", {"claims": claims(1, 1, 1)})
    assert not lake.is_committed("x")


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


def test_a_read_of_many_documents_decodes_only_their_row_groups(local_config: LakeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    # one file of 100 documents, one per row group; 52 of them (and one unknown id) asked for, more than Arrow prunes row groups by
    monkeypatch.setattr(delta_tables, "ROW_GROUP_ROWS", 30)
    monkeypatch.setattr(delta_tables, "SMALL_FILE_ROWS", 0)
    lake = Lake.open(local_config)
    everything = claims(100, 30, 1).with_columns(doc_id=pl.lit("doc") + pl.col("doc_id").str.slice(3).str.zfill(3))
    lake.commit("one", {"claims": everything.sample(fraction=1.0, shuffle=True, seed=1)})
    [file] = data_files(lake, "tables/claims")
    assert pq.ParquetFile(file, filesystem=lake.store.arrow_fs).metadata.num_row_groups == 100
    chosen: list[list[int] | None] = []
    holding = delta_tables._row_groups_holding
    monkeypatch.setattr(delta_tables, "_row_groups_holding", lambda *a: chosen.append(holding(*a)) or chosen[-1])
    wanted = [f"doc{i:03d}" for i in range(0, 100, 5)] + [f"doc{i:03d}" for i in range(51, 91)] + ["doc999"]
    assert len(set(wanted)) > delta_tables.IS_IN_PRUNED
    got = lake.read("claims", doc_ids=wanted).sort("doc_id", "claim_id").select(everything.columns)
    assert got.height == 52 * 30 and got.equals(everything.filter(pl.col("doc_id").is_in(wanted)).sort("doc_id", "claim_id"))
    assert [len(groups) for groups in chosen] == [52]  # the row groups of the 52 documents stored, of 100
    assert lake.read("claims", doc_ids=[f"doc{i:03d}" for i in range(200, 260)]).height == 0


@pytest.mark.parametrize("small_file_rows", [0, delta_tables.SMALL_FILE_ROWS])
def test_a_read_by_document_opens_only_the_files_that_may_hold_them(lake: Lake, small_file_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # five commits of 20 documents each (doc0-doc99, one file per commit), claims sorted by document;
    # the files that cannot hold the documents asked for are deleted: a read by key never opens them,
    # whether files are read one by one (small_file_rows 0) or, being small, in one scan together
    monkeypatch.setattr(delta_tables, "SMALL_FILE_ROWS", small_file_rows)
    everything = claims(100, 30, 1).with_columns(doc_id=pl.lit("doc") + pl.col("doc_id").str.slice(3).str.zfill(3))
    everything = everything.sample(fraction=1.0, shuffle=True, seed=1)
    for k in range(5):
        lake.commit(f"part{k}", {"claims": everything.filter(pl.col("doc_id").is_in([f"doc{i:03d}" for i in range(20 * k, 20 * k + 20)]))})
    stored = lake.read("claims")
    wanted = [f"doc{i:03d}" for i in (*range(20, 40), *range(60, 65), 61, 999)]  # two files' documents, a repeat, an unknown one
    got = lake.read("claims", doc_ids=wanted).sort("doc_id", "claim_id")
    assert got.equals(stored.filter(pl.col("doc_id").is_in(wanted)).sort("doc_id", "claim_id"))
    assert lake.read("claims", doc_ids=wanted, filter=ds.field("ord") < 3).height == 25 * 3
    assert lake.read("claims", doc_ids=[]).height == 0
    # rows are stored sorted by document, so row groups hold runs of documents
    assert all(pq.read_table(f, columns=["doc_id"], filesystem=lake.store.arrow_fs)["doc_id"].to_pylist() == sorted(pq.read_table(f, columns=["doc_id"], filesystem=lake.store.arrow_fs)["doc_id"].to_pylist())
               for f in data_files(lake, "tables/claims"))

    # more values than Arrow prunes files by (delta_tables.IS_IN_PRUNED), over a range that spans a third file
    spread = [f"doc{i:03d}" for i in (*range(20, 40), *range(60, 80))] + [f"doc025-{i}" for i in range(20)]
    assert len(spread) > delta_tables.IS_IN_PRUNED
    removed = 0
    for f in data_files(lake, "tables/claims"):
        docs = set(pq.read_table(f, columns=["doc_id"], filesystem=lake.store.arrow_fs)["doc_id"].to_pylist())
        if not docs & {*wanted, *spread}:
            lake.store.arrow_fs.delete_file(f)
            removed += 1
    assert removed == 3  # doc000-019, doc040-059 and doc080-099
    assert lake.read("claims", doc_ids=wanted).height == 25 * 30
    assert lake.read("claims", doc_ids=spread).height == 40 * 30
    with pytest.raises(LakeError, match="cannot read table claims"):
        lake.read("claims")  # a whole read opens every file


@pytest.mark.parametrize("small_file_rows", [0, delta_tables.SMALL_FILE_ROWS])
def test_a_read_of_documents_at_their_rounds_opens_only_those_rounds(lake: Lake, small_file_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # 40 documents with claims in each of rounds 1-4 (one file per round); each document asked for at
    # one round: exactly its rows of that round come back, whether files are read one by one or
    # together, and the files of a round no document is asked for are never opened
    monkeypatch.setattr(delta_tables, "SMALL_FILE_ROWS", small_file_rows)
    for r in range(1, 5):
        lake.commit(f"round{r}", {"claims": claims(40, 5, r, prefix=f"r{r}c")})
    at = pl.DataFrame({"doc_id": [f"doc{i}" for i in range(0, 40, 3)] + ["doc999"],
                       "round": [(1, 2, 4)[i % 3] for i in range(14)] + [2]})
    expected = lake.read("claims").join(at.with_columns(pl.col("round").cast(pl.Int32)), on=["doc_id", "round"], how="semi")
    got = lake.read_at("claims", at, columns=["claim_id", "text"])
    assert got.columns == ["claim_id", "text"]
    assert sorted(got["claim_id"]) == sorted(expected["claim_id"]) and got.height == 14 * 5
    for f in data_files(lake, "tables/claims/round=3"):
        lake.store.arrow_fs.delete_file(f)
    assert sorted(lake.read_at("claims", at, columns=["claim_id"])["claim_id"]) == sorted(expected["claim_id"])
    assert lake.read_at("claims", at.head(0), columns=["claim_id"]).height == 0
    with pytest.raises(LakeError, match="cannot read table claims"):
        lake.read_at("claims", at.with_columns(round=pl.lit(3)), columns=["claim_id"])


def test_a_table_reads_as_a_commit_found_it(lake: Lake) -> None:
    """``read(before=KEY)``: the rows the commits made before KEY had stored (what rebuilding a
    migrated lake's round decides from), not those of KEY itself or of later commits."""
    first, second = claims(1, 2, 1, prefix="a"), claims(1, 3, 1, prefix="b")
    lake.commit("claims/a", {"claims": first})
    lake.commit("edges/only", {"edges": edges(first)})
    lake.commit("claims/b", {"claims": second})
    ids = lambda key: sorted(lake.read("claims", columns=["claim_id"], before=key)["claim_id"])  # noqa: E731
    assert ids("claims/a") == []  # nothing before the first commit of the table
    assert ids("edges/only") == sorted(first["claim_id"])
    assert ids("claims/b") == sorted(first["claim_id"])  # not its own rows
    assert lake.read("claims").height == 5
    with pytest.raises(LakeError, match="no commit 'nope'"):
        lake.read("claims", before="nope")
