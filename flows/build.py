"""``build_graphs``: sample responses, decompose and judge the documents that have no claim
graph yet, a chunk of documents per task, chunks in parallel.

A document whose model items failed or were capped is not committed (nor any partial graph of
it): it stays without claims, so the next build redoes it, the cache answering every call that
succeeded. Failed items end the flow Failed with :class:`~grace_core.errors.ModelCallsFailed`
(after the chunks commit what they built and every call record); capped items are a WARNING
with the amounts and are listed in the flow's result. A document whose own content broke a
stage (:data:`~grace_core.build.UNPROCESSABLE`) is an ERROR line naming it and the error, listed
in the result's ``unprocessable``; it stays unbuilt and the round goes on with the others, so
one document never stops every round of the lake."""

from __future__ import annotations

from datetime import datetime

from prefect import flow, get_run_logger
from prefect.futures import wait

from flows.params import BuildParams
from flows.queries import question_responses
from flows.runtime import open_lake, roles_with_cache, stage_row, timestamp, warm_up
from flows.settings import GraceSettings
from flows.tasks import grace_task
from grace_core.build import UNPROCESSABLE, build_documents
from grace_core.documents import content_id
from grace_core.errors import ModelCallsFailed
from grace_core.models.failures import describe_failures
from storage.lake import Lake


@grace_task(retries=2, retry_delay_seconds=5)
def new_documents(settings: GraceSettings) -> list[str]:
    """Ids of ingested documents without claims yet, sorted, in one DuckDB query that never
    loads the claims' ``doc_id`` column whole. A document with a scoring has claims (scores are
    claim rows), so only the documents never scored are looked for in the claims: none on a
    nightly lake that ingested nothing new, where DuckDB then skips the claims scan (100,000
    documents: 0.45 → 0.14 s)."""
    return open_lake(settings).query(
        "SELECT doc_id FROM (SELECT doc_id FROM documents ANTI JOIN scoring_counts USING (doc_id)) ANTI JOIN claims USING (doc_id) ORDER BY doc_id"
    )["doc_id"].to_list()


def _attempt_key(lake: Lake, round_id: int, doc_ids: list[str]) -> str:
    """The first uncommitted unit-of-work key of building ``doc_ids`` in ``round_id``: a build
    that left all of them unbuilt (failed model calls) does not block the next attempt."""
    base = f"build/round={round_id}/docs={content_id(*doc_ids)}"
    attempt = 0
    while lake.is_committed(f"{base}/attempt={attempt}"):
        attempt += 1
    return f"{base}/attempt={attempt}"


@grace_task(retries=2, retry_delay_seconds=10)
def build_chunk(settings: GraceSettings, round_id: int, doc_ids: list[str], now: datetime) -> dict:
    """Build and commit the claim graphs of those of ``doc_ids`` still without claims (one
    commit: a re-run writes nothing twice). Documents with failed or capped model items are
    left out of the commit and reported in ``failures`` (doc_id, role, outcome, error)."""
    started = timestamp(None)  # real start of the work, for the rounds table
    lake = open_lake(settings)
    built = set(lake.read("claims", columns=["doc_id"], doc_ids=doc_ids)["doc_id"].to_list())
    doc_ids = [d for d in doc_ids if d not in built]
    if not doc_ids:
        return {"documents": 0, "claims": 0, "edges": 0, "skipped": True, "failures": [], "spent_usd": 0.0}
    key = _attempt_key(lake, round_id, doc_ids)
    docs = lake.read("documents", columns=["doc_id", "title"], doc_ids=doc_ids)
    passages = lake.read("sources", rounds=[0], columns=["doc_id", "source_id", "source_kind", "ord", "text"], doc_ids=doc_ids)
    questions = lake.read("questions", columns=["doc_id", "question_id", "ord", "question"], doc_ids=doc_ids).sort("doc_id", "ord")
    roles, cache = roles_with_cache(settings, lake, round_id)
    spent_before = roles.usage().cost_usd
    model = settings.responder_model if settings.backend == "litellm" else "offline"
    result = build_documents(docs, passages, questions, roles, round_id=round_id, context_passages=settings.context_passages, model=model)
    n_built = len(doc_ids) - len(result.incomplete)
    lake.commit(key, {
        "sources": result.responses, "claims": result.claims, "edges": result.edges, "llm_calls": cache.pending(),
        "rounds": stage_row(round_id, "build", started, n_built),
    })
    return {"documents": n_built, "claims": result.claims["claim_id"].n_unique(), "edges": result.edges.height, "skipped": False,
            "failures": result.failures.rows(), "spent_usd": roles.usage().cost_usd - spent_before}


@flow(name="build_graphs", log_prints=True)
def build_graphs(params: BuildParams) -> dict:
    """Claims and edges of the round for every document that has none yet, and for the
    responses to the open user questions (``grace ask`` could not answer them)."""
    settings = params.settings()
    logger = get_run_logger()
    doc_ids = new_documents(settings)
    if doc_ids:
        warm_up(settings, kernels=False)  # the build embeds; it scores nothing
    n = settings.docs_per_task
    chunks = [doc_ids[i:i + n] for i in range(0, len(doc_ids), n)]
    now = timestamp(params.now)
    futures = [build_chunk.submit(settings, params.round_id, c, now) for c in chunks]
    wait(futures)  # every chunk commits what it built before any failure ends the flow
    results = [f.result() for f in futures]
    total = {k: sum(r[k] for r in results) for k in ("documents", "claims", "edges")}
    total["questions"] = question_responses(settings, params.round_id, now)  # open user questions (flows/queries.py)
    logger.info("round %d: built %d documents in %d tasks (%d claims, %d edges)", params.round_id, total["documents"], len(chunks), total["claims"], total["edges"])
    failures = [f for r in results for f in r["failures"]]  # (doc_id, role, outcome, error)
    unbuilt = sorted({f[0] for f in failures})
    unprocessable = [f for f in failures if f[2] == UNPROCESSABLE]
    failures = [f for f in failures if f[2] != UNPROCESSABLE]
    capped = [f for f in failures if f[2] == "capped"]
    total.update(unbuilt=len(unbuilt), failed_items=len(failures) - len(capped), capped_items=len(capped),
                 unprocessable=[f[0] for f in unprocessable], spent_usd=sum(r["spent_usd"] for r in results))
    for doc_id, _, _, error in unprocessable:  # visible, and the round goes on with the other documents
        logger.error("round %d: document %s could not be built and is left out of this round (tried again next round): %s",
                     params.round_id, doc_id, error)
    if capped:
        logger.warning(
            "round %d: spend cap reached: $%.6f spent by the build against a cap of $%.6f per round; %d model items skipped "
            "(%s); %d documents left for the next round", params.round_id, total["spent_usd"], settings.spend_cap_usd or 0.0,
            len(capped), describe_failures((f[1], f[2], f[3]) for f in capped), len(unbuilt),
        )
    if len(failures) > len(capped):
        raise ModelCallsFailed(
            f"round {params.round_id}: build: {describe_failures((f[1], f[2], f[3]) for f in failures)}; "
            f"{len(unbuilt)} of {len(doc_ids)} documents left unbuilt (built whole by a later run, failed calls retried)"
        )
    return total
