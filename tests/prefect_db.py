"""A Prefect database migrated once per test run, copied into the homes of the tests' Prefect servers.

A server started on a new home migrates a new SQLite database and registers Prefect's block
types: 12 s of CPU, against 5 s on a database that is already there (what every start after a
user's first one finds). The tests start a dozen such servers (the session's, the browser tests',
the temporary ones of ``grace`` commands), so the tests' fixtures give them a copy of one
migrated database instead (``migrated_prefect_db`` in tests/conftest.py). The runs that stand
for a fresh clone (the README's session, the doc blocks, tests/test_doc_commands.py) keep a new
home, so the first start of a new machine is still what they run."""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

HOME_FILES = ("prefect.db", "memo_store.toml")
"""What a Prefect home holds once its server has started: the database, and the memo of the
block types registered in it (a server whose memo matches registers none again)."""

START_AND_STOP = ("from prefect.server.api.server import SubprocessASGIServer as S; "
                  "s = S(); s.start(timeout=300); s.stop()")


def migrated_database(root: Path) -> Path:
    """The folder in ``root`` holding :data:`HOME_FILES` of a home whose Prefect server started
    once; the first caller (of any pytest-xdist worker: the lock is a file in ``root``) makes it."""
    folder = root / "prefect-db"
    with (root / "prefect-db.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / HOME_FILES[0]).exists():
            home, building = root / "prefect-db-home", root / "prefect-db.building"
            for left in (home, building):  # by a worker that failed here before
                shutil.rmtree(left, ignore_errors=True)
            env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {"PREFECT_HOME": str(home)}
            started = subprocess.run([sys.executable, "-c", START_AND_STOP], env=env, timeout=600, capture_output=True, text=True)
            if started.returncode:
                raise RuntimeError(f"a Prefect server in a new home ({home}) did not start:\n{started.stderr[-3000:]}")
            building.mkdir()
            shutil.copyfile(home / "memo_store.toml", building / "memo_store.toml")
            with closing(sqlite3.connect(home / "prefect.db")) as source, closing(sqlite3.connect(building / "prefect.db")) as copy:
                source.backup(copy)  # one file, whatever the server left in its write-ahead log
            building.rename(folder)
            shutil.rmtree(home)
    return folder


def seed_home(home: Path, database: Path) -> None:
    """Give the Prefect home ``home`` a copy of the migrated database in ``database`` (a folder
    from :func:`migrated_database`); a file the home already has is kept."""
    home.mkdir(parents=True, exist_ok=True)
    for name in HOME_FILES:
        if not (home / name).exists():
            shutil.copyfile(database / name, home / name)


def harness_folder(database: Path) -> str:
    """A new temporary folder holding a copy of the migrated database in ``database`` under the
    name Prefect's ``prefect_test_harness`` gives its own (``prefect-test.db``)."""
    folder = tempfile.mkdtemp(prefix="grace-prefect-db-")
    shutil.copyfile(database / HOME_FILES[0], Path(folder) / "prefect-test.db")
    return folder
