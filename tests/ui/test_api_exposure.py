"""The rule by which ``grace serve`` warns about a Prefect API that lets strangers in
(flows/api_exposure.py): pure, from the URL, the probe's answer and the client's login; the
probe itself against a local HTTP server that answers as Prefect's would, with and without a login."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from flows.api_exposure import answers_without_login, exposure_warning, is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.10.20.30", "localhost", "LocalHost", "localhost.", "::1", "::ffff:127.0.0.1"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "10.0.0.1", "::", "fe80::1", "prefect.example.org", "localhost.example.org",
                                  "128.0.0.1", "", None])
def test_other_hosts(host: str | None) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize(("url", "answered", "client_login", "warns"), [
    ("http://192.168.1.20:4200/api", True, False, True),   # open, reachable: the case to warn about
    ("http://0.0.0.0:4200/api", True, False, True),         # all interfaces: reachable from other machines
    ("http://prefect.example.org/api", True, False, True),  # a name is not resolved: not loopback
    ("http://[2001:db8::1]:4200/api", True, False, True),
    ("http://192.168.1.20:4200/api", True, True, True),     # the client sends a login the server ignores: still open
    ("http://192.168.1.20:4200/api", False, False, False),  # refused (401): a login guards it
    ("http://192.168.1.20:4200/api", None, False, False),   # no answer: nothing known, nothing said
    ("http://127.0.0.1:4200/api", True, False, False),      # loopback only
    ("http://localhost:4200/api", True, False, False),
    ("http://[::1]:4200/api", True, False, False),
])
def test_the_warning_rule(url: str, answered: bool | None, client_login: bool, warns: bool) -> None:
    warning = exposure_warning(url, answered, client_login)
    assert (warning is not None) == warns
    if warning:
        assert "\n" not in warning and url in warning and "PREFECT_SERVER_API_AUTH_STRING" in warning
        assert ("ignores the PREFECT_API_AUTH_STRING" in warning) == client_login


class _Prefect(BaseHTTPRequestHandler):
    """Answers as Prefect's API does: ``/health`` always, ``/admin/version`` only with the
    login when the server has one."""

    login: str | None = None

    def do_GET(self) -> None:  # noqa: N802
        guarded = self.path.endswith("/admin/version") and self.login is not None
        status = 401 if guarded and self.headers.get("Authorization") != self.login else 200
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b'"3.9.1"')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def local_api() -> Iterator[tuple[str, type[_Prefect]]]:
    handler = type("Handler", (_Prefect,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api", handler
    finally:
        server.shutdown()
        server.server_close()


def test_the_probe_asks_a_guarded_path(local_api) -> None:
    url, handler = local_api
    assert answers_without_login(url) is True
    handler.login = "Basic dXNlcjpwdw=="
    assert answers_without_login(url) is False  # /health would have answered 200 here
    assert answers_without_login("http://127.0.0.1:9/api", timeout_s=2) is None  # nothing listens on the discard port


def test_serve_warns_in_one_line_and_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """``grace serve`` on an open API at a LAN address: one warning line on stderr, then it serves."""
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    from flows.cli import _register, app

    _register()
    served: list = []
    monkeypatch.setattr("flows.api_exposure.answers_without_login", lambda url: True)
    monkeypatch.setattr("flows.cli.serve.pool_owned", lambda deployments: {})
    monkeypatch.setattr("prefect.serve", lambda *deployments, **options: served.extend(deployments))
    with temporary_settings(updates={PREFECT_API_URL: "http://192.168.1.20:4200/api"}, restore_defaults={PREFECT_API_AUTH_STRING}):
        result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("warning: the Prefect API at http://192.168.1.20:4200/api answers without a login")
    assert served
