"""The flows' one task decorator, and the one "already committed? → work → commit with the
stage row" sequence.

Retries only where they can help: a domain error (bad input, invalid settings, a refused
verdict file, a model that refuses every request, …: any :class:`~grace_core.errors.GraceError`
except :class:`~grace_core.errors.LakeError`) fails the task at once; I/O errors (the lake or
a service unreachable, a timeout) are retried with backoff.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import polars as pl
from prefect import task
from prefect.cache_policies import NONE

from flows.runtime import stage_row, timestamp
from grace_core.errors import GraceError, LakeError
from storage.lake import Lake

T = TypeVar("T")


def _failure(state: Any) -> BaseException | None:
    data = getattr(state, "data", None)
    if isinstance(data, BaseException):
        return data
    try:
        out = state.result(raise_on_failure=False)
    except Exception as exc:  # the result itself cannot be read: treat as I/O
        return exc
    return out if isinstance(out, BaseException) else None


def retry_on_io(task_: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry unless the failure is a domain error."""
    exc = _failure(state)
    return not isinstance(exc, GraceError) or isinstance(exc, LakeError)


def grace_task(*, retries: int = 2, retry_delay_seconds: float = 5, **options: Any) -> Callable:
    """``@task`` for GRACE's flows: no result caching (every input is a parameter or the lake),
    retries with exponential backoff on I/O errors only (:func:`retry_on_io`)."""
    delays = [retry_delay_seconds * 2 ** i for i in range(retries)] if retries else 0
    return task(retries=retries, retry_delay_seconds=delays, retry_condition_fn=retry_on_io, cache_policy=NONE, **options)


def commit_once(
    lake: Lake, key: str, *, round_id: int, stage: str, work: Callable[[], tuple[Mapping[str, pl.DataFrame], int, T]],
    detail: str | Callable[[T], str] = "{}", started: datetime | None = None,
) -> T | None:
    """Run ``work`` for the unit of work ``key`` unless it is committed already (then None).

    ``work()`` returns ``(tables, n_documents, result)``; the tables are committed under
    ``key`` together with the ``rounds`` row of ``stage`` (real start and finish; its
    ``detail_json`` is ``detail``, or ``detail(result)`` when what to record comes out of the
    work), all or nothing, and ``result`` is returned."""
    if lake.is_committed(key):
        return None
    started = started or timestamp(None)
    tables, n_documents, result = work()
    recorded = detail(result) if callable(detail) else detail
    lake.commit(key, {**tables, "rounds": stage_row(round_id, stage, started, n_documents, recorded)})
    return result
