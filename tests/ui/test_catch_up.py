"""Scheduled runs missed while nothing served them collapse: after a downtime, one inbox scan
runs, not one per missed time. A real ``prefect server start``, ``grace serve`` with an inbox
scan every 5 s, stopped (SIGTERM) across several scheduled times and started again: serve
cancels all but the last missed run as it starts (state Cancelled, named "Superseded", naming
the run that replaces it; flows/cli/serve.py ``collapse_missed``), and the scheduled
deployments run one at a time (a run due meanwhile is Cancelled, "Deployment concurrency limit
reached."; deployments/definitions.py). The nightly round and the maintenance go through the
same two steps; their cron schedules are too far apart to miss several in a test."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.ui.desk import Api, browser, grace_serving, private_server

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

WATCHER = "watch_inbox/inbox-watcher"
INTERVAL_S = 5
DOWN_S = 40
PREFETCH = timedelta(seconds=15)


def runs(api: Api) -> list[dict]:
    """The inbox watcher's runs, by expected start."""
    return api.call("/flow_runs/filter", {"deployments": {"id": {"any_": [api.deployment(WATCHER)["id"]]}}, "limit": 200,
                                          "sort": "EXPECTED_START_TIME_ASC"})


def expected(run: dict) -> datetime:
    return datetime.fromisoformat(run["expected_start_time"])


def test_scans_missed_while_serve_was_down_run_once(tmp_path: Path, migrated_prefect_db: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    settings = {"GRACE_INBOX": str(inbox), "GRACE_INBOX_INTERVAL_S": str(INTERVAL_S)}
    with private_server(tmp_path, migrated_prefect_db, settings) as (api, _, env):
        first_log = tmp_path / "serve-1.log"
        with grace_serving(tmp_path, env, first_log):
            deadline = time.monotonic() + 120
            while not any(r["state"]["type"] == "COMPLETED" for r in runs(api)):  # served: scans run on time
                assert time.monotonic() < deadline, first_log.read_text()[-3000:]
                time.sleep(1)
        stopped = datetime.now(timezone.utc)
        time.sleep(DOWN_S)  # serve is down: the scans of these 40 s are missed
        restarted = datetime.now(timezone.utc)
        # serve had already taken the runs due within its prefetch (10 s) when it stopped: the later ones were missed
        missed = [r for r in runs(api) if stopped + PREFETCH < expected(r) < restarted]
        assert len(missed) >= (DOWN_S - PREFETCH.seconds) // INTERVAL_S - 1, len(missed)
        assert all(r["state"]["type"] == "SCHEDULED" for r in missed), [(expected(r), r["state"]["name"]) for r in runs(api)]
        second_log = tmp_path / "serve-2.log"
        with grace_serving(tmp_path, env, second_log), browser(tmp_path) as (page, shot, _):
            ids = {r["id"] for r in missed}
            deadline = time.monotonic() + 120
            while not all((run := api.call(f"/flow_runs/{i}"))["state"]["type"] in ("COMPLETED", "CANCELLED", "FAILED", "CRASHED")
                          for i in ids):
                assert time.monotonic() < deadline, (run["state"], second_log.read_text()[-3000:])
                time.sleep(1)
            ended = [api.call(f"/flow_runs/{i}") for i in ids]
            ran = [r for r in ended if r["state"]["type"] == "COMPLETED"]
            skipped = [r for r in ended if r["state"]["type"] == "CANCELLED"]
            assert len(ran) <= 1 and len(ran) + len(skipped) == len(ended), [(r["name"], r["state"]["name"]) for r in ended]
            # serve cancelled all but the last missed run as it started, naming the one that runs instead
            superseded = [r for r in skipped if r["state"]["name"] == "Superseded"]
            assert len(superseded) >= len(ended) - 2, [r["state"] for r in ended]
            kept = {re.fullmatch(rf"superseded: missed while nothing served {WATCHER}; the run due .+ \((\S+)\) runs instead",
                                 r["state"]["message"]).group(1) for r in superseded}
            (kept_run,) = [r for r in runs(api) if r["name"] in kept]
            assert kept_run["state"]["name"] != "Superseded", kept_run["state"]
            assert "watch_inbox/inbox-watcher: " in second_log.read_text() and "cancelled as superseded" in second_log.read_text()
            deadline = time.monotonic() + 60  # and the schedule goes on: a scan after the restart completes
            while not any(r["state"]["type"] == "COMPLETED" and r["start_time"] and datetime.fromisoformat(r["start_time"]) > restarted
                          for r in runs(api)):
                assert time.monotonic() < deadline, second_log.read_text()[-3000:]
                time.sleep(1)
            page.goto(f"{api.base}/deployments/deployment/{api.deployment(WATCHER)['id']}", wait_until="networkidle")
            page.get_by_text("Cancelled").first.wait_for()
            shot("c01-catch-up-runs-after-restart")
