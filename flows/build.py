"""``build_graphs``: sample responses, decompose and judge the documents that have no claim
graph yet, a chunk of documents per task, chunks in parallel."""

from __future__ import annotations

from datetime import datetime

import pyarrow.dataset as ds
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from flows.params import StageParams
from flows.runtime import open_lake, roles_with_cache, stage_row, timestamp
from flows.settings import GraceSettings
from grace_core.build import build_documents
from grace_core.documents import content_id


@task(retries=2, retry_delay_seconds=5, cache_policy=NONE)
def new_documents(settings: GraceSettings) -> list[str]:
    """Ids of ingested documents without claims yet, sorted."""
    lake = open_lake(settings)
    docs = lake.read("documents", columns=["doc_id"])
    built = lake.read("claims", columns=["doc_id"]).unique()
    return sorted(docs.join(built, on="doc_id", how="anti")["doc_id"].to_list())


@task(retries=2, retry_delay_seconds=10, cache_policy=NONE)
def build_chunk(settings: GraceSettings, round_id: int, doc_ids: list[str], now: datetime) -> dict:
    """Build and commit the claim graphs of ``doc_ids`` (one commit: a re-run writes nothing twice)."""
    started = timestamp(None)  # real start of the work, for the rounds table
    lake = open_lake(settings)
    key = f"build/round={round_id}/docs={content_id(*doc_ids)}"
    if lake.is_committed(key):
        return {"documents": len(doc_ids), "claims": 0, "edges": 0, "skipped": True}
    in_docs = ds.field("doc_id").isin(doc_ids)
    docs = lake.read("documents", columns=["doc_id", "title"], filter=in_docs)
    passages = lake.read("sources", rounds=[0], columns=["doc_id", "source_id", "source_kind", "ord", "text"], filter=in_docs)
    questions = lake.read("questions", columns=["doc_id", "question_id", "ord", "question"], filter=in_docs).sort("doc_id", "ord")
    roles, cache = roles_with_cache(settings, lake, round_id)
    model = settings.responder_model if settings.backend == "litellm" else "offline"
    result = build_documents(docs, passages, questions, roles, round_id=round_id, context_passages=settings.context_passages, model=model)
    lake.commit(key, {
        "sources": result.responses, "claims": result.claims, "edges": result.edges, "llm_calls": cache.pending(),
        "rounds": stage_row(round_id, "build", started, len(doc_ids)),
    })
    return {"documents": len(doc_ids), "claims": result.claims["claim_id"].n_unique(), "edges": result.edges.height, "skipped": False}


@flow(name="build_graphs", log_prints=True)
def build_graphs(params: StageParams) -> dict:
    """Claims and edges of the round for every document that has none yet."""
    settings = params.settings()
    logger = get_run_logger()
    doc_ids = new_documents(settings)
    n = settings.docs_per_task
    chunks = [doc_ids[i:i + n] for i in range(0, len(doc_ids), n)]
    now = timestamp(params.now)
    futures = [build_chunk.submit(settings, params.round_id, c, now) for c in chunks]
    results = [f.result() for f in futures]
    total = {k: sum(r[k] for r in results) for k in ("documents", "claims", "edges")}
    logger.info("round %d: built %d documents in %d tasks (%d claims, %d edges)", params.round_id, total["documents"], len(chunks), total["claims"], total["edges"])
    return total
