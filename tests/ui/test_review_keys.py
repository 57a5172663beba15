"""Who said so, in a real browser: the Prefect server behind its login, and a review packet that
records votes only under the reviewer's key.

A real ``prefect server start`` on a free loopback port with PREFECT_SERVER_API_AUTH_STRING,
``grace serve`` sending PREFECT_API_AUTH_STRING, Debian's chromium under Playwright
(tests/ui/desk.py). The UI asks for the login before it shows anything, and the API answers 401
without it. On a synthetic lake (tests/review/conftest.py: four Boundary claims) where alice and
bob are registered reviewers, the dispatch defers a claim to bob; his packet's Resume form in
the V2 UI is submitted with alice's key (refused: the run pauses again, the reason above the
form, nothing recorded), then through the API with no key and with a blank one (refused), then
in the browser with bob's key (recorded as bob's, channel ``ui``). Finally no key is anywhere the
API shows: flow run parameters, inputs, logs, artifacts, events."""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.api_exposure import answers_without_login
from storage.lake import Lake
from tests.review.conftest import build_lake
from tests.ui.desk import BIN, Api, browser, running_desk, submit

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

LOGIN = "grace:correct-horse-battery"


@pytest.fixture
def locked_desk(tmp_path: Path, migrated_prefect_db: Path) -> Iterator[tuple[Api, Path, dict]]:
    """The Prefect server behind LOGIN and ``grace serve`` on it; bob is the only human in the
    pool, without the verifier: (api, lake, env)."""
    settings = {"GRACE_REVIEWERS": '["bob"]', "GRACE_USE_VERIFIER": "false", "GRACE_OVERLAP": "1", "GRACE_BUDGET": "10"}
    with running_desk(tmp_path, migrated_prefect_db, settings, login=LOGIN) as desk:
        yield desk


def status_of(url: str, headers: dict | None = None, body: dict | None = None) -> int:
    """The HTTP status of one GET (or POST of ``body``) to ``url``."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def register(name: str, env: dict, cwd: Path) -> str:
    """``grace reviewer add NAME``: the key, alone on its last line."""
    added = subprocess.run([BIN / "grace", "reviewer", "add", name], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert added.returncode == 0, added.stderr
    return added.stdout.splitlines()[-1]


def votes(lake: Lake) -> list[tuple]:
    return sorted(lake.read("verdicts").select("claim_id", "reviewer", "verdict", "channel").rows())


def everything_the_api_shows(api: Api) -> str:
    """Every flow run's parameters and inputs, every log line, artifact and event, as one text."""
    runs = api.call("/flow_runs/filter", {"limit": 200})
    shown = [json.dumps([r["parameters"] for r in runs])]
    shown += [json.dumps(api.inputs(r["id"])) for r in runs]
    offset = 0
    while page := api.call("/logs/filter", {"limit": 200, "offset": offset}):
        shown.append(json.dumps(page))
        offset += len(page)
    shown.append(json.dumps(api.call("/artifacts/filter", {"limit": 200})))
    events = api.call("/events/filter", {"limit": 50})
    while True:
        shown.append(json.dumps(events["events"]))
        if not events["next_page"]:
            break
        request = urllib.request.Request(events["next_page"], headers=api.headers)
        with urllib.request.urlopen(request, timeout=30) as resp:
            events = json.loads(resp.read())
    return "\n".join(shown)


