"""``score_round``: graph-tool centralities per document → scores and statuses of the round,
with the round's metrics as Prefect artifacts."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import pyarrow.dataset as ds
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE

from flows.params import StageParams
from flows.runtime import open_lake, stage_row, timestamp
from flows.settings import GraceSettings
from flows.verdicts import decisions_before
from grace_core.documents import content_id
from grace_core.edges import SOURCE_KINDS, validate_edges
from grace_core.scoring import score_edges

METRIC_COLUMNS = ("round", "n_documents", "n_claims", "n_grounded", "n_boundary", "n_refuted", "pcr", "kf",
                  "n_deferred", "n_confirmed", "n_rejected", "yield", "cascade")


@task(retries=2, retry_delay_seconds=5, cache_policy=NONE)
def documents_with_claims(settings: GraceSettings) -> list[str]:
    return sorted(open_lake(settings).read("claims", columns=["doc_id"]).unique()["doc_id"].to_list())


@task(retries=1, retry_delay_seconds=5, cache_policy=NONE)
def score_chunk(settings: GraceSettings, round_id: int, doc_ids: list[str], now: datetime) -> int:
    """Score every claim of ``doc_ids`` as of ``round_id`` and commit the rows (once)."""
    from graph_tool import openmp_set_num_threads

    openmp_set_num_threads(1)  # documents are scored one at a time; parallelism is across tasks
    started = timestamp(None)  # real start of the work, for the rounds table
    lake = open_lake(settings)
    key = f"score/round={round_id}/docs={content_id(*doc_ids)}"
    if lake.is_committed(key):
        return 0
    rounds = range(0, round_id + 1)
    in_docs = ds.field("doc_id").isin(doc_ids)
    edges = lake.read("edges", rounds=rounds, columns=["doc_id", "source_id", "source_kind", "claim_id", "label"], filter=in_docs)
    claims = lake.read("claims", rounds=rounds, columns=["doc_id", "claim_id"], filter=in_docs)
    sources = lake.read("sources", rounds=rounds, columns=["doc_id", "source_id", "source_kind"], filter=in_docs & ds.field("source_kind").isin(list(SOURCE_KINDS)))
    decisions = decisions_before(lake, round_id, settings.quorum)
    rejected = decisions.filter(pl.col("decision") == "reject").select("doc_id", "claim_id")
    scores = score_edges(validate_edges(edges, origin=f"lake {lake.uri} edges"), settings, rejected=rejected, claims=claims, sources=sources)
    lake.commit(key, {
        "scores": scores.with_columns(round=pl.lit(round_id, pl.Int32)),
        "rounds": stage_row(round_id, "score", started, len(doc_ids)),
    })
    return scores.height


@task(retries=2, retry_delay_seconds=5, cache_policy=NONE)
def round_metrics(settings: GraceSettings) -> pl.DataFrame:
    """The lake's ``round_metrics`` view (all rounds)."""
    return open_lake(settings).query("SELECT * FROM round_metrics ORDER BY round")


def metrics_markdown(metrics: pl.DataFrame, round_id: int) -> str:
    """The round's metrics as a short markdown report."""
    row = metrics.filter(pl.col("round") == round_id).to_dicts()
    if not row:
        return f"# Round {round_id}\n\nNo document has claims yet."
    m = row[0]

    def pct(x):
        return "—" if x is None else f"{100 * x:.1f}%"

    return (
        f"# Round {round_id}\n\n"
        f"| documents | claims | grounded | boundary | refuted | PCR | KF | deferred | confirmed | rejected | yield | cascade |\n"
        f"|---|---|---|---|---|---|---|---|---|---|---|---|\n"
        f"| {m['n_documents']} | {m['n_claims']} | {m['n_grounded']} | {m['n_boundary']} | {m['n_refuted']} | {pct(m['pcr'])} | "
        f"{m['kf']:.2f} | {m['n_deferred']} | {m['n_confirmed']} | {m['n_rejected']} | {pct(m['yield'])} | {m['cascade']:.2f} |\n"
    )


@flow(name="score_round", log_prints=True)
def score_round(params: StageParams) -> list[dict]:
    """Score every document with claims; publish the round's metrics as artifacts."""
    settings = params.settings()
    logger = get_run_logger()
    doc_ids = documents_with_claims(settings)
    n = settings.score_docs_per_task
    now = timestamp(params.now)
    futures = [score_chunk.submit(settings, params.round_id, doc_ids[i:i + n], now) for i in range(0, len(doc_ids), n)]
    scored = sum(f.result() for f in futures)
    logger.info("round %d: scored %d claims of %d documents", params.round_id, scored, len(doc_ids))
    metrics = round_metrics(settings)
    table = metrics.select([c for c in METRIC_COLUMNS if c in metrics.columns])
    create_table_artifact(key="grace-round-metrics", table=table.to_dicts(), description="GRACE metrics per round")
    create_markdown_artifact(key="grace-round-report", markdown=metrics_markdown(metrics, params.round_id), description=f"Round {params.round_id}")
    return table.to_dicts()
