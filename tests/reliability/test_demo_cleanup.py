"""A killed ``grace demo`` leaves no Prefect server running (issue 11, item 7), and the temporary
server a command starts is the one its URL reaches.

``grace demo`` runs as a subprocess with no ``PREFECT_API_URL``, so it starts its temporary
Prefect server; once the demo has printed that server's address (the server answers), the test
kills the demo with SIGTERM, SIGINT or SIGKILL and asserts that the server's port stops
answering and that no process the demo started survives.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import prefect
import psutil
import pytest

from tests.conftest import REPO
from tests.prefect_db import seed_home
from tests.reliability.conftest import Tally

pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.e2e]

SERVER_LINE = re.compile(r"temporary server at (http://127\.0\.0\.1:\d+/api)")


def answers(api_url: str) -> bool:
    try:
        return httpx.get(f"{api_url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for_server_line(proc: subprocess.Popen, timeout_s: float) -> str:
    """Read the demo's stdout until it names its temporary server; returns the API URL."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    seen = ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sel.select(timeout=1):
            line = proc.stdout.readline()
            if not line:
                break
            seen += line
            if m := SERVER_LINE.search(line):
                return m.group(1)
    raise AssertionError(f"the demo never named its server; output so far:\n{seen}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["SIGTERM", "SIGINT", "SIGKILL"])
def test_a_killed_demo_leaves_no_server_running(sig: signal.Signals, tmp_path: Path, tally: Callable[[str], Tally],
                                                migrated_prefect_db: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRACE_", "PREFECT_API_URL"))}
    env |= {"PREFECT_HOME": str(tmp_path / "prefect-home"), "OMP_NUM_THREADS": "1", "GRACE_TORCH_THREADS": "1"}
    seed_home(tmp_path / "prefect-home", migrated_prefect_db)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from flows.cli import main; main()", "demo", "--lake", str(tmp_path / "lake"), "--rounds", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
    )
    try:
        api_url = wait_for_server_line(proc, timeout_s=300)
        assert answers(api_url), "the server is up when the demo names it"
        started = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        assert started, "the demo runs its server as a child process"
        proc.send_signal(sig)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (answers(api_url) or any(alive(pid) for pid in started)):
            time.sleep(0.25)
        survivors = [pid for pid in started if alive(pid)]
        still_answering = answers(api_url)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read() if proc.stderr else ""
    tally("demo cleanup").record(clear_error=proc.returncode != 0, traceback="Traceback" in stderr,
                               got_through=bool(survivors) or still_answering)
    assert proc.returncode != 0
    assert not still_answering, f"the server at {api_url} still answers after {sig.name}"
    assert not survivors, f"processes of the demo survive {sig.name}: {survivors}; stderr:\n{stderr[-2000:]}"


class Impostor(BaseHTTPRequestHandler):
    """Another server on the port Prefect would have picked: answers every GET with 200."""

    def do_GET(self) -> None:
        body = b'"impostor"'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_the_temporary_server_url_reaches_the_commands_own_server_when_another_holds_prefects_port(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefect picks a port that was free a moment before the server binds it; a server started in
    between (another command's, as in a CI run) answered the health check in its place.
    Here Prefect is made to pick a port another server already holds."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.prefect_server import prefect_api

    impostor = ThreadingHTTPServer(("127.0.0.1", 0), Impostor)
    taken = impostor.server_address[1]
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    monkeypatch.setattr(SubprocessASGIServer, "find_available_port", lambda self: taken)
    # A server of Prefect's own registered in the process (as the test harness's is): not ours to use or stop.
    monkeypatch.setattr(SubprocessASGIServer, "_instances", {})
    bystander = SubprocessASGIServer()
    try:
        with temporary_settings(restore_defaults={PREFECT_API_URL}), prefect_api() as (api_url, temporary):
            assert temporary
            assert f":{taken}/" not in api_url
            assert httpx.get(f"{api_url}/admin/version", timeout=10).json() == prefect.__version__
            assert not bystander.running
        assert not answers(api_url), "the command's server stops with the command"
        assert SubprocessASGIServer._instances == {None: bystander}
    finally:
        impostor.shutdown()
        impostor.server_close()
