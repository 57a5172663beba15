"""A failed run's log line is one line at ERROR; its traceback only at DEBUG (flows/run_logs.py)."""

from __future__ import annotations

import logging

import pytest

import flows.runtime  # noqa: F401  (installs the filter, as every flow does)
from flows.run_logs import OneLineErrors


def _fail(logger: logging.Logger) -> None:
    try:
        raise ValueError("the reason, in one line")
    except ValueError:
        logger.error("Finished in state Failed('Flow run encountered an exception: ValueError: the reason, in one line')", exc_info=True)


@pytest.mark.parametrize("level, expect_traceback", [(logging.INFO, False), (logging.DEBUG, True)])
def test_a_failure_is_one_error_line_and_its_traceback_only_at_debug(level: int, expect_traceback: bool,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("prefect.flow_runs")
    assert any(isinstance(f, OneLineErrors) for f in logger.filters)
    with caplog.at_level(level, logger="prefect.flow_runs"):
        _fail(logger)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None and "\n" not in caplog.text.split("ERROR", 1)[1].strip()
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info]
    assert bool(debug) is expect_traceback
    if expect_traceback:
        assert "Traceback (most recent call last)" in logging.Formatter().format(debug[0])
