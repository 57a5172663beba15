"""The Prefect UI as GRACE's control panel and review desk, driven in a real browser: a real
``prefect server start`` on a free loopback port (its own PREFECT_HOME, no login), ``grace
serve``, and Debian's chromium under Playwright (tests/ui/desk.py).

The test triggers an ingest from the deployment's Run form in Prefect's default UI, waits for
it to complete, runs a round (through the API, as the nightly schedule would), registers alice
as a reviewer, opens her review packet's Resume form (checking that the V2 UI offers the same
choices and a password field for the key), picks a verdict from the select, writes a note,
types her key, submits, and reads the vote back with ``grace sql``. Each step leaves a
screenshot in the test's output folder (copied to /tmp/grace-ui-screens/ too). The login and
the key's refusals are tests/ui/test_review_keys.py's."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.api_exposure import answers_without_login
from tests.conftest import REPO
from flows.review_ui import NOT_RECORDED, NOTHING_ANSWERED
from tests.ui.desk import BIN, VIEWPORT, Api, browser, running_desk, submit

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

NOTE = "the table gives 15.47% WER for the conversation LM"


def evidence_in_view(page, dialog, claims: int) -> list[str]:
    """Each claim's evidence in the default UI's Resume form, checked as a person sees it: one
    description per claim, none with a scroll box of its own (``scrollHeight == clientHeight``),
    and the first claim's source passage inside the 1366×768 window without scrolling."""
    described = dialog.locator(".schema-form-property__markdown")
    texts = []
    for i in range(claims):
        box = described.nth(i)
        scroll, client = box.evaluate("e => [e.scrollHeight, e.clientHeight]")
        assert scroll == client, (i + 1, scroll, client)
        texts.append(box.inner_text())
    passage = described.first.get_by_text("Source passage (")
    top = passage.bounding_box()
    assert top and 0 <= top["y"] and top["y"] + top["height"] <= VIEWPORT["height"], top
    assert all(word in texts[0] for word in ("Status: ", "confidence", "due ", "Nearest prior: ")), texts[0]
    return texts


@pytest.fixture
def desk(tmp_path: Path, migrated_prefect_db: Path) -> Iterator[tuple[Api, Path, dict]]:
    """A Prefect server on a free loopback port, without a login, and ``grace serve`` on it: (api, lake, env)."""
    settings = {"GRACE_PRIOR_SECTIONS": '["Abstract", "Introduction"]', "GRACE_REVIEWERS": '["alice"]', "GRACE_BUDGET": "5"}
    with running_desk(tmp_path, migrated_prefect_db, settings) as desk:
        yield desk


