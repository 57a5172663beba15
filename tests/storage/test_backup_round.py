"""`grace backup` while a real round runs: every backup restores to a lake that passes
`grace check` and holds whole units of work only, and a backup taken midway through the round,
once restored, finishes the round (`grace round --round 3`) to the same answers as the lake the
round ran on."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage.backup import open_location, restore_lake
from storage.check import check_lake
from storage.config import LakeConfig
from storage.lake import Lake
from tests.storage.conftest import back_up_while, copy_lake

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

GRACE = str(Path(sys.executable).with_name("grace"))
VIEWS = ("round_metrics", "claim_status", "verdict_outcomes", "deferral_outcomes")


def rows(lake: Lake, view: str) -> list[dict]:
    return lake.query(f"SELECT * FROM {view} ORDER BY ALL").to_dicts()


def round_keys(lake: Lake, round_id: int) -> set[str]:
    return {k for k, r in lake.log.records().items() if r.round == round_id}


def test_backups_taken_while_a_round_runs_restore_whole_and_finish_the_round(
    demo_lake_template: Path, tmp_path: Path, after_demo_env: dict[str, str],
) -> None:
    source = copy_lake(demo_lake_template, tmp_path / "lake")  # `grace demo`'s lake, run once per session
    config = LakeConfig(lake=str(source))
    lake = Lake.open(config)
    before = round_keys(lake, 3)
    assert not before
    running = subprocess.Popen([GRACE, "round", "--lake", str(source), "--round", "3"], env=after_demo_env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while running.poll() is None and not round_keys(lake, 3):  # it starts: nothing to back up yet
        time.sleep(0.1)
    backups, err = back_up_while(running, lake, tmp_path, limit=40, pause=0.2)
    assert running.returncode == 0, err
    finished = round_keys(lake, 3)
    assert finished
    seen = []
    for i, dest in enumerate(backups):
        _, restored = restore_lake(open_location(config, str(dest)), LakeConfig(lake=str(tmp_path / f"restored-{i}")))
        assert not check_lake(restored).problems, dest
        keys = round_keys(restored, 3)
        assert keys <= finished, dest  # only units the round committed, whole
        seen.append((len(keys), i))
    midway = [i for n, i in seen if 0 < n < len(finished)]
    print(f"{len(backups)} backups during the round; round-3 units in each: {[n for n, _ in seen]} of {len(finished)}")
    assert midway, f"no backup was taken while the round was midway: {[n for n, _ in seen]} of {len(finished)} units"
    # the latest midway backup, restored, finishes the round to the source's answers
    restored = tmp_path / "finished"
    restore_lake(open_location(config, str(backups[midway[-1]])), LakeConfig(lake=str(restored)))
    subprocess.run([GRACE, "round", "--lake", str(restored), "--round", "3"], check=True, capture_output=True, env=after_demo_env,
                   timeout=900)
    again = Lake.open(LakeConfig(lake=str(restored)))
    for view in VIEWS:
        assert rows(again, view) == rows(lake, view), view
    shutil.rmtree(restored)
