"""Model roles of ``grace eval``, with the lake's call cache, and the papers of ``grace eval
expansion --workers N`` on N spawned processes, each with its own roles. Results do not depend
on the number of workers: every sampled choice is seeded per question and context, and the
papers' runs are put back in file order.

Evaluations answer model calls from the lake's ``llm_calls`` table and record theirs into it
(committed as they come back, also when the run fails), so an identical rerun makes no call and
a run that failed midway is finished by a rerun making only the missing calls. A run with
failed or capped model items stores no figures (:func:`refuse_faulty`): the figures under an
eval id are always those of a run whose every model call succeeded."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed

import polars as pl

from flows.settings import GraceSettings
from grace_core.documents import DocumentBatch, content_id, parse_batch
from grace_core.errors import ModelCallsFailed
from grace_core.evaluation.expansion import PaperRun, run_paper
from grace_core.models.factory import ModelRoles, build_roles
from grace_core.models.failures import describe_failures
from storage.lake import Lake
from storage.llm_cache import LakeCallCache

Failure = tuple[str, str, str | None]
"""(role, outcome, redacted error) of a model item that failed or was capped."""


def eval_roles(settings: GraceSettings) -> tuple[ModelRoles, LakeCallCache]:
    """Model roles whose litellm calls are answered from, and recorded into, the ``llm_calls``
    table of the lake that receives the evaluation's figures."""
    cache = LakeCallCache(Lake.open(settings))
    return build_roles(settings, cache), cache


def commit_calls(settings: GraceSettings, rows: pl.DataFrame) -> None:
    """Commit an evaluation's call records (a unit of work named by their keys and times)."""
    if rows.height == 0:
        return
    names = sorted(f"{k}/{a}/{t.isoformat()}" for k, a, t in rows.select("key", "attempt", "created_at").iter_rows())
    Lake.open(settings).commit(f"eval/calls/{content_id(*names)}", {"llm_calls": rows})


def refuse_faulty(command: str, failures: list[Failure]) -> None:
    """Raise :class:`ModelCallsFailed` when some model item of the run failed or was capped:
    its figures would mix answers with missing ones, so none are written or stored."""
    if failures:
        raise ModelCallsFailed(
            f"eval {command}: {describe_failures(failures)}; no figures written or stored "
            "(the calls that succeeded are in the lake's cache: a rerun makes only the missing ones)"
        )


_WORKER: dict[str, GraceSettings | DocumentBatch | ModelRoles | LakeCallCache] = {}
"""The worker process's settings, batch, roles and call cache, set once by :func:`_start`."""


def _start(settings: GraceSettings, content: bytes, name: str) -> None:
    roles, cache = eval_roles(settings)
    roles.start_round(0)  # one spend counter per worker for the whole run
    _WORKER.update(settings=settings, batch=parse_batch(content, name, skip_invalid=True), roles=roles, cache=cache)


def _run(doc_id: str, options: dict) -> tuple[PaperRun, pl.DataFrame, list[Failure]]:
    roles, cache = _WORKER["roles"], _WORKER["cache"]
    before = len(roles.failures())
    try:
        run = run_paper(_WORKER["batch"], doc_id, roles, _WORKER["settings"], **options)
    finally:
        rows = cache.pending()
    return run, rows, roles.failures()[before:]


def run_papers_in_workers(settings: GraceSettings, content: bytes, name: str, doc_ids: list[str], options: dict, *,
                          workers: int, progress: Callable[[int], None]) -> tuple[list[PaperRun], list[Failure]]:
    """:func:`~grace_core.evaluation.expansion.run_paper` for each of ``doc_ids`` on ``workers``
    processes (one torch thread each), committing each paper's call records as it finishes;
    ``progress(1)`` as each paper finishes. Returns the runs and the failed or capped items."""
    one_thread = settings.model_copy(update={"torch_threads": 1})
    runs: dict[str, PaperRun] = {}
    failures: list[Failure] = []
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start,
                             initargs=(one_thread, content, name)) as pool:
        futures = {pool.submit(_run, doc_id, options): doc_id for doc_id in doc_ids}
        for future in as_completed(futures):
            run, rows, failed = future.result()
            commit_calls(settings, rows)
            runs[futures[future]] = run
            failures += failed
            progress(1)
    return [runs[doc_id] for doc_id in doc_ids], failures