def test_ingest_from_the_run_form_then_review_in_the_default_ui(desk, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    api, lake, env = desk
    serve_log = tmp_path / "serve.log"
    batch = tmp_path / "one-paper.jsonl"
    batch.write_text((REPO / "flows/samples/qasper_demo.jsonl").read_text().splitlines()[0] + "\n")

    with browser(tmp_path) as (page, shot, screens):
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
        assert {"grace-round-report", "grace-round-metrics", "grace-review-packets", "grace-deferred-claims", "grace-round-1-progress"} <= set(artifacts)
        assert artifacts["grace-round-1-progress"]["data"] == 100
        assert "| alice |" in artifacts["grace-review-packets"]["data"] and "/review/outbox/alice.csv" in artifacts["grace-review-packets"]["data"]
        report = dict(line.strip("| ").split(" | ") for line in artifacts["grace-round-report"]["data"].splitlines() if line.startswith("| "))
        assert int(report["deferred"]) >= 1 and report["PCR"].endswith("%"), report  # written after dispatch; percentages formatted
        assert report["metric"] == "round 1" and "Cascade: " in artifacts["grace-round-report"]["data"]  # a legend under the figures
        deferred = artifacts["grace-deferred-claims"]
        assert deferred["type"] == "table" and {r["reviewer"] for r in json.loads(deferred["data"])} <= {"alice", "verifier"}
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

        # 4. alice's review packet: the Resume form in the default UI, signed with her key
        page.goto("about:blank")
        added = subprocess.run([BIN / "grace", "reviewer", "add", "alice"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert added.returncode == 0, added.stderr
        key = added.stdout.splitlines()[-1]
        packet = api.run("review_packet/review-packet", {"reviewer": "alice", "poll_seconds": 1})  # the default packet size
        api.wait_for(packet, "Paused", timeout=600, log=serve_log)
        first = api.form_of(packet, timeout=60, log=serve_log)
        claims = sum(k.startswith("claim_") for k in api.call(f"/flow_runs/{packet}/input/{first['schema']}")["properties"])
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
        assert v2.locator("input[type=password]").count() == 1  # the key: typed unseen

        run = api.call(f"/flow_runs/{packet}")
        assert run["name"] == f"review alice · round 1 · {claims} claim{'s' if claims > 1 else ''}", run["name"]  # whose packet

        def resume_dialog():
            """The default UI's Resume form of the packet, once drawn."""
            page.goto(f"{api.base}/runs/flow-run/{packet}", wait_until="networkidle")
            page.get_by_role("button", name="Resume").first.click()
            dialog = page.get_by_role("dialog")
            dialog.get_by_text("Note on claim 1").wait_for()
            return dialog

        dialog = resume_dialog()
        evidence = evidence_in_view(page, dialog, claims)
        labels = dialog.locator(".schema-form-property__label").all_inner_texts()
        assert labels[:2] == ["Claim 1 (Optional)", "Note on claim 1 (Optional)"] and labels[-1] == "Reviewer key", labels
        shot("07-review-form")
        page.screenshot(path=str(screens / "07a-review-form-viewport.png"))  # what the reviewer sees first, at 1366×768

        # submitted with nothing answered: not the end of the packet, the same form again saying so
        def keyed(dialog):
            """The dialog with the reviewer's key typed (the V1 UI has no password field: a text box)."""
            dialog.locator(".schema-form-property", has=page.get_by_text("Reviewer key", exact=True)).locator("textarea").fill(key)
            return dialog

        submit(page, keyed(dialog), lambda: api.call(f"/flow_runs/{packet}")["state"]["state_details"].get("run_input_keyset") != first,
               "the empty form left the run paused", shot, "07b-empty-form-again", log=serve_log, refill=lambda: keyed(resume_dialog()))
        second = api.form_of(packet, timeout=120, log=serve_log, after=first)
        assert api.call(f"/flow_runs/{packet}")["state"]["type"] == "PAUSED"
        dialog = resume_dialog()
        assert dialog.locator(".schema-form-property__label").all_inner_texts() == labels  # the same form
        again = evidence_in_view(page, dialog, claims)
        assert again[0].startswith(f"{NOT_RECORDED} {NOTHING_ANSWERED}") and again[0].endswith(evidence[0]), again[0]
        assert again[1:] == evidence[1:]
        page.screenshot(path=str(screens / "07c-review-form-nothing-answered.png"))
        assert api.call(f"/flow_runs/{packet}/input/{second['description']}").startswith(f"**{NOT_RECORDED}** {NOTHING_ANSWERED}")
        select = dialog.locator(".p-select-button__control").first
        assert select.inner_text() == "leave pending"
        select.focus()
        page.keyboard.press(" ")  # opens the select (a headless mouse click does not open Prefect's p-select)
        options = page.locator(".p-select-option")
        options.first.wait_for()
        assert options.all_inner_texts() == ["confirm", "reject", "abstain", "leave pending"]
        page.screenshot(path=str(screens / "08-review-form-choices.png"))
        options.filter(has_text="reject").click()
        expect(select).to_have_text("reject", timeout=10_000)  # the page draws the choice on its next update (slower on a loaded machine)
        dialog.locator("textarea").first.fill(NOTE)
        keyed(dialog)
        shot("09-review-form-filled")
        submit(page, dialog, lambda: api.call(f"/flow_runs/{packet}")["state"]["state_details"].get("run_input_keyset") != second,
               "the Resume form left the run paused", shot, "09b-review-form-again", log=tmp_path / "server.log")
        api.wait_for(packet, "Completed", timeout=120, log=serve_log)
        page.goto(f"{api.base}/runs/flow-run/{packet}", wait_until="networkidle")
        page.get_by_text("1 verdict recorded").first.wait_for()
        shot("10-review-recorded")

    query = "SELECT reviewer, verdict, note, channel FROM verdicts"
    res = subprocess.run([BIN / "grace", "sql", query, "--format", "json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [{"reviewer": "alice", "verdict": "reject", "note": NOTE, "channel": "ui"}]
    assert answers_without_login(f"{api.base}/api") is True
    assert "answers without a login" not in serve_log.read_text()  # an open server, but on loopback: no warning
