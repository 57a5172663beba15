"""Shared fixtures. Tests read the QASPER/QuALITY samples bundled in tests/fixtures/ (see its
README for attribution and licence); the full QASPER/QuALITY dev files, when the machine has
them (the folder ``GRACE_DATA_DIR`` names), are only read by the tests that ask for
``shared_data``: optional checks over the whole files, skipped with their reason without it."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Prefect reads its home at import: every test run gets its own, never the user's ~/.prefect,
# removed when the process ends (the session's Prefect server is stopped before).
os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="grace-prefect-home-")
atexit.register(shutil.rmtree, os.environ["PREFECT_HOME"], ignore_errors=True)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# The offline embedder runs float32 in the tests, whatever the CPU: "auto" would pick bfloat16
# where the CPU has it, and the labels tests assert would then depend on the CI machine (its
# vectors differ by a cosine of ~5e-5). Settings built from the environment (flows, CLI, and the
# subprocesses that inherit it) read this; models built directly get it from `float32_embeddings`
# below. (A few subprocesses start from a bare environment on purpose; they run "auto", and
# assert nothing that depends on vector values.)
os.environ["GRACE_EMBED_PRECISION"] = "float32"

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
QASPER_SAMPLE = FIXTURES / "qasper_dev_sample.jsonl"
QUALITY_SAMPLE = FIXTURES / "quality_dev_sample.jsonl"
SHARED_DATA = Path(os.environ.get("GRACE_DATA_DIR") or "GRACE_DATA_DIR is not set")
"""The full dev data folder (``qasper/qasper_dev.jsonl``, ``quality/quality_dev_subset.jsonl``),
named by ``GRACE_DATA_DIR``; every other test runs on tests/fixtures/."""


@pytest.fixture(scope="session")
def qasper_sample() -> Path:
    """Six QASPER v0.3 dev papers (the first three of the dev file, then three with boolean,
    unanswerable and empty-section shapes)."""
    return QASPER_SAMPLE


@pytest.fixture(scope="session")
def quality_sample() -> Path:
    """The first three articles of the QuALITY v1.0.1 dev subset (the first one holds an HTML comment)."""
    return QUALITY_SAMPLE


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The full read-only dev data folder (QASPER and QuALITY), for the few full-dataset
    checks; skipped with a reason when the machine does not have it (:data:`SHARED_DATA`)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"full dev data not found at {SHARED_DATA} (set GRACE_DATA_DIR; only full-dataset checks need it)")
    return SHARED_DATA


DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


MOTO_CHILD = (
    "import sys, time; from moto.server import ThreadedMotoServer; import moto.backends as backends;"
    # moto lists its package folder (~180 isdir calls) on every request to find the service; the
    # list never changes while it runs, so once: half of the server's CPU time in the S3 tests
    "modules = tuple(backends.list_of_moto_modules()); backends.list_of_moto_modules = lambda: modules;"
    "s = ThreadedMotoServer(ip_address='127.0.0.1', port=0, verbose=False); s.start();"
    "print('%s:%d' % s.get_host_and_port(), flush=True); sys.stdin.read()"
)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server (``ThreadedMotoServer``) on a free loopback port, one per session (per
    pytest-xdist worker) for every folder of tests, with dummy
    credentials in the environment (inherited by writer subprocesses). It runs in a child
    process: some delta-rs calls hold the GIL while waiting for S3, which would stall a server
    thread of the test process itself."""
    saved = {k: os.environ.get(k) for k in DUMMY_AWS_ENV}
    os.environ.update(DUMMY_AWS_ENV)
    server = subprocess.Popen([sys.executable, "-c", MOTO_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        yield f"http://{server.stdout.readline().strip()}"
    finally:
        server.kill()
        server.wait(timeout=30)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """The README's first block, run once per session (``./dev demo`` into the session's folder,
    tests/test_doc_commands.py ``run_block``): the folder, holding ``demo-lake``, and what the
    run printed. The doc-block tests check the run; tests/storage copies its lake
    (``demo_lake_template``); tests/worker_groups.py keeps them all on one worker."""
    from tests.test_doc_commands import DEMO_BLOCK, run_block

    folder = tmp_path_factory.mktemp("demo")
    return folder, run_block(DEMO_BLOCK, folder)


@pytest.fixture(scope="session")
def migrated_prefect_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a migrated Prefect database (tests/prefect_db.py), made by the first
    pytest-xdist worker that asks, in the folder the workers of this run share."""
    from tests.prefect_db import migrated_database

    base = tmp_path_factory.getbasetemp()
    return migrated_database(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)


@pytest.fixture(scope="session")
def prefect_server(migrated_prefect_db: Path) -> Iterator[None]:
    """A real temporary Prefect server (``prefect_test_harness``) for the flow tests of this
    process, one per session (per pytest-xdist worker), with ``PREFECT_HOME`` in a temporary
    folder (above), on a copy of the migrated database. It starts with the first test that asks
    for it (``pytest.mark.usefixtures("prefect_server")`` in a module, or the fixture as an
    argument), so a run of pure unit tests never starts one; the harness sets the API URL in
    Prefect's settings context, never in the environment. ``PREFECT_HOME`` gets a copy too, so the
    temporary server of a ``grace`` command run without ``PREFECT_API_URL`` does not migrate a
    new database."""
    from functools import partial
    from unittest import mock

    from prefect.testing.utilities import prefect_test_harness

    from tests.prefect_db import harness_folder, seed_home

    seed_home(Path(os.environ["PREFECT_HOME"]), migrated_prefect_db)
    with mock.patch("prefect.testing.utilities.mkdtemp", partial(harness_folder, migrated_prefect_db)), \
            prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture(scope="session", autouse=True)
def float32_embeddings() -> Iterator[None]:
    """"auto" precision means float32 in this test process too (see above), from before any
    fixture builds a model; bfloat16 tests ask for it by name, and the test of "auto" puts the
    CPU's own answer back."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("grace_core.models.offline_embedder.native_bfloat16", lambda: False)
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test on the moto S3 server is an integration test: marked ``slow`` (out of the fast
    lane, ``-m "not slow and not e2e"``), as are the ``s3`` cases of the lake fixtures. A test
    on a Prefect server (the ``prefect_server`` fixtures) must be marked ``slow`` or ``e2e``
    itself: the fast lane's unit tests never start one."""
    unmarked = []
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "s3_endpoint" in fixtures:
            item.add_marker(pytest.mark.slow)
        if "prefect_server" in fixtures and not (item.get_closest_marker("slow") or item.get_closest_marker("e2e")):
            unmarked.append(item.nodeid)
    if unmarked:
        raise pytest.UsageError(f"tests on a Prefect server not marked slow or e2e: {', '.join(unmarked)}")


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """pytest-xdist, ``--dist loadgroup`` (as ``./dev test`` runs the suite): the tests that load
    the packaged offline models share one worker, as do the tests of a module with a costly shared
    fixture, and the longest units start first (tests/worker_groups.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.worker_groups import LongestFirstScheduling

    return LongestFirstScheduling(config, log)


# Reliability tallies (tests/reliability/conftest.py) of pytest-xdist workers, summed by the
# controller, which runs no test itself, and printed at the end like a one-process run prints its own.
WORKER_TALLIES: dict[str, dict[str, int]] = {}


def tally_line(group: str, counts: dict[str, int]) -> str:
    """The end-of-run line of one group of reliability probes."""
    return f"reliability {group}: " + ", ".join(f"{name.replace('_', ' ')} {n}" for name, n in counts.items())


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist: add the tallies a worker hands over when it finishes."""
    for group, counts in getattr(node, "workeroutput", {}).get("reliability_tallies", {}).items():
        total = WORKER_TALLIES.setdefault(group, dict.fromkeys(counts, 0))
        for name, n in counts.items():
            total[name] += n


def pytest_terminal_summary(terminalreporter) -> None:
    for group, counts in sorted(WORKER_TALLIES.items()):
        terminalreporter.write_line(tally_line(group, counts))
