"""The Prefect UI as GRACE's control panel and review desk, driven in a real browser: a real
``prefect server start`` on a free loopback port (its own PREFECT_HOME), ``grace serve``, and
Debian's chromium under Playwright (no browser download; scripts/bootstrap.sh installs it).

The test triggers an ingest from the deployment's Run form in Prefect's default UI, waits for
it to complete, runs a round (through the API, as the nightly schedule would), opens the review
packet's Resume form (checking that the V2 UI offers the same choices), picks a verdict from the
select, writes a note, submits, and reads the vote back with ``grace sql``. Each step leaves a screenshot in the test's output folder (copied
to /tmp/grace-ui-screens/ too)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

BIN = Path(sys.executable).parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
STABLE_SCREENS = Path("/tmp/grace-ui-screens")
NOTE = "the table gives 15.47% WER for the conversation LM"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    """The few REST calls the test makes to the Prefect server."""

    def __init__(self, base: str) -> None:
        self.base = base

    def call(self, path: str, body: dict | None = None):
        """One REST call. A 503 or 429 is retried with back-off, as Prefect's own client does:
        the server answers 503 while its SQLite database is locked by a busy writer."""
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(6):
            req = urllib.request.Request(f"{self.base}/api{path}", data=data, headers={"content-type": "application/json"},
                                         method="GET" if body is None else "POST")
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    return json.loads(resp.read() or "null")
            except urllib.error.HTTPError as err:
                if err.code not in (429, 503) or attempt == 5:
                    raise
                time.sleep(2 ** attempt)

    def deployment(self, name: str) -> dict:
        return self.call(f"/deployments/name/{name}")

    def run(self, name: str, params: dict) -> str:
        return self.call(f"/deployments/{self.deployment(name)['id']}/create_flow_run", {"parameters": {"params": params}})["id"]

    def logs(self, run_id: str) -> list[str]:
        return [entry["message"] for entry in self.call("/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}}})]

    def runs_of(self, deployment: str) -> list[dict]:
        return self.call("/flow_runs/filter", {"deployments": {"id": {"any_": [self.deployment(deployment)["id"]]}}})

    def wait_for(self, run_id: str, state: str, timeout: float, log: Path) -> dict:
        deadline = time.monotonic() + timeout
        while (run := self.call(f"/flow_runs/{run_id}"))["state"]["name"] != state:
            assert run["state"]["type"] not in ("FAILED", "CRASHED", "CANCELLED", "COMPLETED"), (run["state"], log.read_text()[-3000:])
            assert time.monotonic() < deadline, f"{log.read_text()[-3000:]}\nrun still {run['state']['name']} after {timeout} s"
            time.sleep(1)
        return run


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for_text(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text():
        assert proc.poll() is None, path.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {text!r} after {timeout} s\n{path.read_text()[-3000:]}"
        time.sleep(0.5)


def submit(page, form, done, failure: str, shot, again_shot: str, log: Path | None = None) -> None:
    """Click ``form``'s Submit and wait until ``done()``. The UI posts once; when the server was
    busy (a 503 while SQLite is locked) it shows an error and stays on the form, and a person
    clicks Submit again: so does the test, once, after 20 s. After 90 s it fails with what the
    page says (and the end of ``log``)."""
    form.get_by_role("button", name="Submit").click()
    started, again = time.monotonic(), False
    while not done():
        waited = time.monotonic() - started
        if not again and waited > 20 and form.get_by_role("button", name="Submit").count():
            shot(again_shot)
            form.get_by_role("button", name="Submit").click()
            again = True
        assert waited < 90, (f"{failure}; the page says: {page.locator('body').inner_text()[-800:]}"
                             + (f"\n{log.read_text()[-3000:]}" if log else ""))
        time.sleep(0.5)


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[tuple[Api, Path, dict]]:
    """A Prefect server on a free loopback port and ``grace serve`` on it: (api, lake, env)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/bootstrap.sh (it installs Debian's chromium)")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    lake = tmp_path / "lake"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "GRACE_"))},
        "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_API_URL": f"{base}/api", "PREFECT_UI_API_URL": f"{base}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_RUNNER_POLL_FREQUENCY": "1", "PREFECT_LOGGING_LEVEL": "INFO",
        "GRACE_LAKE": str(lake), "GRACE_PRIOR_SECTIONS": '["Abstract", "Introduction"]', "GRACE_REVIEWERS": '["alice"]',
        "GRACE_BUDGET": "5", "OMP_NUM_THREADS": "1",
    }
    server_log, serve_log = tmp_path / "server.log", tmp_path / "serve.log"
    with server_log.open("w") as out:
        server = subprocess.Popen([BIN / "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                                  cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    serve = None
    try:
        api = Api(base)
        deadline = time.monotonic() + 180
        while True:
            try:
                if api.call("/health"):
                    break
            except OSError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, server_log.read_text()[-3000:]
            time.sleep(0.5)
        with serve_log.open("w") as out:
            serve = subprocess.Popen([BIN / "grace", "serve"], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
        wait_for_text(serve_log, "being served", serve, timeout=120)
        yield api, lake, env
    finally:
        if serve is not None:
            stop(serve)
        stop(server)


def test_ingest_from_the_run_form_then_review_in_the_default_ui(desk, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    api, lake, env = desk
    serve_log = tmp_path / "serve.log"
    batch = tmp_path / "one-paper.jsonl"
    batch.write_text((REPO / "flows/samples/qasper_demo.jsonl").read_text().splitlines()[0] + "\n")
    screens = tmp_path / "screens"
    screens.mkdir()

    with sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000})
        try:
            page = browser.new_page()
            shot = lambda name: page.screenshot(path=str(screens / f"{name}.png"), full_page=True)  # noqa: E731

            # 1. the deployments, named for what they do
            page.goto(f"{api.base}/deployments", wait_until="networkidle")
            for name in ("ingest-batch", "expansion-round", "review-packet", "nightly-expansion", "inbox-watcher", "lake-maintenance"):
                page.get_by_text(name, exact=True).first.wait_for()
            shot("01-deployments")

            # 2. ingest from the Run form: the required Batch first, only the fields ingest uses
            ingest = api.deployment("ingest_batch/ingest-batch")
            page.goto(f"{api.base}/deployments/deployment/{ingest['id']}/run", wait_until="networkidle")
            labels = page.locator(".schema-form-property__label").all_inner_texts()
            assert labels == ["params", "Batch", "Lake (Optional)", "Prior Sections (Optional)"], labels
            page.locator(".schema-form-property textarea").first.fill(str(batch))
            shot("02-ingest-run-form")
            submit(page, page, lambda: bool(api.runs_of("ingest_batch/ingest-batch")), "the Run form created no flow run", shot, "02b-ingest-run-form-again")
            runs = api.runs_of("ingest_batch/ingest-batch")
            ingested = api.wait_for(runs[0]["id"], "Completed", timeout=300, log=serve_log)
            assert ingested["parameters"] == {"params": {"batch": str(batch)}}  # empty overrides left out, not nulls
            page.goto(f"{api.base}/runs/flow-run/{ingested['id']}", wait_until="networkidle")
            page.get_by_text("Completed").first.wait_for()
            shot("03-ingest-completed")

            # 3. a round, as the nightly schedule runs it; the parent run carries the report (after
            # dispatch), where the packets are, its progress and one summary line per stage
            page.goto("about:blank")  # an idle page while the flows run (the run pages poll)
            round_run = api.run("expansion_round/expansion-round", {"round_id": 1})
            api.wait_for(round_run, "Completed", timeout=600, log=serve_log)
            artifacts = {a["key"]: a for a in api.call("/artifacts/filter", {"flow_runs": {"id": {"any_": [round_run]}}})}
            assert {"grace-round-report", "grace-round-metrics", "grace-review-packets", "grace-round-1-progress"} <= set(artifacts)
            assert artifacts["grace-round-1-progress"]["data"] == 100
            assert "| alice |" in artifacts["grace-review-packets"]["data"] and "/review/outbox/alice.csv" in artifacts["grace-review-packets"]["data"]
            header, _, row = [line.strip("|").split(" | ") for line in artifacts["grace-round-report"]["data"].splitlines() if line.startswith("|")]
            report = dict(zip([h.strip() for h in header], [v.strip() for v in row]))
            assert int(report["deferred"]) >= 1 and report["PCR"].endswith("%"), report  # written after dispatch; percentages formatted
            deadline = time.monotonic() + 60  # the run's last log lines reach the server shortly after it ends
            logs = api.logs(round_run)
            while not any(m.startswith("dispatch: ") for m in logs) and time.monotonic() < deadline:
                time.sleep(1)
                logs = api.logs(round_run)
            assert all(any(m.startswith(f"{stage}: ") for m in logs) for stage in ("build", "score", "dispatch")), logs
            page.goto(f"{api.base}/runs/flow-run/{round_run}", wait_until="networkidle")
            page.get_by_text("Artifacts", exact=True).first.click()
            page.get_by_text("grace-review-packets").first.wait_for()
            shot("04-round-artifacts")
            page.goto(f"{api.base}/artifacts/artifact/{artifacts['grace-round-report']['id']}", wait_until="networkidle")
            page.get_by_text("deferred").first.wait_for()
            shot("05-round-report")

            # 4. alice's review packet: the Resume form in the default UI
            page.goto("about:blank")
            packet = api.run("review_packet/review-packet", {"reviewer": "alice", "poll_seconds": 1})
            api.wait_for(packet, "Paused", timeout=600, log=serve_log)
            # the V2 UI renders the same form: a select of the four choices
            page.goto(f"{api.base}/v2/runs/flow-run/{packet}", wait_until="networkidle")
            page.locator("button[aria-haspopup=menu]").last.click()
            page.get_by_role("menuitem", name="Resume").click()
            v2 = page.get_by_role("dialog")
            v2.get_by_text("Note on claim 1").wait_for()  # the form is drawn once its schema is loaded
            v2.get_by_text("leave pending", exact=True).last.click()
            page.get_by_role("option").last.wait_for()
            assert page.get_by_role("option").all_inner_texts() == ["confirm", "reject", "abstain", "leave pending"]
            page.screenshot(path=str(screens / "06-review-form-v2-choices.png"))
            page.keyboard.press("Escape")

            page.goto(f"{api.base}/runs/flow-run/{packet}", wait_until="networkidle")
            page.get_by_role("button", name="Resume").first.click()
            dialog = page.get_by_role("dialog")
            dialog.get_by_text("Review packet:").wait_for()
            assert dialog.locator(".schema-form-property__label").first.inner_text() == "Claim 1 (Optional)"
            assert dialog.get_by_text("Note on claim 1 (Optional)").is_visible()
            select = dialog.locator(".p-select-button__control").first
            assert select.inner_text() == "leave pending"
            shot("07-review-form")
            select.focus()
            page.keyboard.press(" ")  # opens the select (a headless mouse click does not open Prefect's p-select)
            options = page.locator(".p-select-option")
            options.first.wait_for()
            assert options.all_inner_texts() == ["confirm", "reject", "abstain", "leave pending"]
            page.screenshot(path=str(screens / "08-review-form-choices.png"))
            options.filter(has_text="reject").click()
            assert select.inner_text() == "reject"
            dialog.locator("textarea").first.fill(NOTE)
            shot("09-review-form-filled")
            submit(page, dialog, lambda: api.call(f"/flow_runs/{packet}")["state"]["name"] != "Paused",
                   "the Resume form left the run paused", shot, "09b-review-form-again", log=tmp_path / "server.log")
            api.wait_for(packet, "Completed", timeout=120, log=serve_log)
            page.goto(f"{api.base}/runs/flow-run/{packet}", wait_until="networkidle")
            page.get_by_text("1 verdict recorded").first.wait_for()
            shot("10-review-recorded")
        finally:
            browser.close()
            STABLE_SCREENS.mkdir(exist_ok=True)
            for png in screens.glob("*.png"):
                shutil.copy(png, STABLE_SCREENS / png.name)

    query = "SELECT reviewer, verdict, note, channel FROM verdicts"
    res = subprocess.run([BIN / "grace", "sql", query, "--format", "json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [{"reviewer": "alice", "verdict": "reject", "note": NOTE, "channel": "ui"}]
