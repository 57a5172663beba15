"""`grace vacuum`: the files of a writer killed before its commit are deleted once past the
grace period; committed files never are (local lake and moto S3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl

from storage.config import LakeConfig
from storage.lake import Lake
from storage.vacuum import vacuum
from tests.storage.sample_rows import claims, edges

REPO = Path(__file__).resolve().parents[2]
GRACE = str(Path(sys.executable).parent / "grace")


def killed_writer(lake_config: LakeConfig, pause_at: str) -> None:
    """Run the kill tests' writer up to ``pause_at`` and kill it there."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.writer_process", lake_config.model_dump_json(), "killed-unit", pause_at],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "READY"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)


def test_vacuum_deletes_only_old_unnamed_files(lake_config: LakeConfig) -> None:
    lake = Lake.open(lake_config)
    rows = claims(6, 5, 1)
    lake.commit("base", {"claims": rows, "edges": edges(rows)})
    killed_writer(lake_config, "data-file-2")
    killed_writer(lake_config, "record")
    named = {f.path for r in lake.state().records.values() for f in r.files}
    listed = {f.rel for f in lake.store.list_tree("tables")}
    orphans = listed - named
    assert named < listed and len(orphans) >= 2
    before = (lake.read("claims").sort("claim_id"), lake.read("edges").sort("claim_id"))
    now = datetime.now(timezone.utc)

    recent = vacuum(lake, grace=timedelta(hours=24), now=now)
    assert recent.orphans == () and recent.recent == len(orphans) and recent.committed == len(named)
    dry = vacuum(lake, grace=timedelta(hours=1), now=now + timedelta(hours=2), dry_run=True)
    assert {f.rel for f in dry.orphans} == orphans and "would delete" in dry.summary()
    assert {f.rel for f in lake.store.list_tree("tables")} == listed

    done = vacuum(lake, grace=timedelta(hours=1), now=now + timedelta(hours=2))
    assert {f.rel for f in done.orphans} == orphans
    assert {f.rel for f in lake.store.list_tree("tables")} == named
    reader = Lake.open(lake_config)
    assert reader.read("claims").sort("claim_id").equals(before[0]) and reader.read("edges").sort("claim_id").equals(before[1])
    assert reader.query("SELECT count(*) AS n FROM claims")["n"][0] == rows.height
    # the killed unit can still be committed afterwards
    more = pl.concat([claims(20, 50, 1, prefix="k1-"), claims(20, 50, 2, prefix="k2-")])
    assert reader.commit("killed-unit", {"claims": more, "edges": edges(more)}).created
    assert vacuum(reader, grace=timedelta(0), now=now + timedelta(hours=2)).orphans == ()


def test_recommitting_identical_rows_refreshes_the_file(local_config: LakeConfig) -> None:
    """A writer that finds its file already present (identical rows) rewrites it, so a vacuum's
    grace period also covers files adopted from an earlier, killed writer."""
    lake = Lake.open(local_config)
    rows = claims(3, 3, 1)
    first = lake.commit("a", {"claims": rows})
    path = Path(lake.store.file_uri(first.files[0].path))
    old = datetime(2020, 1, 1, tzinfo=timezone.utc).timestamp()
    os.utime(path, (old, old))
    second = lake.commit("b", {"claims": rows})
    assert second.files[0].path == first.files[0].path
    assert path.stat().st_mtime > old


def test_cli_vacuum(local_config: LakeConfig, tmp_path: Path) -> None:
    lake = Lake.open(local_config)
    lake.commit("base", {"claims": claims(2, 2, 1)})
    killed_writer(local_config, "record")
    res = subprocess.run([GRACE, "vacuum", "--lake", local_config.lake], check=True, capture_output=True, text=True, timeout=120)
    assert "deleted 0 orphaned file(s)" in res.stdout and "4 recent unnamed file(s)" in res.stdout, res.stdout
    named = {f.path for r in lake.state().records.values() for f in r.files}
    day_ago = (datetime.now(timezone.utc) - timedelta(hours=25)).timestamp()
    for f in lake.store.list_tree("tables"):  # age every file; committed ones must survive anyway
        os.utime(lake.store.file_uri(f.rel), (day_ago, day_ago))
    res = subprocess.run([GRACE, "vacuum", "--lake", local_config.lake, "--dry-run"], check=True, capture_output=True, text=True, timeout=120)
    assert "would delete" in res.stdout and ".parquet" in res.stdout
    res = subprocess.run([GRACE, "vacuum", "--lake", local_config.lake], check=True, capture_output=True, text=True, timeout=120)
    assert "deleted 4 orphaned file(s)" in res.stdout.splitlines()[-1], res.stdout
    assert {f.rel for f in lake.store.list_tree("tables")} == named
    zero = subprocess.run([GRACE, "vacuum", "--lake", local_config.lake, "--older-than-hours", "0"], check=False, capture_output=True, text=True, timeout=120)
    assert zero.returncode == 2  # no grace period below an hour
    assert Lake.open(local_config).read("claims").height == 4
    missing = subprocess.run([GRACE, "vacuum", "--lake", str(tmp_path / "nowhere")], check=False, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and missing.stderr.startswith("grace: error: no lake at")


def test_a_commit_restores_a_file_vacuum_deleted_under_it(local_config: LakeConfig, monkeypatch) -> None:
    """The race vacuum cannot close alone: it deletes an old identical orphan right after a
    writer rewrote it, before the writer's record exists. The writer checks after its record
    and writes the file again, so the lake never names a missing file."""
    lake = Lake.open(local_config)
    rows = claims(4, 3, 1)
    store = lake.store
    real_create = store.create_bytes

    def create_after_a_vacuum(rel: str, data: bytes) -> bool:
        for f in store.list_tree("tables"):
            store.delete(f.rel)  # what a vacuum racing with this writer could do
        return real_create(rel, data)

    monkeypatch.setattr(store, "create_bytes", create_after_a_vacuum)
    result = lake.commit("raced", {"claims": rows})
    assert result.created and all(store.exists(f.path) for f in result.files)
    back = Lake.open(local_config).read("claims")
    assert back.height == rows.height and sorted(back["claim_id"]) == sorted(rows["claim_id"])
