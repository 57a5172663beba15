"""Papers of ``grace eval expansion --workers N`` on N spawned processes, each with its own
model roles. Results do not depend on the number of workers: every sampled choice is seeded
per question and context, and the papers' runs are put back in file order."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed

from flows.settings import GraceSettings
from grace_core.documents import DocumentBatch, parse_batch
from grace_core.evaluation.expansion import PaperRun, run_paper
from grace_core.models.factory import ModelRoles, build_roles

_WORKER: dict[str, GraceSettings | DocumentBatch | ModelRoles] = {}
"""The worker process's settings, batch and roles, set once by :func:`_start`."""


def _start(settings: GraceSettings, content: bytes, name: str) -> None:
    roles = build_roles(settings)
    roles.start_round(0)  # one spend counter per worker for the whole run
    _WORKER.update(settings=settings, batch=parse_batch(content, name), roles=roles)


def _run(doc_id: str, options: dict) -> PaperRun:
    return run_paper(_WORKER["batch"], doc_id, _WORKER["roles"], _WORKER["settings"], **options)


def run_papers_in_workers(settings: GraceSettings, content: bytes, name: str, doc_ids: list[str], options: dict, *,
                          workers: int, progress: Callable[[int], None]) -> list[PaperRun]:
    """:func:`~grace_core.evaluation.expansion.run_paper` for each of ``doc_ids`` on ``workers``
    processes (one torch thread each); ``progress(1)`` as each paper finishes."""
    one_thread = settings.model_copy(update={"torch_threads": 1})
    runs: dict[str, PaperRun] = {}
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start,
                             initargs=(one_thread, content, name)) as pool:
        futures = {pool.submit(_run, doc_id, options): doc_id for doc_id in doc_ids}
        for future in as_completed(futures):
            runs[futures[future]] = future.result()
            progress(1)
    return [runs[doc_id] for doc_id in doc_ids]
