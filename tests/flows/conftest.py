"""Flow tests run against a real temporary Prefect server, the session's ``prefect_server``
(tests/conftest.py): it starts with the first test that asks for it (``pytestmark =
pytest.mark.usefixtures("prefect_server")`` in a module, or the fixture as an argument), so a
run of pure unit tests never starts one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO

SAMPLE = REPO / "flows" / "samples" / "qasper_demo.jsonl"


@pytest.fixture()
def sample_batch() -> Path:
    """Three QASPER dev papers with their questions (bundled for the demo)."""
    return SAMPLE
