"""A Prefect API for one command: the configured one, or a temporary local server that never
outlives the command.

Prefect starts its temporary server as a child process and stops it only at a normal
interpreter exit, so a command ended by SIGTERM or SIGHUP (no ``atexit``) or by SIGKILL left it
running. :func:`prefect_api` starts that server itself, turns SIGTERM and SIGHUP into a normal
exit (SIGINT already is one), stops the server on the way out, and stops it too when the
command's process dies without cleaning up (SIGKILL, OOM kill): the server process is started
with Linux's parent-death signal (``PR_SET_PDEATHSIG``: SIGTERM the moment its parent dies, from
its first instruction on, so also while the command still waits for it to answer), and a
watchdog process, started once it answers, follows with SIGKILL if it has not stopped 5 s after.
A configured API (``PREFECT_API_URL``) that does not answer is one line before any flow runs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from unittest import mock

from grace_core.errors import GraceError, first_line

STARTUP_TIMEOUT_S = 180
"""Least wait for the temporary server (its first start migrates a new database, slow on a busy
machine); Prefect's own ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` wins when longer."""


class PrefectServerUnavailable(GraceError):
    """The temporary Prefect server did not start, or the configured API does not answer."""

WATCHDOG = """
import os, signal, sys, time
parent, server = int(sys.argv[1]), int(sys.argv[2])
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the parent's to handle
while os.getppid() == parent:
    time.sleep(0.2)
try:
    os.kill(server, signal.SIGTERM)
    for _ in range(50):
        time.sleep(0.1)
        os.kill(server, 0)
    os.kill(server, signal.SIGKILL)
except ProcessLookupError:
    pass
"""
"""Run as ``python -c WATCHDOG <parent pid> <server pid>``: once the parent is gone (the watchdog
is re-parented), stop the server (SIGTERM, then SIGKILL after 5 s)."""

_EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1  # prctl(2)


def _die_with_parent() -> None:
    """In a child between fork and exec: ask the kernel for SIGTERM when the parent dies (a
    no-op where prctl is missing; the watchdog still stops the server once it answers)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _reserved_port() -> socket.socket:
    """A loopback TCP socket bound to a port the kernel chose and nobody else can take, not yet
    listening (a connection to it is refused until the server listens, once it is ready)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


def _temporary_server():
    """Prefect's temporary server whose process gets :func:`_die_with_parent` and serves on a
    socket bound here (Prefect's own environment and start-up checks otherwise).

    Prefect picks a random port in 8000–8999 that was free a moment before and lets uvicorn bind
    it seconds later: another server (a second command, a test's) could take it in between, and
    Prefect's health check then reached that other server and took it for its own. Here the port
    is bound before the server starts and handed to uvicorn as an open socket (``--fd``), so the
    URL can only ever reach this command's server."""
    from prefect.server.api.server import SubprocessASGIServer

    class DiesWithParent(SubprocessASGIServer):
        _instances = {}  # Prefect keeps one server per port in a registry its subclasses share:
        # without a registry of its own, this would be handed (and would stop) a server of Prefect's
        # own already running in the process under the same key (None: "any port")

        def _run_uvicorn_command(self) -> subprocess.Popen:
            sock = _reserved_port()
            self.port = sock.getsockname()[1]
            spawn = subprocess.Popen

            def on_socket(*args, **kwargs) -> subprocess.Popen:
                given = list(kwargs.pop("args", args[0] if args else []))
                argv = [a for i, a in enumerate(given)  # Prefect's command line without --host H --port N
                        if a not in ("--host", "--port") and (i == 0 or given[i - 1] not in ("--host", "--port"))]
                argv += ["--fd", str(sock.fileno())]
                return spawn(argv, preexec_fn=_die_with_parent, pass_fds=(sock.fileno(),), **kwargs)

            try:
                with mock.patch.object(subprocess, "Popen", on_socket):
                    return super()._run_uvicorn_command()
            finally:
                sock.close()  # the server holds its own copy

    return DiesWithParent()


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def prefect_api() -> Iterator[tuple[str, bool]]:
    """Yield (URL, temporary) of the Prefect API the command's flows use: ``PREFECT_API_URL``
    when configured, else a temporary server started here, stopped when the block ends, on
    SIGTERM/SIGHUP/SIGINT, or by the watchdog if this process is killed."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, temporary_settings

    configured = PREFECT_API_URL.value()
    if configured:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            failure = client.api_healthcheck()
        if failure is not None:
            reason = " ".join(str(failure).split()) or type(failure).__name__
            raise PrefectServerUnavailable(f"the Prefect API at {configured} (PREFECT_API_URL) does not answer ({reason}); "
                                           "start that server, or unset PREFECT_API_URL to run on a temporary one")
        yield configured, False
        return
    previous = {s: signal.signal(s, _exit_on_signal) for s in _EXIT_SIGNALS}
    server = _temporary_server()
    watchdog = None
    try:
        try:
            server.start(timeout=max(STARTUP_TIMEOUT_S, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()))
        except RuntimeError as exc:
            raise PrefectServerUnavailable(
                f"the temporary Prefect server did not start ({first_line(exc)}); set PREFECT_API_URL to a running server"
            ) from None
        assert server.server_process is not None
        watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()), str(server.server_process.pid)])
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            try:
                yield server.api_url, True
            finally:
                from prefect.logging.handlers import APILogWorker

                APILogWorker.drain_all(timeout=5)  # the run's logs reach the server before it stops
    finally:
        server.stop()
        if watchdog is not None:
            watchdog.kill()
            watchdog.wait()
        for s, handler in previous.items():
            signal.signal(s, handler)
