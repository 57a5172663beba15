"""How ``./dev test`` spreads the tests over its pytest-xdist workers (``-n N --dist loadgroup``,
the whole suite as CI runs it and the fast lane alike).

Work units. Most tests are a unit of their own, sent to whichever worker is free. Two kinds of
tests are kept together in one unit, so they run on one worker:

- the tests that load the packaged offline models (torch) or talk to the loopback litellm
  server (:data:`OFFLINE_MODEL_TESTS`): only one process imports torch and litellm and loads
  the model;
- the tests of a module that share a costly module- or session-scoped fixture (a lake built by
  real rounds, the demo run, a loopback model server…, :data:`SHARED_FIXTURE_MODULES`): split
  over two workers, each worker would build the fixture again.

Order. Units are sent longest first (their expected seconds, :data:`EXPECTED_S`, measured
with ``--durations``; a test not listed counts :data:`DEFAULT_S`), so the browser tests and the
real rounds start at once, on both workers, and the many short tests fill in around them at the
end instead of one long test running alone on one worker while the other idles. A worker is
sent its next unit when it holds its last test (xdist's own scheduler sends it when two are
left, which queues a long unit behind a long test while the other worker may be idle).

pytest-xdist 3.8.0 groups ``xdist_group`` marks by appending ``@group`` to the worker's node ids,
which pytest 9.2 no longer reads (pytest-dev/pytest-xdist#1386): the marks are silently ignored.
So units are chosen here, on the controller, from the node id alone, through xdist's
``pytest_xdist_make_scheduler`` hook (tests/conftest.py)."""

from __future__ import annotations

from collections import OrderedDict

from xdist.scheduler import LoadGroupScheduling

OFFLINE_MODELS = "offline-models"
OFFLINE_MODEL_TESTS = (
    "tests/models/",
    "tests/evaluation/test_expansion.py::test_hallucinated_claims_are_those_only_the_corrupted_sentence_has",
)
"""Node id prefixes of the tests that load the offline models or use litellm."""

SHARED_FIXTURE_MODULES = (
    "tests/evaluation/test_expansion.py",  # two_papers: a real eval on two papers
    "tests/flows/test_pipeline.py",  # two_rounds: two real rounds on three papers
    "tests/reliability/test_bad_inputs.py",  # the sample and review lake templates
    "tests/reliability/test_llm_faults.py",  # its loopback model server and Prefect server
    "tests/reliability/test_sql_attacks.py",  # the attacked lakes (local and S3)
    "tests/storage/test_catalog.py",  # two_rounds
    "tests/storage/test_cli.py",  # the filled lake template
    "tests/storage/test_migrate_rebuild.py",  # the old and rebuilt lakes
    "tests/test_doc_commands.py",  # the demo run of the README's first block
)
"""Modules whose tests share a costly module- or session-scoped fixture: one unit each."""

DEFAULT_S = 1.0
"""Expected seconds of a test :data:`EXPECTED_S` does not list."""

EXPECTED_S: dict[str, float] = {}
"""Expected seconds of a test (node id) or of every test under a node id prefix (the longest
prefix wins), from a two-worker run's ``--durations`` (setup, call and teardown summed). Only
the order of the units depends on them: a wrong figure costs time, never a test."""


def worker_group(nodeid: str) -> str | None:
    """The unit of the test ``nodeid`` when it shares one (None: a unit of its own)."""
    if nodeid.startswith(OFFLINE_MODEL_TESTS):
        return OFFLINE_MODELS
    module = nodeid.split("::", 1)[0]
    return module if module in SHARED_FIXTURE_MODULES else None


def expected_s(nodeid: str) -> float:
    """The expected seconds of the test ``nodeid`` (:data:`EXPECTED_S`)."""
    if nodeid in EXPECTED_S:
        return EXPECTED_S[nodeid]
    prefixes = [p for p in EXPECTED_S if nodeid.startswith(p)]
    return EXPECTED_S[max(prefixes, key=len)] if prefixes else DEFAULT_S


class LongestFirstScheduling(LoadGroupScheduling):
    """``--dist loadgroup`` with the units of :func:`worker_group`, sent longest first, a
    worker's next unit when it holds its last test."""

    ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return worker_group(nodeid) or super()._split_scope(nodeid)

    def _assign_work_unit(self, node) -> None:
        if not self.ordered:  # the queue xdist built (largest units first), ordered by expected time once
            units = sorted(self.workqueue.items(), key=lambda unit: -sum(expected_s(n) for n in unit[1]))
            self.workqueue = OrderedDict(units)
            self.ordered = True
        super()._assign_work_unit(node)

    def _reschedule(self, node) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) > 1:
            return  # it has a test to run after the one it is running
        self._assign_work_unit(node)
