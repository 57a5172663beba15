"""The process's host database for catalog files (storage/duckdb_host.py): one file attached at a
time, written out whole when its block ends, and nothing left attached after an error."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import duckdb
import pytest

from storage.duckdb_host import catalog_connection


def test_one_catalog_file_at_a_time_is_attached_and_each_is_written_out_whole(tmp_path: Path) -> None:
    """A second thread's file waits until the first's block ended: a statement of one could
    otherwise still reference the other's database as it is detached, which then is not written
    out (a build moved such a file into place unwritten)."""
    inside, release, order = threading.Event(), threading.Event(), []

    def first() -> None:
        with catalog_connection(tmp_path / "a.duckdb", read_only=False) as con:
            con.execute("CREATE TABLE t AS SELECT range AS x FROM range(1000)")
            inside.set()
            release.wait(30)
            order.append("first done")

    def second() -> None:
        inside.wait(30)
        with catalog_connection(tmp_path / "b.duckdb", read_only=False) as con:
            order.append("second in")
            con.execute("CREATE TABLE u AS SELECT 1 AS y")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    assert inside.wait(30)
    time.sleep(0.3)
    assert order == [], "the second file is not attached while the first is"
    release.set()
    for t in threads:
        t.join(30)
    assert order == ["first done", "second in"]
    with duckdb.connect(str(tmp_path / "a.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM t").fetchall() == [(1000,)]
    with duckdb.connect(str(tmp_path / "b.duckdb"), read_only=True) as con:
        assert con.execute("SELECT * FROM u").fetchall() == [(1,)]


def test_a_block_that_fails_leaves_its_file_detached(tmp_path: Path) -> None:
    """An error inside the block (here in an explicit transaction, which then refuses every
    statement but a rollback) closes the cursor and detaches the file all the same: it can be
    attached again, and opened by another database."""
    path = tmp_path / "c.duckdb"
    with pytest.raises(duckdb.Error):
        with catalog_connection(path, read_only=False) as con:
            con.execute("CREATE TABLE t AS SELECT 1 AS x")
            con.execute("BEGIN")
            con.execute("SELECT error('boom')")
    with catalog_connection(path, read_only=False) as con:
        assert con.execute("SELECT count(*) FROM t").fetchall() == [(1,)]
    with duckdb.connect(str(path)) as con:
        assert con.execute("SELECT count(*) FROM t").fetchall() == [(1,)]
