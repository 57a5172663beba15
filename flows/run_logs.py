"""Run logs a person reads: a failed task or flow run is one ERROR line with its reason; its
traceback goes only to DEBUG (issue "A review desk experts can work at": run logs showed ~40
lines of traceback under each failure message).

Prefect's engine logs a failure on the ``prefect.flow_runs`` and ``prefect.task_runs`` loggers
with the exception attached. :class:`OneLineErrors` takes the traceback off that record and, when
DEBUG is enabled for the logger, hands it on as a DEBUG record of its own (just before the ERROR
line), so ``PREFECT_LOGGING_LEVEL=DEBUG`` still shows it. Installed once per process by
:func:`one_line_errors` (every flow module imports :mod:`flows.runtime`, which calls it).

A command's terminal (``grace round``, ``grace demo``) is quiet by default (issue 37):
:func:`terminal_logs` keeps Prefect's own records (engine states, the temporary server and its
docs link, the client) off the console unless ``--verbose``, and shows instead the lines GRACE's
flows log themselves (:class:`StageLines`): the round's one line per stage, which says what this
run did, and every warning or error. Every record still goes to the Prefect API, so the UI shows
the whole log either way."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


class OneLineErrors(logging.Filter):
    """An ERROR record's traceback moved to a DEBUG record of the same logger (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.exc_info:
            exc_info, record.exc_info, record.exc_text = record.exc_info, None, None
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(logging.DEBUG):
                logger.handle(logging.makeLogRecord({**record.__dict__, "levelno": logging.DEBUG, "levelname": "DEBUG",
                                                     "msg": f"traceback of: {record.getMessage()}", "args": (), "exc_info": exc_info}))
        return True


def one_line_errors() -> None:
    """Install :class:`OneLineErrors` on the run loggers (once)."""
    for name in RUN_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, OneLineErrors) for f in logger.filters):
            logger.addFilter(OneLineErrors())


def _prefect_dir() -> str:
    import prefect

    return os.path.dirname(os.path.abspath(prefect.__file__)) + os.sep


class StageLines(logging.Handler):
    """The records GRACE's flows log themselves (not Prefect's engine, whose records come from
    its own modules), handed to ``show`` as one line each: the INFO lines of the flow named
    ``flow`` (the round's parent flow logs one line per stage, with what the stage did this run)
    and every WARNING or ERROR of any flow or task run (``warning: …``, ``error: …``)."""

    def __init__(self, show: Callable[[str], None], flow: str) -> None:
        super().__init__(logging.INFO)
        self.show, self.flow, self.prefect_dir = show, flow, _prefect_dir()

    def emit(self, record: logging.LogRecord) -> None:
        if record.pathname.startswith(self.prefect_dir):
            return
        if record.levelno >= logging.WARNING:
            self.show(f"{record.levelname.lower()}: {record.getMessage()}")
        elif getattr(record, "flow_name", None) == self.flow:
            self.show(record.getMessage())


class WithoutPrefect(logging.Filter):
    """Drops the records of Prefect's own loggers (``prefect``, ``prefect.*``) from a handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "prefect" or record.name.startswith("prefect."))


class _WithoutTraceback(logging.Formatter):
    """Formats like ``inner`` but leaves out the record's traceback (the record is unchanged
    for the other handlers, e.g. the one sending logs to the Prefect API)."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        try:
            return self.inner.format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved


@contextmanager
def terminal_logs(show: Callable[[str], None], *, flow: str, verbose: bool = False) -> Iterator[None]:
    """While a command runs flows: :class:`StageLines` of ``flow`` go to ``show``; Prefect's
    console handler prints no traceback (a failed run is its ERROR lines there, and the command
    prints the error once itself) and, unless ``verbose``, none of Prefect's own records (its
    INFO lines, the temporary server's docs link, a failed run's ERROR lines: the command's one
    error line says it). The records still reach the Prefect API (the UI's run logs); the run
    loggers keep their level (``PREFECT_LOGGING_LEVEL``, INFO by default), which the stage lines
    need too."""
    import prefect  # noqa: F401  (Prefect sets up its logging at import: its console handler on the root logger)

    consoles = [h for h in logging.getLogger().handlers if type(h).__name__ == "PrefectConsoleHandler"]
    quiet = WithoutPrefect()
    saved = [h.formatter for h in consoles]
    for handler in consoles:
        handler.setFormatter(_WithoutTraceback(handler.formatter))
        if not verbose:
            handler.addFilter(quiet)
    lines = StageLines(show, flow)
    run_loggers = [logging.getLogger(name) for name in RUN_LOGGERS]
    for logger in run_loggers:
        logger.addHandler(lines)
    try:
        yield
    finally:
        for logger in run_loggers:
            logger.removeHandler(lines)
        for handler, formatter in zip(consoles, saved):
            handler.removeFilter(quiet)
            handler.setFormatter(formatter)
