"""What the browser tests share: a real ``prefect server start`` on a free loopback port (its own
PREFECT_HOME), with or without a login, ``grace serve`` on it, the few REST calls the tests make,
and Debian's chromium under Playwright (no browser download; scripts/bootstrap.sh installs it)."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.prefect_db import seed_home

BIN = Path(sys.executable).parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-3d-apis"]
"""No WebGL (``--disable-3d-apis``): the one canvas of Prefect's UI that uses it, a flow run's graph,
which no test looks at, redraws itself through software GL at about a third of a core for as long as
its page is open (20 s of CPU a test); without it that box stays empty and everything else renders."""
STABLE_SCREENS = Path("/tmp/grace-ui-screens")
VIEWPORT = {"width": 1366, "height": 768}
"""The screen the browser tests look at: a common laptop's (issue 34)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    """The few REST calls the tests make to the Prefect server, with its login when it has one."""

    def __init__(self, base: str, login: str | None = None) -> None:
        self.base = base
        self.headers = {"content-type": "application/json"}
        if login:
            self.headers["authorization"] = "Basic " + base64.b64encode(login.encode()).decode()

    def call(self, path: str, body: dict | None = None):
        """One REST call. A 503 or 429 is retried with back-off, as Prefect's own client does:
        the server answers 503 while its SQLite database is locked by a busy writer."""
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(6):
            req = urllib.request.Request(f"{self.base}/api{path}", data=data, headers=self.headers,
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

    def form_of(self, run_id: str, timeout: float, log: Path, after: dict | None = None) -> dict:
        """The input keyset of the run's pause once the run is paused with its form saved; with
        ``after``, a pause other than that keyset's."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.call(f"/flow_runs/{run_id}")
            keyset = run["state"]["state_details"].get("run_input_keyset") if run["state"]["type"] == "PAUSED" else None
            if keyset and keyset != after and self.input_keys(run_id) >= {keyset["schema"], keyset["description"]}:
                return keyset
            assert run["state"]["type"] not in ("FAILED", "CRASHED", "CANCELLED", "COMPLETED"), (run["state"], log.read_text()[-3000:])
            assert time.monotonic() < deadline, f"{log.read_text()[-3000:]}\nno new form on run {run_id} after {timeout} s"
            time.sleep(0.5)

    def inputs(self, run_id: str) -> list[dict]:
        """Every input the server keeps for the run (forms' schemas and descriptions, answers)."""
        return self.call(f"/flow_runs/{run_id}/input/filter", {"prefix": "", "limit": 1000})

    def input_keys(self, run_id: str) -> set[str]:
        return {i["key"] for i in self.inputs(run_id)}


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


def submit(page, form, done, failure: str, shot, again_shot: str, log: Path | None = None, button: str = "Submit",
           refill=None) -> None:
    """Click ``form``'s ``button`` and wait until ``done()``. The UI posts once; when the server
    was busy (a 503 while SQLite is locked) it shows an error, and a person tries again: so does
    the test, every 20 s: on the same form if it is still open, else on the one ``refill()``
    opens and fills again (a form that closed without its answer reaching the server). After
    90 s it fails with the page's messages (its toasts), the API calls that failed meanwhile,
    what the page says and the end of ``log``."""
    failed: list[str] = []

    def answered(response) -> None:
        if "/api/" in response.url and response.status >= 400:
            failed.append(f"{response.request.method} {response.url.split('/api/', 1)[1]}: {response.status} {response.status_text}")

    def lost(request) -> None:
        if "/api/" in request.url:
            failed.append(f"{request.method} {request.url.split('/api/', 1)[1]}: {request.failure}")

    page.on("response", answered)
    page.on("requestfailed", lost)
    try:
        form.get_by_role("button", name=button).click()
        started = clicked = time.monotonic()
        while not done():
            waited = time.monotonic() - started
            if waited >= 90:
                toasts = page.locator(".p-toast").all_inner_texts()
                pytest.fail(f"{failure} after {waited:.0f} s; the page's messages: {toasts}; the API calls that failed: {failed}; "
                            f"the page says: {page.locator('body').inner_text()[-800:]}" + (f"\n{log.read_text()[-3000:]}" if log else ""))
            if time.monotonic() - clicked > 20:
                shot(again_shot)
                if not form.get_by_role("button", name=button).count() and refill:
                    form = refill()
                form.get_by_role("button", name=button).click()
                clicked = time.monotonic()
            time.sleep(0.5)
    finally:
        page.remove_listener("response", answered)
        page.remove_listener("requestfailed", lost)


@contextmanager
def private_server(tmp_path: Path, database: Path, settings: dict[str, str], login: str | None = None) -> Iterator[tuple[Api, Path, dict]]:
    """A Prefect server on a free loopback port (its own PREFECT_HOME, seeded with the migrated
    database in ``database``: tests/prefect_db.py; log in ``tmp_path/server.log``):
    (api, lake, env), env being what a GRACE process on it runs with: the ``GRACE_*``
    ``settings`` and the lake in ``tmp_path/lake``. With ``login`` (``user:password``) the
    server asks for it (PREFECT_SERVER_API_AUTH_STRING) and every client here sends it
    (PREFECT_API_AUTH_STRING)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/bootstrap.sh (it installs Debian's chromium)")
    lake = tmp_path / "lake"
    server_log = tmp_path / "server.log"
    seed_home(tmp_path / "prefect-home", database)
    for _ in range(3):
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "GRACE_"))},
            "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_API_URL": f"{base}/api", "PREFECT_UI_API_URL": f"{base}/api",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_RUNNER_POLL_FREQUENCY": "1", "PREFECT_LOGGING_LEVEL": "INFO",
            "GRACE_LAKE": str(lake), "OMP_NUM_THREADS": "1", **settings,
        }
        if login:
            env |= {"PREFECT_SERVER_API_AUTH_STRING": login, "PREFECT_API_AUTH_STRING": login}
        with server_log.open("w") as out:
            server = subprocess.Popen([BIN / "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                                      cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
        api = Api(base, login)
        if answers_as_its_own(server, api, port, server_log):
            break
        stop(server)  # the port was taken between free_port() and the server's bind: another port
    else:
        pytest.fail(f"prefect server start found its port taken 3 times\n{server_log.read_text()[-3000:]}")
    try:
        yield api, lake, env
    finally:
        stop(server)


def answers_as_its_own(server: subprocess.Popen, api: Api, port: int, log: Path) -> bool:
    """Whether ``server`` came up and the port its API answers on is one it listens on itself;
    False when it could not bind the port (another process took it after :func:`free_port`
    chose it, and may be answering there); fails the test on any other way of not starting."""
    import psutil

    deadline = time.monotonic() + 180
    while True:
        try:
            if api.call("/health"):
                break
        except OSError:
            pass
        if server.poll() is not None:
            assert "already in use" in log.read_text().lower(), log.read_text()[-3000:]
            return False
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)
    ours = [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for p in ours for c in p.net_connections("tcp"))


@contextmanager
def grace_serving(tmp_path: Path, env: dict, log: Path) -> Iterator[subprocess.Popen]:
    """``grace serve`` with ``env`` (output in ``log``), once its deployments are served; stopped
    with SIGTERM at the end, as an operator stops it."""
    with log.open("w") as out:
        serve = subprocess.Popen([BIN / "grace", "serve"], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_text(log, "being served", serve, timeout=120)
        yield serve
    finally:
        stop(serve)


@contextmanager
def running_desk(tmp_path: Path, database: Path, settings: dict[str, str], login: str | None = None) -> Iterator[tuple[Api, Path, dict]]:
    """A Prefect server on a free loopback port (:func:`private_server`) and ``grace serve`` on
    it (output in ``tmp_path/serve.log``): (api, lake, env)."""
    with private_server(tmp_path, database, settings, login) as (api, lake, env), grace_serving(tmp_path, env, tmp_path / "serve.log"):
        yield api, lake, env


@contextmanager
def browser(tmp_path: Path) -> Iterator[tuple[object, object, Path]]:
    """Chromium (headless, its own profile, a 1366×768 window) on one page: (page, shot, screens). ``shot(name)``
    saves a full-page screenshot in the test's ``screens`` folder; at the end every screenshot
    is copied to /tmp/grace-ui-screens/ too."""
    from playwright.sync_api import sync_playwright

    screens = tmp_path / "screens"
    screens.mkdir()
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport=VIEWPORT)
        try:
            page = context.new_page()
            yield page, lambda name: page.screenshot(path=str(screens / f"{name}.png"), full_page=True), screens
        finally:
            context.close()
            STABLE_SCREENS.mkdir(exist_ok=True)
            for png in screens.glob("*.png"):
                (STABLE_SCREENS / png.name).write_bytes(png.read_bytes())
