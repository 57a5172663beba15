"""Run logs a person reads: a failed task or flow run is one ERROR line with its reason; its
traceback goes only to DEBUG (issue "A review desk experts can work at": run logs showed ~40
lines of traceback under each failure message).

Prefect's engine logs a failure on the ``prefect.flow_runs`` and ``prefect.task_runs`` loggers
with the exception attached. :class:`OneLineErrors` takes the traceback off that record and, when
DEBUG is enabled for the logger, hands it on as a DEBUG record of its own (just before the ERROR
line), so ``PREFECT_LOGGING_LEVEL=DEBUG`` still shows it. Installed once per process by
:func:`one_line_errors` (every flow module imports :mod:`flows.runtime`, which calls it)."""

from __future__ import annotations

import logging

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
