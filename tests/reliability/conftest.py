"""Shared by the reliability probes (issue 11; the moto S3 server fixture is tests/conftest.py's): a tally of
probes that prints the issue's totals at the end of a run (probes tried, clear errors,
tracebacks, attacks that got through or were silently accepted, resource blow-ups, rows lost). A probe's test still asserts its outcome;
the tally only counts."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import pytest

from tests.conftest import tally_line


@dataclass
class Tally:
    probes: int = 0
    clear_errors: int = 0
    tracebacks: int = 0
    got_through: int = 0
    blow_ups: int = 0
    rows_lost: int = 0

    def record(self, *, clear_error: bool, traceback: bool = False, got_through: bool = False, blow_up: bool = False,
               rows_lost: int = 0) -> None:
        """Count one probe and what it showed (``blow_up``: past its time or memory bound)."""
        self.probes += 1
        self.clear_errors += clear_error
        self.tracebacks += traceback
        self.got_through += got_through
        self.blow_ups += blow_up
        self.rows_lost += max(rows_lost, 0)


TALLIES: dict[str, Tally] = {}


@pytest.fixture(scope="session")
def tally() -> Callable[[str], Tally]:
    """``tally(group)``: the :class:`Tally` of one group of probes (e.g. ``"sql attacks"``)."""
    return lambda group: TALLIES.setdefault(group, Tally())


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a pytest-xdist worker, hand this process's tallies to the controller (tests/conftest.py
    sums and prints them)."""
    handover = getattr(session.config, "workeroutput", None)
    if handover is not None:
        handover["reliability_tallies"] = {group: asdict(t) for group, t in TALLIES.items()}


def pytest_terminal_summary(terminalreporter) -> None:
    for group, t in sorted(TALLIES.items()):
        terminalreporter.write_line(tally_line(group, asdict(t)))