def test_the_login_then_votes_only_under_the_reviewers_key(locked_desk, tmp_path: Path) -> None:
    api, lake_path, env = locked_desk
    serve_log = tmp_path / "serve.log"

    # the API: 401 without the login, 200 with it (/health answers either way, for probes)
    login = {"Authorization": api.headers["authorization"]}
    assert status_of(f"{api.base}/api/flow_runs/filter", body={}) == 401
    assert status_of(f"{api.base}/api/flow_runs/filter", login, body={}) == 200
    assert status_of(f"{api.base}/api/admin/version") == 401
    assert status_of(f"{api.base}/api/admin/version", login) == 200
    assert status_of(f"{api.base}/api/admin/version", {"Authorization": "Basic " + base64.b64encode(b"grace:guess").decode()}) == 401
    assert answers_without_login(f"{api.base}/api") is False
    assert "answers without a login" not in serve_log.read_text()

    lake = build_lake(str(lake_path))
    alice, bob = register("alice", env, tmp_path), register("bob", env, tmp_path)
    assert alice != bob
    dispatch = api.run("dispatch_reviews/dispatch-reviews", {"round_id": 1})
    api.wait_for(dispatch, "Completed", timeout=600, log=serve_log)
    assert set(lake.read("deferrals")["reviewer"]) == {"bob"}

    with browser(tmp_path) as (page, shot, screens):
        # the UI asks for the login before it shows anything
        page.goto(api.base, wait_until="networkidle")
        login_field = page.locator("input[type=password]")
        login_field.wait_for()
        assert login_field.get_attribute("placeholder") == "admin:pass"
        assert page.get_by_text("review-packet").count() == 0 and page.get_by_text("Deployments").count() == 0
        shot("k01-login")
        page.goto(f"{api.base}/deployments", wait_until="networkidle")  # the V1 UI asks too
        page.locator("input[type=password]").wait_for()
        assert page.get_by_text("review-packet").count() == 0
        shot("k01b-login-v1")
        page.goto(api.base, wait_until="networkidle")
        login_field.fill(LOGIN)
        page.get_by_role("button", name="Login").click()
        page.wait_for_url("**/dashboard**")
        page.goto(f"{api.base}/v2/deployments", wait_until="networkidle")
        page.get_by_text("review-packet").first.wait_for()
        shot("k02-deployments-after-login")

        # bob's packet, answered with alice's key: refused, the reason above the same form
        packet = api.run("review_packet/review-packet", {"reviewer": "bob", "packet_size": 1, "poll_seconds": 1})
        first = api.form_of(packet, timeout=600, log=serve_log)

        def resume_dialog():
            page.goto(f"{api.base}/v2/runs/flow-run/{packet}", wait_until="networkidle")
            page.locator("button[aria-haspopup=menu]").last.click()
            page.get_by_role("menuitem", name="Resume").click()
            dialog = page.get_by_role("dialog")
            dialog.get_by_text("Note on claim 1").wait_for()  # the form is drawn once its schema is loaded
            return dialog

        dialog = resume_dialog()
        labels = dialog.locator("label").all_inner_texts()
        assert labels[:2] == ["Claim 1 (Optional)", "Note on claim 1 (Optional)"], labels
        evidence = dialog.get_by_text("Source passage (").first.inner_text()  # each claim's evidence under its select
        dialog.get_by_text("leave pending", exact=True).last.click()
        page.get_by_role("option", name="confirm").click()
        key_field = dialog.locator("input[type=password]")
        assert key_field.count() == 1
        key_field.fill(alice)
        shot("k03-bob-packet-with-alices-key")
        assert alice not in page.locator("body").inner_text()
        submit(page, dialog, lambda: api.call(f"/flow_runs/{packet}")["state"]["type"] != "PAUSED"
               or api.call(f"/flow_runs/{packet}")["state"]["state_details"]["run_input_keyset"] != first,
               "the Resume form left the run paused", shot, "k03b-again", log=serve_log, button="Resume")
        second = api.form_of(packet, timeout=120, log=serve_log, after=first)
        reason = api.call(f"/flow_runs/{packet}/input/{second['description']}").split("\n")[0]
        assert reason.startswith("**Not recorded, please correct:** ") and "bob" in reason and "key" in reason, reason
        dialog = resume_dialog()
        dialog.get_by_text(reason.removeprefix("**Not recorded, please correct:** ")).first.wait_for()
        assert dialog.locator("label").all_inner_texts() == labels  # the same form: same labels, same evidence
        assert dialog.get_by_text("Source passage (").first.inner_text().endswith(evidence)
        assert dialog.locator('button[aria-label^="Select Claim 1"]').inner_text() == "confirm"  # the answers kept, never the key
        assert dialog.locator("input[type=password]").input_value() == ""
        shot("k04-refused-wrong-key")
        dialog.locator("input[type=password]").scroll_into_view_if_needed()
        shot("k04b-refused-wrong-key-form")
        assert votes(lake) == []
        assert not any(k.endswith("-response") for k in api.input_keys(packet))  # the refused answer is gone too

        # through the API: no key is refused by the server's own form check, a blank one by the run
        page.keyboard.press("Escape")
        page.goto("about:blank")
        rejected = api.call(f"/flow_runs/{packet}/resume", {"run_input": {"claim_1": "confirm"}})
        assert rejected["status"] == "REJECT" and "'key' is a required property" in rejected["details"]["reason"]
        api.call(f"/flow_runs/{packet}/resume", {"run_input": {"claim_1": "confirm", "key": "  "}})
        third = api.form_of(packet, timeout=120, log=serve_log, after=second)
        assert votes(lake) == []

        # bob's own key: recorded as his, through the browser's form
        dialog = resume_dialog()
        dialog.locator("input[type=password]").fill(bob)
        shot("k05-bob-packet-with-his-key")
        submit(page, dialog, lambda: api.call(f"/flow_runs/{packet}")["state"]["type"] != "PAUSED"
               or api.call(f"/flow_runs/{packet}")["state"]["state_details"]["run_input_keyset"] != third,
               "the Resume form left the run paused", shot, "k05b-again", log=serve_log, button="Resume")
        api.wait_for(packet, "Completed", timeout=120, log=serve_log)
        page.goto(f"{api.base}/v2/runs/flow-run/{packet}", wait_until="networkidle")
        page.get_by_text("Completed").first.wait_for()
        shot("k06-recorded")

    deferred = lake.read("deferrals").sort("rank")["claim_id"][0]
    assert votes(lake) == [(deferred, "bob", "confirm", "ui")]
    deadline = time.monotonic() + 60  # the run's last log lines reach the server shortly after it ends
    while not any("1 verdict recorded" in m for m in api.logs(packet)):
        assert time.monotonic() < deadline, api.logs(packet)
        time.sleep(1)
    shown = everything_the_api_shows(api)
    assert bob not in shown and alice not in shown
    assert "1 verdict recorded" in shown and "bob" in shown  # the search saw the run's logs and parameters
