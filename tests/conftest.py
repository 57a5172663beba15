"""Shared fixtures. Tests read the real QASPER/QuALITY dev data in place from ../shared/data."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# Prefect reads its home at import: every test run gets its own, never the user's ~/.prefect.
os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="grace-prefect-home-")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only dev data folder (QASPER and QuALITY); never copied into the repo."""
    assert SHARED_DATA.is_dir(), f"expected the shared dev data at {SHARED_DATA}"
    return SHARED_DATA
