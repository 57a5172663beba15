"""The DuckDB catalog: table views, derived views (checked against hand-computed values and
grace_core.metrics), freshness after commits, and opening it from a plain DuckDB process."""

from __future__ import annotations

import json
import random
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pytest

from flows.score import COUNTS_COMPLETE, fill_scoring_counts
from grace_core.errors import LakeError, QueryFailed
from grace_core.metrics import SCORING_COUNTS, round_metrics as core_round_metrics
from grace_core.decisions import decide
import storage.catalog as catalog_module
from storage.catalog import build_catalog, catalog_is_current
from storage.catalog_seal import SEAL_KEY_FILE, forget_shown
from storage.commit import commit_tables
from storage.config import LakeConfig
from storage.lake import Lake
from storage.schemas import TABLES
from storage.views import DERIVED_VIEWS
from tests.storage.conftest import remove_lake
from tests.storage.sample_rows import claims

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
REPO = Path(__file__).resolve().parents[2]


def one_row(spec_name: str) -> pa.Table:
    """A valid one-row table for any lake table."""
    spec = TABLES[spec_name]
    values = []
    for f in spec.schema:
        t = f.type
        if f.name in spec.allowed:
            v = spec.allowed[f.name][0]
        elif pa.types.is_string(t):
            v = "x"
        elif pa.types.is_integer(t):
            v = 1
        elif pa.types.is_floating(t):
            v = 1.5
        elif pa.types.is_boolean(t):
            v = True
        elif pa.types.is_timestamp(t):
            v = T0
        elif pa.types.is_list(t) and pa.types.is_floating(t.value_type):
            v = [0.6, 0.8]  # a vector (embeddings)
        else:
            v = ["a", "b"]
        values.append(pa.array([v], t))
    return pa.Table.from_arrays(values, schema=spec.schema)


def describe(lake: Lake, view: str) -> list[tuple[str, str]]:
    return lake.query(f"DESCRIBE {view}").select("column_name", "column_type").rows()


def test_empty_views_have_the_same_columns_and_types_as_filled_ones(lake: Lake) -> None:
    empty = {name: describe(lake, name) for name in TABLES}
    lake.commit("one of each", {name: one_row(name) for name in TABLES})
    for name in TABLES:
        assert describe(lake, name) == empty[name], name
        assert lake.query(f"SELECT count(*) AS n FROM {name}")["n"][0] == 1
    assert [c for c, _ in empty["scores"]] == [f.name for f in TABLES["scores"].schema]


def test_every_table_and_derived_view_is_in_the_catalog(lake: Lake) -> None:
    names = set(lake.query("SELECT table_name FROM information_schema.tables")["table_name"])
    assert set(TABLES) | set(DERIVED_VIEWS) | {"lake_files", "_grace_catalog"} <= names


