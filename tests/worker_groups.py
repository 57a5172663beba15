"""Which tests share one pytest-xdist worker in the fast lane (``./dev test -m "not slow and not
e2e"``, ``--dist loadgroup``).

The tests that load the packaged offline models (torch) or talk to the
loopback litellm server run on one worker, so that only one process imports torch and litellm and
loads the model; every other test is scheduled on its own, to whichever worker is free.

pytest-xdist 3.8.0 groups ``xdist_group`` marks by appending ``@group`` to the worker's node ids,
which pytest 9.2 no longer reads (pytest-dev/pytest-xdist#1386): the marks are silently ignored.
So the group is chosen here, on the controller, from the node id alone, through xdist's
``pytest_xdist_make_scheduler`` hook (tests/conftest.py)."""

from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling

OFFLINE_MODELS = "offline-models"
OFFLINE_MODEL_TESTS = (
    "tests/models/",
    "tests/evaluation/test_expansion.py::test_hallucinated_claims_are_those_only_the_corrupted_sentence_has",
)
"""Node id prefixes of the tests that load the offline models or use litellm."""


def worker_group(nodeid: str) -> str | None:
    """The group of the test ``nodeid`` (None: scheduled on its own)."""
    return OFFLINE_MODELS if nodeid.startswith(OFFLINE_MODEL_TESTS) else None


class OfflineModelsScheduling(LoadGroupScheduling):
    """``--dist loadgroup`` with the offline-model tests as one group (sent first, as the largest
    unit of work) and every other test a unit of its own."""

    def _split_scope(self, nodeid: str) -> str:
        return worker_group(nodeid) or super()._split_scope(nodeid)
