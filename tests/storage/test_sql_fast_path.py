"""``grace sql`` on a lake its catalog shows as it is: no Delta reader, polars or Arrow, and no
loss or tampering hidden by skipping the read (storage/catalog_seal.py, storage/sql_access.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from grace_core.errors import LakeError
from storage.commit import commit_tables
from storage.catalog_seal import current_catalog, forget_shown
from storage.config import LakeConfig
from storage.lake import Lake
from storage.log_listing import lake_fingerprint
from storage.sql_access import sql_access
from tests.storage.sample_rows import claims

REPO = Path(__file__).resolve().parents[2]
GRACE = [sys.executable, "-c", "from flows.cli import main\nmain()"]


def grace_sql(lake: Lake, sql: str, *extra: str, profile: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRACE_")}
    if lake.config.s3_endpoint_url:
        env |= {"GRACE_S3_ENDPOINT_URL": lake.config.s3_endpoint_url, "GRACE_CATALOG_CACHE": str(lake.config.catalog_cache)}
    if profile:
        env["PYTHONPROFILEIMPORTTIME"] = "1"
    return subprocess.run([*GRACE, "sql", sql, "--lake", lake.uri, *extra], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def imported(res: subprocess.CompletedProcess) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}


def delta_log(lake: Lake, table: str) -> Path:
    return Path(lake.uri) / "tables" / table / "_delta_log"


def latest_entry(lake: Lake, table: str) -> Path:
    return sorted(delta_log(lake, table).glob("*.json"))[-1]


@pytest.fixture
def lake(local_config: LakeConfig) -> Lake:
    lake = Lake.open(local_config)
    lake.commit("a", {"claims": claims(1, 5, 1)})
    lake.commit("b", {"claims": claims(3, 3, 1, prefix="s")})
    assert lake.query("SELECT count(*) AS n FROM claims")["n"][0] == 14
    return lake


def test_a_current_catalog_is_queried_without_reading_a_table(lake: Lake) -> None:
    res = grace_sql(lake, "SELECT count(*) AS n FROM claims", "--format", "csv", profile=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "n\n14\n"
    modules = imported(res)
    assert "duckdb" in modules and "storage.catalog_seal" in modules  # the import log is read right
    heavy = {"polars", "pyarrow", "deltalake", "numpy", "prefect", "torch", "storage.lake", "storage.delta_tables"}
    assert {m for m in modules if m in heavy or m.split(".")[0] in heavy} == set()


def test_a_commit_since_the_catalog_was_built_is_seen(lake: Lake) -> None:
    before = lake_fingerprint(lake.store)
    assert current_catalog(lake.store) is not None
    # a commit that rebuilt no catalog (a writer killed right after its commit): the listing differs
    commit_tables(lake.tables, lake.log, "c", {"claims": claims(1, 2, 1, prefix="t")})
    assert lake_fingerprint(lake.store) != before
    forget_shown()
    assert current_catalog(lake.store) is None
    assert grace_sql(lake, "SELECT count(*) AS n FROM claims", "--format", "csv").stdout == "n\n16\n"
    forget_shown()
    assert current_catalog(lake.store) is not None  # rebuilt: the next query is fast again


@pytest.mark.parametrize("damage", ["remove the latest entry", "rewrite the latest entry", "remove the log"])
def test_a_damaged_delta_log_is_never_hidden_by_the_catalog(lake: Lake, damage: str) -> None:
    """The catalog still shows the lake as it was; the query goes the long way and fails as every
    reader does (a lost table), or reads what the log now says, never the stale catalog."""
    entry = latest_entry(lake, "claims")
    if damage == "remove the latest entry":
        entry.unlink()
    elif damage == "rewrite the latest entry":
        entry.write_text(entry.read_text() + "\n")
    else:
        for f in delta_log(lake, "claims").iterdir():
            f.unlink()
        delta_log(lake, "claims").rmdir()
    forget_shown()
    assert current_catalog(lake.store) is None
    res = grace_sql(lake, "SELECT count(*) AS n FROM claims")
    if damage == "rewrite the latest entry":  # the same version, read again: the rows it names
        assert res.returncode == 0 and "14" in res.stdout, res.stderr
    else:
        assert res.returncode == 2 and res.stdout == ""
        assert "table claims is" in res.stderr and "restored from a backup" in res.stderr, res.stderr


def test_a_forged_or_foreign_catalog_is_not_the_fast_path(lake: Lake, tmp_path: Path) -> None:
    path = Path(lake.uri) / "catalog.duckdb"
    assert current_catalog(lake.store) is not None
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE OR REPLACE VIEW claims AS SELECT * FROM claims WHERE false")
    forget_shown()
    assert current_catalog(lake.store) is None
    assert grace_sql(lake, "SELECT count(*) AS n FROM claims", "--format", "csv").stdout == "n\n14\n"
    # a copy of the lake elsewhere: its catalog names the first lake, so the copy rebuilds its own
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", lake.uri, str(copy)], check=True)
    copied = Lake.open(LakeConfig(lake=str(copy)))
    forget_shown()
    assert current_catalog(copied.store) is None
    assert grace_sql(copied, "SELECT count(*) AS n FROM claims", "--format", "csv").stdout == "n\n14\n"
    assert current_catalog(copied.store) is not None


def test_time_travel_and_a_missing_lake_take_the_long_way(lake: Lake, tmp_path: Path) -> None:
    access = sql_access(lake.config, as_of_round=1)
    assert access.catalog != Path(lake.uri) / "catalog.duckdb"
    with pytest.raises(LakeError, match="no lake at"):
        sql_access(LakeConfig(lake=str(tmp_path / "nowhere")))
    assert not (tmp_path / "nowhere").exists()


@pytest.fixture
def s3_lake(s3_config: LakeConfig) -> Lake:
    lake = Lake.open(s3_config)
    lake.commit("a", {"claims": claims(1, 5, 1)})
    lake.commit("b", {"claims": claims(3, 3, 1, prefix="s")})
    return lake


@pytest.mark.slow
def test_an_s3_lake_whose_catalog_is_current_is_queried_without_reading_a_table(s3_lake: Lake) -> None:
    res = grace_sql(s3_lake, "SELECT count(*) AS n FROM claims", "--format", "csv", profile=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "n\n14\n"
    modules = imported(res)
    assert "storage.catalog_seal" in modules and "boto3" in modules
    heavy = {"polars", "deltalake", "prefect", "torch", "storage.lake", "storage.delta_tables"}
    assert {m for m in modules if m in heavy or m.split(".")[0] in heavy} == set()


@pytest.mark.slow
@pytest.mark.parametrize("change", ["a commit", "rewrite the latest entry", "remove the latest entry"])
def test_an_s3_lake_changed_since_its_catalog_was_built_is_read_again(s3_lake: Lake, change: str) -> None:
    """The S3 listing (names and ETags) shows every change the local listing shows: a commit that
    rebuilt no catalog, a latest log entry rewritten in place, one removed (a lost table)."""
    import boto3

    before = lake_fingerprint(s3_lake.store)
    assert current_catalog(s3_lake.store) is not None
    store = s3_lake.store
    s3 = boto3.client("s3", endpoint_url=s3_lake.config.s3_endpoint_url, region_name="us-east-1")
    latest = sorted(n for n in store.list_names("tables/claims/_delta_log") if n.endswith(".json"))[-1]
    key = f"{store.prefix}/tables/claims/_delta_log/{latest}"
    if change == "a commit":
        commit_tables(s3_lake.tables, s3_lake.log, "c", {"claims": claims(1, 2, 1, prefix="t")})
    elif change == "rewrite the latest entry":
        body = s3.get_object(Bucket=store.bucket, Key=key)["Body"].read()
        s3.put_object(Bucket=store.bucket, Key=key, Body=body + b"\n")  # the same name, other content
    else:
        s3.delete_object(Bucket=store.bucket, Key=key)
    assert lake_fingerprint(store) != before
    forget_shown()
    assert current_catalog(store) is None
    res = grace_sql(s3_lake, "SELECT count(*) AS n FROM claims", "--format", "csv")
    if change == "remove the latest entry":
        assert res.returncode == 2 and "table claims is" in res.stderr, res.stderr
    else:
        assert res.returncode == 0 and res.stdout == ("n\n16\n" if change == "a commit" else "n\n14\n"), res.stderr
        forget_shown()
        assert current_catalog(store) is not None  # rebuilt: the next query is fast again