def test_queries_draw_no_progress_bar(local_config: LakeConfig) -> None:
    """A long query of a flow would otherwise draw DuckDB's progress bar on stdout: in the run's
    logs. Asked in a process of its own, whose stdout is a pipe as a worker's is (DuckDB turns the
    bar off by itself under pytest's captured stdout)."""
    Lake.open(local_config).commit("a", {"claims": claims(1, 2, 1)})
    script = ("import sys; sys.path.insert(0, sys.argv[2]); from storage.config import LakeConfig; from storage.lake import Lake;"
              "print(Lake.open(LakeConfig(lake=sys.argv[1])).query(\"SELECT current_setting('enable_progress_bar') AS p\")['p'][0])")
    out = subprocess.run([sys.executable, "-c", script, local_config.lake, str(REPO)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


def test_plain_duckdb_opens_the_local_catalog_from_anywhere(local_config: LakeConfig, tmp_path: Path) -> None:
    lake = Lake.open(local_config)
    lake.commit("c", {"claims": claims(3, 4, 1)})
    code = (
        "import duckdb, json, sys; con = duckdb.connect(sys.argv[1], read_only=True);"
        "print(json.dumps({'views': sorted(r[0] for r in con.sql('SHOW TABLES').fetchall()),"
        "'claims': con.sql('SELECT count(*) FROM claims').fetchall()[0][0],"
        "'status': con.sql('SELECT count(*) FROM claim_status').fetchall()[0][0]}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(lake.store.catalog_path)], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    seen = json.loads(out.stdout)
    assert set(TABLES) | set(DERIVED_VIEWS) <= set(seen["views"])
    assert (seen["claims"], seen["status"]) == (12, 0)


def test_catalog_is_refreshed_after_every_commit(local_config: LakeConfig) -> None:
    lake = Lake.open(local_config)
    path = lake.store.catalog_path
    for i in range(3):
        lake.commit(f"c{i}", {"claims": claims(1, 5, i, prefix=f"r{i}-")})
        with duckdb.connect(str(path), read_only=True) as con:
            assert con.sql("SELECT count(*) FROM claims").fetchall()[0][0] == 5 * (i + 1)
            assert con.sql("SELECT count(*) FROM lake_files").fetchall()[0][0] == i + 1


def catalog_contents(path: Path) -> dict:
    """What a catalog shows: its views' SQL, its file listing, its state row (but when it was
    built and its seal, whose key is the folder's) and the row count of every view."""
    with duckdb.connect(str(path), read_only=True) as con:
        views = dict(con.sql("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal").fetchall())
        return {
            "views": views,
            "files": con.sql("SELECT * FROM lake_files").fetchall(),
            "state": con.sql("SELECT * EXCLUDE (built_at, seal) FROM _grace_catalog").fetchall(),
            "counts": {v: con.sql(f'SELECT count(*) FROM "{v}"').fetchall()[0][0] for v in sorted(views)},
        }


def test_a_commit_updates_only_the_views_of_the_tables_it_changed_and_the_catalog_equals_a_full_build(
    local_config: LakeConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    lake = Lake.open(local_config)
    lake.commit("all", {name: one_row(name) for name in TABLES})
    written: list[str] = []
    view_sql = catalog_module.table_view_sql
    monkeypatch.setattr(catalog_module, "table_view_sql", lambda spec, table: written.append(spec.name) or view_sql(spec, table))
    rounds = one_row("rounds").set_column(0, "round", pa.array([2], pa.int32()))
    commits = [  # (tables committed, the views written again)
        ({"claims": claims(1, 5, 1)}, ["claims"]),
        ({"claims": claims(1, 5, 2, prefix="s"), "rounds": rounds}, ["claims", "rounds"]),
        ({"scores": one_row("scores")}, []),  # no row written (its key is stored): no new version
    ]
    for i, (tables, expected) in enumerate(commits):
        before = lake.state().versions
        written.clear()
        lake.commit(f"c{i}", tables)
        after = lake.state().versions
        assert sorted(written) == sorted(name for name in TABLES if after[name] != before[name]) == expected
        full = build_catalog(lake.store, lake.state(), tmp_path / f"full-{i}.duckdb")
        assert catalog_contents(lake.store.catalog_path) == catalog_contents(full)
    assert catalog_contents(lake.store.catalog_path)["counts"]["claims"] == 11


def test_catalog_builds_and_checks_of_a_local_lake_open_no_database_of_their_own(
    local_config: LakeConfig, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local lake's catalog is built and checked in the process's one host database (a file
    attached to it), not in a DuckDB database set up anew for each (≈ 15 ms of CPU each, several
    builds a round); the catalog so built is what a plain ``duckdb`` session of the file reads."""
    warm = Lake.open(local_config)
    warm.commit("warm", {"claims": claims(1, 2, 1)})  # the host exists from here on
    warm.query("SELECT count(*) AS n FROM claims")  # and the query parser's database (storage/readonly_sql.py)
    made: list[str] = []
    real_connect = duckdb.connect
    monkeypatch.setattr(duckdb, "connect", lambda database=":memory:", *a, **k: made.append(str(database)) or real_connect(database, *a, **k))
    lake = Lake.open(local_config)
    for i in range(3):
        lake.commit(f"c{i}", {"claims": claims(1, 5, i + 1, prefix=f"c{i}-")})
    forget_shown()  # checked afresh: read from the file, as another process would
    assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 17
    sandboxes = [m for m in made if m == ":memory:"]  # each query's own sandbox (storage/readonly_sql.py)
    assert made == sandboxes and len(sandboxes) == 1, made
    monkeypatch.undo()
    with duckdb.connect(str(lake.store.catalog_path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM claims").fetchall() == [(17,)]


def test_a_build_of_the_state_the_catalog_already_shows_succeeds_and_changes_nothing(local_config: LakeConfig) -> None:
    """Two writers that commit at once can both find the catalog behind and build it: the second
    copies the first's catalog, which already shows the state (no view to write again)."""
    lake = Lake.open(local_config)
    lake.commit("a", {"claims": claims(1, 5, 1), "scores": one_row("scores")})
    before = catalog_contents(lake.store.catalog_path)
    assert build_catalog(lake.store, lake.state()) == lake.store.catalog_path
    assert catalog_contents(lake.store.catalog_path) == before
    assert catalog_is_current(lake.store, lake.state())


def test_a_catalog_built_by_other_code_is_rebuilt_whole(local_config: LakeConfig) -> None:
    lake = Lake.open(local_config)
    lake.commit("a", {"claims": claims(1, 5, 1)})
    with duckdb.connect(str(lake.store.catalog_path)) as con:  # as an earlier GRACE might have left it
        con.execute("UPDATE _grace_catalog SET code = 'earlier'")
        con.execute("CREATE OR REPLACE VIEW documents AS SELECT 1 AS stale")
    lake.commit("b", {"claims": claims(1, 5, 2, prefix="s")})
    assert [c for c, _ in describe(lake, "documents")] == [f.name for f in TABLES["documents"].schema]
    assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 10
    # one showing the lake as it is is rebuilt too, before the next query: the views are this code's
    with duckdb.connect(str(lake.store.catalog_path)) as con:
        con.execute("UPDATE _grace_catalog SET code = 'earlier'")
        con.execute("CREATE OR REPLACE VIEW documents AS SELECT 1 AS stale")
    assert lake.query("SELECT count(*) AS n FROM documents")["n"][0] == 0
    assert [c for c, _ in describe(lake, "documents")] == [f.name for f in TABLES["documents"].schema]


@pytest.mark.parametrize("forgery", [
    "CREATE OR REPLACE VIEW claims AS SELECT * FROM claims WHERE false",
    "CREATE OR REPLACE VIEW round_metrics AS SELECT 1 AS round",
    "INSERT INTO lake_files SELECT * FROM lake_files LIMIT 1",
    "UPDATE _grace_catalog SET built_at = 'now'",
])
def test_a_catalog_changed_outside_grace_is_never_served(local_config: LakeConfig, forgery: str) -> None:
    """A plain duckdb session on the lake's catalog file redefines a view (or edits a table):
    the seal no longer verifies, so the next query rebuilds the catalog instead of serving it."""
    lake = Lake.open(local_config)
    lake.commit("two", {"claims": claims(2, 3, 1)})
    honest = lake.query("SELECT count(*) AS n FROM claims")["n"][0]
    with duckdb.connect(str(lake.store.catalog_path)) as con:
        con.execute(forgery)
    fresh = Lake.open(local_config)  # another process: nothing remembered of the file
    forget_shown()
    assert fresh.query("SELECT count(*) AS n FROM claims")["n"][0] == honest == 6
    assert fresh.query("SELECT count(*) AS n FROM round_metrics")["n"][0] == 0
    with duckdb.connect(str(lake.store.catalog_path), read_only=True) as con:
        assert con.sql("SELECT count(*) FROM lake_files").fetchall()[0][0] == len(lake.state().table("claims").files)


def test_a_catalog_without_its_key_or_from_another_folder_is_rebuilt(local_config: LakeConfig, tmp_path: Path) -> None:
    lake = Lake.open(local_config)
    lake.commit("two", {"claims": claims(2, 3, 1)})
    lake.query("SELECT 1")
    key = lake.store.catalog_path.parent / SEAL_KEY_FILE
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
    built = lake.store.catalog_path.stat().st_ino
    key.unlink()
    forget_shown()
    assert not catalog_is_current(lake.store, lake.state())
    lake.query("SELECT 1")
    assert lake.store.catalog_path.stat().st_ino != built and key.is_file()
    assert catalog_is_current(lake.store, lake.state())


def test_a_stale_or_moved_catalog_is_rebuilt_before_a_query(local_config: LakeConfig, tmp_path: Path) -> None:
    lake = Lake.open(local_config)
    lake.commit("first", {"claims": claims(1, 5, 1)})
    commit_tables(lake.tables, lake.log, "second", {"claims": claims(1, 5, 2, prefix="s")})  # no refresh
    with duckdb.connect(str(lake.store.catalog_path), read_only=True) as con:
        assert con.sql("SELECT count(*) FROM claims").fetchall()[0][0] == 5
    assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 10

    moved = tmp_path / "moved-lake"
    shutil.move(lake.store.uri, moved)
    again = Lake.open(LakeConfig(lake=str(moved)))
    assert again.query("SELECT count(*) AS n FROM claims")["n"][0] == 10
    with duckdb.connect(str(moved / "catalog.duckdb"), read_only=True) as con:
        paths = [r[0] for r in con.sql("SELECT path FROM lake_files").fetchall()]
    assert paths and all(p.startswith(str(moved)) for p in paths)


def test_a_catalog_put_back_from_an_older_state_is_rebuilt_before_a_query(local_config: LakeConfig, tmp_path: Path) -> None:
    """The process remembers the state of the catalogs it built by file identity, not by path: an
    older catalog put in place (a restored backup, another writer) is read again, found behind and rebuilt."""
    lake = Lake.open(local_config)
    lake.commit("first", {"claims": claims(1, 5, 1)})
    older = tmp_path / "older.duckdb"
    shutil.copy(lake.store.catalog_path, older)
    lake.commit("second", {"claims": claims(1, 5, 2, prefix="s")})
    assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 10
    os.replace(older, lake.store.catalog_path)
    assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 10


def test_another_lake_at_the_same_place_with_the_same_versions_is_queried_as_it_is(lake_config: LakeConfig) -> None:
    """A lake removed and made again where it was, up to the same table versions, is another
    lake: a catalog of the first (kept in the catalog cache for an S3 lake, in the private
    folder for time travel) must not be served for it, neither now nor as of a round."""
    count = "SELECT count(*) AS n FROM claims"
    first = Lake.open(lake_config)
    first.commit("round1", {"claims": claims(1, 5, 1)})
    assert first.query(count)["n"][0] == 5 and first.query(count, as_of_round=1)["n"][0] == 5
    versions = first.state().versions
    remove_lake(lake_config)
    forget_shown()  # another process, as a new `grace sql` is
    second = Lake.open(lake_config)
    second.commit("round1", {"claims": claims(1, 7, 1, prefix="n")})
    assert second.state().versions == versions
    assert second.query(count)["n"][0] == 7
    assert second.query(count, as_of_round=1)["n"][0] == 7
    assert sorted(second.query("SELECT claim_id FROM claims")["claim_id"]) == [f"n{i}" for i in range(7)]


def test_s3_catalog_lives_in_the_cache_and_names_s3_urls(s3_config: LakeConfig) -> None:
    lake = Lake.open(s3_config)
    lake.commit("c", {"claims": claims(2, 5, 1)})
    path = lake.catalog()
    assert path.is_file() and str(path).startswith(str(s3_config.catalog_cache))
    with duckdb.connect(str(path), read_only=True) as con:
        sql = con.sql("SELECT sql FROM duckdb_views() WHERE view_name = 'claims'").fetchall()[0][0]
    assert f"{s3_config.lake}/tables/claims/round=1/part-" in sql
    assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 10


def test_s3_queries_ask_s3_once_per_process_for_a_data_files_size(s3_config: LakeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB asks for the size and time of each Parquet file several times per query; what S3
    said of a data file (never rewritten under its name) is asked once per process. A file
    removed since fails the query, clearly, instead of reading as empty."""
    from fsspec.implementations.arrow import ArrowFSWrapper

    asked: list[str] = []
    real_info = ArrowFSWrapper.info
    monkeypatch.setattr(ArrowFSWrapper, "info", lambda self, path, **kw: asked.append(path) or real_info(self, path, **kw))
    lake = Lake.open(s3_config)
    for r in (1, 2, 3):
        lake.commit(f"c{r}", {"claims": claims(2, 5, r, prefix=f"r{r}-")})  # each commit rebuilds the catalog's views
        assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 10 * r
    assert Lake.open(s3_config).query("SELECT count(DISTINCT claim_id) AS n FROM claims")["n"][0] == 30
    files = {f.uri.removeprefix("s3://") for f in lake.state().table("claims").files}
    data_files = [p for p in asked if p.endswith(".parquet")]
    assert sorted(data_files) == sorted(files), "each data file asked for once, by the first query that read it"
    gone = lake.state().table("claims").files[0]
    remove_lake(s3_config, gone.uri.removeprefix(f"{s3_config.lake}/"))
    with pytest.raises(QueryFailed, match=r"^FileNotFoundError: .*Path does not exist .*/tables/claims/round=1/part-"):
        lake.query("SELECT count(*) AS n FROM claims")


def test_leftovers_of_killed_catalog_builds_are_removed_by_a_later_build(local_config: LakeConfig) -> None:
    lake = Lake.open(local_config)
    lake.commit("c", {"claims": claims(1, 2, 1)})
    folder = lake.store.catalog_path.parent
    old = [folder / ".catalog.duckdb.123.deadbeef.tmp", folder / ".catalog.duckdb.123.deadbeef.tmp.wal"]
    fresh = folder / ".catalog.duckdb.456.cafebabe.tmp"  # a build running right now
    for f in (*old, fresh):
        f.write_bytes(b"partial")
    an_hour_ago = time.time() - 3600
    for f in old:
        os.utime(f, (an_hour_ago, an_hour_ago))
    lake.commit("d", {"claims": claims(1, 2, 1, prefix="d")})
    assert not any(f.exists() for f in old) and fresh.exists()


READER = (
    "import json, sys; sys.path.insert(0, sys.argv[2]); from storage.config import LakeConfig; from storage.lake import Lake;"
    "lake = Lake.open(LakeConfig(lake=sys.argv[1]), must_exist=True);"
    "print(json.dumps([lake.query('SELECT count(*) AS n FROM claims')['n'][0], str(lake.catalog())]))"
)


def test_a_reader_that_cannot_write_the_lake_still_queries_a_stale_catalog(tmp_path_factory: pytest.TempPathFactory) -> None:
    base = Path(tempfile.mkdtemp(prefix="grace-ro-"))  # readable by others, unlike pytest's own folders
    try:
        root = base / "lake"
        lake = Lake.open(LakeConfig(lake=str(root)))
        lake.commit("first", {"claims": claims(1, 5, 1)})
        commit_tables(lake.tables, lake.log, "second", {"claims": claims(1, 5, 2, prefix="s")})  # catalog now stale
        before = lake.store.catalog_path.read_bytes()
        for folder, dirs, files in os.walk(base):
            os.chmod(folder, 0o555)
        as_other_user = os.geteuid() == 0  # root writes anywhere: read as 'nobody' instead
        out = subprocess.run(
            [sys.executable, "-c", READER, str(root), str(REPO)], capture_output=True, text=True, cwd="/",
            preexec_fn=(lambda: (os.setgid(65534), os.setuid(65534))) if as_other_user else None,
        )
        assert out.returncode == 0, out.stderr
        count, catalog = json.loads(out.stdout)
        assert count == 10 and not catalog.startswith(str(root))  # a private catalog, fresh
        assert lake.store.catalog_path.read_bytes() == before  # the lake was not touched
    finally:
        for folder, dirs, files in os.walk(base):
            os.chmod(folder, 0o755)
        shutil.rmtree(base)


def test_time_travel_shows_the_lake_as_of_a_round(lake: Lake) -> None:
    lake.commit("round1", {"claims": claims(2, 5, 1)})
    lake.commit("round1/more", {"claims": claims(1, 5, 1, prefix="m")})
    lake.commit("round2", {"claims": claims(2, 5, 2, prefix="r2-")})
    lake.commit("round3", {"claims": claims(2, 5, 3, prefix="r3-")})
    per_round = "SELECT round, count(*) AS n FROM claims GROUP BY round ORDER BY round"
    assert lake.query(per_round).rows() == [(1, 15), (2, 10), (3, 10)]
    assert lake.query(per_round, as_of_round=1).rows() == [(1, 15)]
    assert lake.query(per_round, as_of_round=2).rows() == [(1, 15), (2, 10)]
    assert lake.query("SELECT count(*) AS n FROM lake_files", as_of_round=1)["n"][0] == 2
    with pytest.raises(LakeError, match="no commit of round 0 or earlier"):
        lake.query(per_round, as_of_round=0)
    with pytest.raises(LakeError, match="round 99 is after the lake's last round \\(3\\)"):  # before: the current lake, silently
        lake.query(per_round, as_of_round=99)
    assert lake.query(per_round).rows() == [(1, 15), (2, 10), (3, 10)]  # the current catalog is left alone


# --- derived views on a hand-built two-round lake ----------------------------------------

def claim(doc: str, cid: str, rnd: int, kind: str = "response") -> dict:
    return {"doc_id": doc, "claim_id": cid, "round": rnd, "source_id": f"{kind}:{doc}", "source_kind": kind, "text": f"text of {cid}"}


def score(doc: str, cid: str, rnd: int, status: str) -> dict:
    return {
        "doc_id": doc, "claim_id": cid, "round": rnd, "status": status, "in_prior": status == "grounded",
        "contradicted": False, "rejected": False, "closeness": 0.5, "closeness_norm": 0.5, "novelty": 1.0,
        "confidence": 0.5, "priority": 0.4 if status == "boundary" else None,
    }


def deferral(doc: str, cid: str, rnd: int, reviewer: str, deadline: datetime | None = None) -> dict:
    return {
        "doc_id": doc, "claim_id": cid, "round": rnd, "reviewer": reviewer, "priority": 0.4, "confidence": 0.5,
        "cost": 0.1, "gain": 1.0, "deadline": deadline, "created_at": T0,
    }


def verdict(doc: str, cid: str, rnd: int, reviewer: str, value: str, seconds: float, minute: int = 0) -> dict:
    return {
        "doc_id": doc, "claim_id": cid, "round": rnd, "reviewer": reviewer, "verdict": value,
        "seconds_spent": seconds, "channel": "file", "created_at": T0 + timedelta(minutes=minute),
    }


@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    """Round 1: d1 {c1 g, c2 b, c3 g (from a prior), c7 b}, d2 {c4 b, c5 r}; c2 and c4 deferred,
    c2 confirmed by alice and bob (bob changed his mind: his latest vote counts), c4 rejected.
    Round 2: only d1 rescored: c2 grounded by review, c7 grounded by cascade, new c6 boundary,
    deferred to carol (overdue) and dave (open)."""
    lake = Lake.open(LakeConfig(lake=str(tmp_path_factory.mktemp("two") / "lake")))
    r1_claims = [claim("d1", "c1", 1), claim("d1", "c2", 1), claim("d1", "c3", 1, "prior"), claim("d1", "c7", 1),
                 claim("d2", "c4", 1), claim("d2", "c5", 1)]
    r1_scores = [score("d1", "c1", 1, "grounded"), score("d1", "c2", 1, "boundary"), score("d1", "c3", 1, "grounded"),
                 score("d1", "c7", 1, "boundary"), score("d2", "c4", 1, "boundary"), score("d2", "c5", 1, "refuted")]
    lake.commit("round1/build+score", {"claims": pl.DataFrame(r1_claims), "scores": pl.DataFrame(r1_scores)})
    lake.commit("round1/dispatch", {"deferrals": pl.DataFrame([
        deferral("d1", "c2", 1, "alice"), deferral("d1", "c2", 1, "bob"), deferral("d2", "c4", 1, "alice"),
    ])})
    lake.commit("round1/verdicts", {"verdicts": pl.DataFrame([
        verdict("d1", "c2", 1, "alice", "confirm", 20.0), verdict("d1", "c2", 1, "bob", "reject", 50.0, minute=1),
        verdict("d1", "c2", 1, "bob", "confirm", 40.0, minute=2), verdict("d2", "c4", 1, "alice", "reject", 30.0),
    ])})
    r2_scores = [score("d1", "c1", 2, "grounded"), score("d1", "c2", 2, "grounded"), score("d1", "c3", 2, "grounded"),
                 score("d1", "c6", 2, "boundary"), score("d1", "c7", 2, "grounded")]
    votes = lake.read("verdicts").select("doc_id", "claim_id", "reviewer", "verdict", "round", "created_at")
    lake.commit("round2/build+score", {"claims": pl.DataFrame([claim("d1", "c6", 2)]), "scores": pl.DataFrame(r2_scores),
                                       "decisions": decide(votes, 1).with_columns(round=pl.lit(2, pl.Int32))})
    now = datetime.now(timezone.utc)
    lake.commit("round2/dispatch", {"deferrals": pl.DataFrame([
        deferral("d1", "c6", 2, "carol", now - timedelta(days=1)), deferral("d1", "c6", 2, "dave", now + timedelta(days=1)),
    ])})
    assert fill_scoring_counts(lake, 1) == 2  # scores written by hand: their counts back-filled, one document per commit
    return lake


def test_claim_status_takes_each_document_from_its_latest_scoring(two_rounds: Lake) -> None:
    rows = two_rounds.query("SELECT claim_id, status, scored_round FROM claim_status ORDER BY claim_id").rows()
    assert rows == [("c1", "grounded", 2), ("c2", "grounded", 2), ("c3", "grounded", 2), ("c4", "boundary", 1),
                    ("c5", "refuted", 1), ("c6", "boundary", 2), ("c7", "grounded", 2)]
    texts = two_rounds.query("SELECT claim_id, text, first_round, from_response FROM claim_texts ORDER BY claim_id")
    assert texts.filter(pl.col("claim_id") == "c3").row(0) == ("c3", "text of c3", 1, False)
    assert texts.filter(pl.col("claim_id") == "c6").row(0) == ("c6", "text of c6", 2, True)


def test_round_metrics_match_hand_values(two_rounds: Lake) -> None:
    m = {r["round"]: r for r in two_rounds.query("SELECT * FROM round_metrics").iter_rows(named=True)}
    assert sorted(m) == [1, 2]
    one, two = m[1], m[2]
    assert (one["n_documents"], one["n_claims"], one["n_grounded"], one["n_boundary"], one["n_refuted"]) == (2, 6, 2, 3, 1)
    assert (one["n_response_claims"], one["pcr"], one["kf"]) == (5, pytest.approx(0.2), pytest.approx(1.5))
    assert (one["n_deferred"], one["n_confirmed"], one["n_rejected"], one["n_abstained"]) == (2, 1, 1, 0)
    assert (one["yield"], one["yield_decided"], one["n_cascade"], one["cascade"]) == (0.5, 0.5, 0, 0.0)
    assert (two["n_claims"], two["n_grounded"], two["n_boundary"], two["n_refuted"]) == (7, 4, 2, 1)
    assert (two["n_response_claims"], two["pcr"], two["kf"]) == (6, pytest.approx(0.5), pytest.approx(1.0))
    # c6 went to two reviewers: one deferred claim, no verdict yet
    assert (two["n_deferred"], two["yield"], two["yield_decided"]) == (1, 0.0, None)
    assert (two["n_cascade"], two["cascade"]) == (1, pytest.approx(0.5))


def test_round_metrics_agree_with_the_core_metrics(two_rounds: Lake) -> None:
    # state at the end of round 2 (d1 from round 2, d2 from round 1), computed without the views
    scores = two_rounds.read("scores")
    latest = scores.group_by("doc_id").agg(pl.col("round").max())
    state = scores.join(latest, on=["doc_id", "round"]).select("doc_id", "claim_id", "status")
    from_response = two_rounds.read("claims").group_by("doc_id", "claim_id").agg(
        from_response=(pl.col("source_kind") == "response").any()
    )
    core = core_round_metrics(state.join(from_response, on=["doc_id", "claim_id"]), None,
                              pl.DataFrame({"doc_id": ["d1"], "claim_id": ["c7"]}))
    view = two_rounds.query("SELECT * FROM round_metrics WHERE round = 2").row(0, named=True)
    assert (core["documents"], core["claims"], core["grounded"], core["boundary"], core["refuted"]) == (
        view["n_documents"], view["n_claims"], view["n_grounded"], view["n_boundary"], view["n_refuted"])
    assert (core["pcr"], core["kf"], core["cascade"]) == pytest.approx((view["pcr"], view["kf"], view["cascade"]))

    core1 = core_round_metrics(state.head(0).with_columns(from_response=pl.lit(True)), decide(two_rounds.read("verdicts")))
    view1 = two_rounds.query("SELECT * FROM round_metrics WHERE round = 1").row(0, named=True)
    assert (core1["deferred"], core1["confirmed"], core1["rejected"], core1["yield"], core1["yield_decided"]) == (
        view1["n_deferred"], view1["n_confirmed"], view1["n_rejected"], view1["yield"], view1["yield_decided"])


def metrics_as_of_each_round(lake: Lake) -> dict[int, dict]:
    """round_metrics' status, coverage and cascade columns computed directly: for each round
    with a scoring step, every document's latest scoring up to it (the view's definition)."""
    scores, claims = lake.read("scores"), lake.read("claims")
    decisions = lake.read("decisions")
    rounds = sorted(set(scores["round"]) | set(lake.read("rounds").filter(pl.col("stage") == "score")["round"]))
    response = claims.filter(pl.col("source_kind") == "response").group_by("doc_id", "claim_id").agg(first_round=pl.col("round").min())

    def state(r: int) -> pl.DataFrame:
        upto = scores.filter(pl.col("round") <= r)
        return upto.join(upto.group_by("doc_id").agg(pl.col("round").max()), on=["doc_id", "round"]).select("doc_id", "claim_id", "status")

    out, before = {}, None
    for r in rounds:
        now = state(r)
        if now.height:
            covered = now.join(response.filter(pl.col("first_round") <= r), on=["doc_id", "claim_id"])
            confirmed = decisions.filter((pl.col("decision") == "confirm") & (pl.col("round") <= r)).select("doc_id", "claim_id")
            cascade = 0 if before is None else (
                before.filter(pl.col("status") == "boundary").join(now.filter(pl.col("status") == "grounded"), on=["doc_id", "claim_id"])
                .join(confirmed, on=["doc_id", "claim_id"], how="anti").height)
            out[r] = {"n_documents": now["doc_id"].n_unique(), "n_claims": now.height,
                      **{f"n_{st}": now.filter(pl.col("status") == st).height for st in ("grounded", "boundary", "refuted")},
                      "n_response_claims": covered.height, "n_grounded_response": covered.filter(pl.col("status") == "grounded").height,
                      "n_cascade": cascade}
        before = now
    return out


def test_round_metrics_equal_the_state_as_of_each_round_over_many_rounds(tmp_path: Path) -> None:
    # seven rounds over seven documents; each round from 2 on rescores three of d0-d5 (claims change
    # status, some are added), round 4 rescores nothing (a score stage row only), some claims are
    # confirmed, and dz's claim is decomposed from a response in round 6, a round that does not rescore dz
    rng = random.Random(7)
    lake = Lake.open(LakeConfig(lake=str(tmp_path / "lake")))
    statuses = ("grounded", "boundary", "refuted")
    known: dict[str, list[str]] = {f"d{i}": [] for i in range(6)}
    for r in range(1, 8):
        if r == 4:
            lake.commit("round4/score", {"rounds": pl.DataFrame([stage_row(4)])})
            continue
        docs = sorted(known) if r == 1 else sorted(rng.sample(sorted(known), 3))
        new_claims, rows = [], []
        for d in docs:
            for k in range(rng.randint(1 if r == 1 else 0, 3)):
                cid = f"{d}-c{r}-{k}"
                known[d].append(cid)
                new_claims.append(claim(d, cid, r, "response" if rng.random() < 0.7 else "prior"))
            rows += [score(d, c, r, rng.choice(statuses)) for c in known[d]]
        if r == 1:  # dz: scored once; its prior claim is decomposed from a response too in round 6
            new_claims.append(claim("dz", "dz-c", 1, "prior"))
            rows.append(score("dz", "dz-c", 1, "grounded"))
        tables = {"claims": pl.DataFrame(new_claims), "scores": pl.DataFrame(rows)}
        confirm = [rw for rw in rows if rw["status"] == "grounded" and rng.random() < 0.2]
        if confirm:
            tables["decisions"] = pl.DataFrame([{"doc_id": c["doc_id"], "claim_id": c["claim_id"], "round": r, "n_votes": 1, "n_confirm": 1,
                                                 "n_reject": 0, "n_abstain": 0, "quorum": 1, "decision": "confirm"} for c in confirm])
        lake.commit(f"round{r}/score", tables)
    lake.commit("round6/late-response", {"claims": pl.DataFrame([claim("dz", "dz-c", 6, "response")])})

    assert lake.query("SELECT count(*) AS n FROM round_metrics")["n"][0] == 0  # no counts stored yet
    assert fill_scoring_counts(lake, 3) == 7
    assert fill_scoring_counts(lake, 3) == 0  # idempotent: nothing left to fill
    assert lake.is_committed(COUNTS_COMPLETE)  # and recorded: later rounds do not scan the scores for missing counts
    expected = metrics_as_of_each_round(lake)
    view = {m["round"]: m for m in lake.query("SELECT * FROM round_metrics").iter_rows(named=True)}
    assert sorted(view) == sorted(expected) == [1, 2, 3, 4, 5, 6, 7]
    for r, want in expected.items():
        got = view[r]
        counts = {k: v for k, v in want.items() if k != "n_grounded_response"}
        assert {k: got[k] for k in counts} == counts, r
        assert got["pcr"] == pytest.approx(want["n_grounded_response"] / want["n_response_claims"] if want["n_response_claims"] else None), r
    assert sum(m["n_cascade"] for m in expected.values()) > 0  # the case is exercised


def hashed_scans(node: dict) -> list[dict]:
    """The scans each hash join of a DuckDB JSON plan builds its table from: its right input,
    followed down through single-input operators."""
    found = []
    if node.get("name") == "HASH_JOIN" and len(node.get("children", [])) == 2:
        side = node["children"][1]
        while len(side.get("children", [])) == 1 and side.get("name") not in ("HASH_JOIN", "HASH_GROUP_BY"):
            side = side["children"][0]
        if side.get("name") == "READ_PARQUET":
            found.append(side)
    for child in node.get("children", []):
        found += hashed_scans(child)
    return found


def test_round_metrics_streams_the_claims_through_its_joins(tmp_path: Path) -> None:
    # a nightly lake's shape: many claims per document, of priors and responses, and one large
    # scoring then small ones, so that DuckDB estimates the scoring_counts scan (its first file's
    # rows times its files) above the claims scan once filtered by source_kind: it used to hash
    # the claims (at 100,000 documents: 20M rows, 1.4 GB, once over the SQL memory limit).
    # Unfiltered, the claims scan is estimated above the scorings, which are hashed instead
    lake = Lake.open(LakeConfig(lake=str(tmp_path / "lake")))
    docs = [f"d{i:04d}" for i in range(2000)]
    counts = lambda d, r: {"doc_id": d, "round": r, **dict.fromkeys(SCORING_COUNTS, 1)}  # noqa: E731
    claim_rows = [claim(d, f"{d}-c{k}", 1, "prior" if k % 2 else "response") for d in docs for k in range(50)]
    lake.commit("round1", {"claims": pl.DataFrame(claim_rows),
                           "scoring_counts": pl.DataFrame([counts(d, 1) for d in docs])})
    for r in range(2, 16):
        lake.commit(f"round{r}", {"scoring_counts": pl.DataFrame([counts(docs[r], r)])})
    assert lake.query("SELECT n_documents FROM round_metrics ORDER BY round")["n_documents"].to_list() == [2000] * 15
    with duckdb.connect(str(lake.store.catalog_path), read_only=True) as con:
        plan = json.loads(con.sql("EXPLAIN (FORMAT json) SELECT * FROM round_metrics").fetchall()[0][1])
    hashed = [scan for root in plan for scan in hashed_scans(root)]
    assert hashed, "the plan has hash joins over scans"
    assert not [scan for scan in hashed if "source_kind" in json.dumps(scan)], "a claims scan is hashed"


def stage_row(rnd: int) -> dict:
    return {"round": rnd, "stage": "score", "started_at": T0, "finished_at": T0, "n_documents": 0, "detail_json": "{}"}


def test_verdict_outcomes_count_each_reviewers_latest_vote(two_rounds: Lake) -> None:
    rows = two_rounds.query(
        "SELECT claim_id, n_votes, n_confirm, n_reject, outcome, decided_round FROM verdict_outcomes ORDER BY claim_id"
    ).rows()
    assert rows == [("c2", 2, 2, 0, "confirm", 2), ("c4", 1, 0, 1, "reject", 2)]
    assert two_rounds.query("SELECT count(*) AS n FROM verdicts")["n"][0] == 4  # every raw vote is kept


def test_review_queue_lists_unanswered_deferrals_with_overdue_flag(two_rounds: Lake) -> None:
    rows = two_rounds.query("SELECT claim_id, reviewer, round, overdue, status, text FROM review_queue ORDER BY reviewer").rows()
    assert rows == [("c6", "carol", 2, True, "boundary", "text of c6"), ("c6", "dave", 2, False, "boundary", "text of c6")]


def test_reviewer_stats_count_time_and_agreement(two_rounds: Lake) -> None:
    stats = {r["reviewer"]: r for r in two_rounds.query("SELECT * FROM reviewer_stats WHERE round = 1").iter_rows(named=True)}
    alice, bob = stats["alice"], stats["bob"]
    assert (alice["n_verdicts"], alice["n_confirm"], alice["n_reject"], alice["mean_seconds"]) == (2, 1, 1, 25.0)
    assert (bob["n_verdicts"], bob["n_confirm"], bob["n_reject"], bob["mean_seconds"]) == (1, 1, 0, 40.0)
    assert alice["agreement"] == 1.0 and bob["agreement"] == 1.0
    assert alice["fleiss_kappa"] is None  # one multi-rated claim, all confirm: chance agreement is 1


def test_fleiss_kappa_per_round(local_config: LakeConfig) -> None:
    lake = Lake.open(local_config)
    votes = [("a", "confirm", "confirm"), ("b", "reject", "reject"), ("c", "confirm", "reject")]
    rows = [verdict("d", cid, 3, who, v, 10.0) for cid, v1, v2 in votes for who, v in (("r1", v1), ("r2", v2))]
    lake.commit("kappa", {"deferrals": pl.DataFrame([deferral("d", cid, 3, who) for cid, _, _ in votes for who in ("r1", "r2")]),
                          "verdicts": pl.DataFrame(rows)})
    lake.commit("kappa/settle", {"decisions": decide(lake.read("verdicts"), 2).with_columns(round=pl.lit(4, pl.Int32))})
    stats = lake.query("SELECT reviewer, fleiss_kappa, agreement FROM reviewer_stats ORDER BY reviewer").rows()
    # P̄ = (1 + 1 + 0) / 3, P_e = 0.5² + 0.5²  →  κ = (2/3 − 1/2) / (1 − 1/2) = 1/3
    assert [r[1] for r in stats] == [pytest.approx(1 / 3)] * 2
    # claim c is a tie (abstain outcome): each reviewer agrees on 2 of 3 multi-rated claims
    assert [r[2] for r in stats] == [pytest.approx(2 / 3)] * 2


@pytest.mark.parametrize("folder", ["plain", "a=b", "round=7"])
def test_a_partitioned_view_gives_each_row_its_round_wherever_the_lake_is(tmp_path: Path, folder: str) -> None:
    """The views read the round from the round=N/ folders in one scan; a lake under a folder
    whose name has an "=" gets one branch per round instead (DuckDB reads every key=value
    folder as a partition: under "round=7" every row would be of round 7)."""
    lake = Lake.open(LakeConfig(lake=str(tmp_path / folder / "lake")))
    lake.commit("two rounds", {"claims": pl.concat([claims(2, 3, 1), claims(1, 4, 2, prefix="d")])})
    per_round = lake.query("SELECT round, count(*) AS n FROM claims GROUP BY round ORDER BY round")
    assert per_round.rows() == [(1, 6), (2, 4)]
    assert lake.query("SELECT count(*) AS n FROM claims WHERE round = 2")["n"].to_list() == [4]
    assert dict(lake.query("DESCRIBE claims").select("column_name", "column_type").rows())["round"] == "INTEGER"


def test_a_view_lists_its_smallest_files_first(lake: Lake) -> None:
    # DuckDB binds a view by reading its first file's footer: a large compacted file listed
    # first would cost every query of the table that much, even one that skips its partition
    lake.commit("big", {"claims": claims(400, 50, 1)})
    lake.commit("small", {"claims": claims(2, 5, 2, prefix="s")})
    lake.commit("middle", {"claims": claims(40, 50, 3, prefix="m")})
    with duckdb.connect(str(lake.catalog()), read_only=True) as con:
        sql = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'claims'").fetchone()[0]
    files = lake.state().table("claims").files
    listed = sorted(files, key=lambda f: sql.index(f.uri))
    assert [f.round for f in listed] == [2, 3, 1]
    assert [f.bytes for f in listed] == sorted(f.bytes for f in files)
    assert lake.query("SELECT count(*) AS n FROM claims WHERE round > 1")["n"][0] == 10 + 2000
