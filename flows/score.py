"""``score_round``: the round of :mod:`grace_core.round` per chunk of documents — decisions from
the votes that arrived, promotion, cascade, then the compiled centralities (one thread per
task; parallelism is across tasks) → scores and statuses — with the round's metrics as Prefect artifacts."""

from __future__ import annotations

import json
from collections import deque
from typing import NamedTuple

import polars as pl
import pyarrow.dataset as ds
from prefect import flow, get_run_logger
from prefect.context import FlowRunContext
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.params import ScoreParams
from flows.runtime import open_lake, roles_with_cache, warm_up
from flows.settings import GraceSettings
from flows.tasks import commit_once, grace_task
from flows.verdicts import latest_decisions
from grace_core.changes import changed_documents, scoring_fingerprint
from grace_core.decisions import decide
from grace_core.documents import content_id
from grace_core.metrics import scoring_counts
from grace_core.models.factory import embedder_identity
from grace_core.edges import EDGE_COLUMNS, SOURCE_KINDS
from grace_core.reliability import estimate_reliability, vote_weights
from grace_core.report_figures import METRICS_LEGEND, column_label
from grace_core.round import RoundState, settle
from storage.lake import Lake

METRIC_COLUMNS = ("round", "n_documents", "n_claims", "n_grounded", "n_boundary", "n_refuted", "pcr", "kf",
                  "n_deferred", "n_confirmed", "n_rejected", "n_abstained", "n_pending", "yield", "cascade")


VOTE_READ = ("doc_id", "claim_id", "reviewer", "verdict", "round", "created_at")
"""The ``verdicts`` columns a round decides and estimates reliability from."""


class ScoringPlan(NamedTuple):
    """What a round's scoring step works on: the documents to settle and score, how many
    documents have claims, the reviewers' estimated reliability (over every vote of the lake),
    the vote weights it implies (None unless ``weigh_by_reliability``) and the scoring
    settings' fingerprint."""

    doc_ids: list[str]
    n_documents: int
    reliability: pl.DataFrame
    weights: dict[str, float] | None
    fingerprint: str


@grace_task()
def plan_scoring(settings: GraceSettings, round_id: int, rescore_all: bool) -> ScoringPlan:
    """The documents round ``round_id`` settles and scores (:func:`grace_core.changes.changed_documents`),
    or every document with claims when ``rescore_all`` or when the scoring settings changed since
    the last scoring (:func:`grace_core.changes.scoring_fingerprint`). Read with DuckDB
    aggregates over the catalog and the (small) vote tables, never whole claim or edge tables."""
    lake = open_lake(settings)
    votes = lake.read("verdicts", columns=list(VOTE_READ))
    # estimated from every vote of the lake: the same weights for every chunk of the round
    reliability = estimate_reliability(votes)
    weights = vote_weights(reliability) if settings.weigh_by_reliability else None
    fingerprint = scoring_fingerprint(settings, quorum=settings.quorum, weigh_by_reliability=settings.weigh_by_reliability)
    rounds = growth(lake, round_id)
    # the settings of the last scoring before this round (a re-run of this round compares with the same)
    scorings = lake.read("rounds", columns=["round", "stage", "finished_at", "detail_json"]).filter(
        (pl.col("stage") == "score") & (pl.col("round") < round_id))
    last = scorings.sort("round", "finished_at").tail(1)["detail_json"].to_list()
    if rescore_all or (last and json.loads(last[0] or "{}").get("scoring") != fingerprint):
        rounds = rounds.with_columns(scored_round=pl.when(pl.col("scored_round") == round_id).then(round_id))
    assigned = lake.read("deferrals", columns=["doc_id", "claim_id", "round", "reviewer"])
    doc_ids = changed_documents(rounds, decide(votes, settings.quorum, weights, assigned), latest_decisions(lake), round_id=round_id)
    return ScoringPlan(doc_ids, rounds.height, reliability, weights, fingerprint)


def growth(lake: Lake, round_id: int) -> pl.DataFrame:
    """``doc_id, grown_round, scored_round`` of every document with claims up to ``round_id``
    (:func:`grace_core.changes.changed_documents`'s ``rounds``), with three DuckDB scans that
    never aggregate the whole claim and edge tables: each document's latest scoring (from
    ``scoring_counts``, stored with every scoring and back-filled by :func:`backfill_scoring_counts`),
    the documents with claims (one column), and the claim and edge rows after the earliest of
    those latest scorings, F, which Parquet statistics let DuckDB find without reading the
    rest. A document with no row after F gets ``grown_round`` F: it grew by F at the latest,
    and no document was last scored before F, so it is due exactly when it was before."""
    scored = lake.query("SELECT doc_id, max(round) AS scored_round FROM scoring_counts GROUP BY doc_id")
    floor = int(scored["scored_round"].min()) if scored.height else -1
    grown = lake.query(f"""
        WITH late AS (
            SELECT doc_id, max(round) AS grown_round
            FROM (SELECT doc_id, round FROM claims WHERE round > {floor} UNION ALL SELECT doc_id, round FROM edges WHERE round > {floor})
            WHERE round <= {int(round_id)} GROUP BY doc_id
        )
        SELECT doc_id, coalesce(l.grown_round, {floor}) AS grown_round
        FROM (SELECT DISTINCT doc_id FROM claims WHERE round <= {int(round_id)}) LEFT JOIN late l USING (doc_id)
    """)
    return grown.join(scored, on="doc_id", how="left")


def score_chunks(doc_ids: list[str], per_task: int, at_once: int) -> list[list[str]]:
    """``doc_ids`` in chunks of at most ``per_task``, and in at least ``at_once`` chunks of
    (nearly) equal size when there are that many documents: an incremental round's few changed
    documents are spread over the tasks that run at once (one core each), not left to one."""
    size = max(1, min(per_task, -(-len(doc_ids) // at_once)))
    return [doc_ids[i:i + size] for i in range(0, len(doc_ids), size)]


def chunk_state(lake: Lake, doc_ids: list[str], round_id: int, *, votes_before: str | None = None) -> RoundState:
    """The state of ``doc_ids`` as of ``round_id`` (:class:`grace_core.round.RoundState`),
    read by key from the lake: their graph sources, claims, edges and every vote on them (the
    votes and deferrals as the commit ``votes_before`` found them, when given: :meth:`Lake.read`)."""
    rounds = range(0, round_id + 1)
    return RoundState(
        sources=lake.read("sources", rounds=rounds, columns=["doc_id", "source_id", "source_kind", "text", "claim_id", "round"],
                          filter=ds.field("source_kind").isin(list(SOURCE_KINDS)), doc_ids=doc_ids),
        claims=lake.read("claims", rounds=rounds, columns=["doc_id", "claim_id", "source_id", "source_kind", "text", "round"], doc_ids=doc_ids),
        edges=lake.read("edges", rounds=rounds, columns=list(EDGE_COLUMNS), doc_ids=doc_ids),
        votes=lake.read("verdicts", columns=list(VOTE_READ), doc_ids=doc_ids, before=votes_before),
        deferrals=lake.read("deferrals", columns=["doc_id", "claim_id", "round", "reviewer"], doc_ids=doc_ids, before=votes_before),
    )


def previous_scores(lake: Lake, doc_ids: list[str], round_id: int) -> pl.DataFrame:
    """``doc_id, claim_id, round, status`` of each of ``doc_ids``' latest scoring before
    ``round_id`` (none for a document never scored). Which round that is comes from
    ``scoring_counts`` (one row per scoring, complete once :func:`backfill_scoring_counts` ran), and
    each document's scores are read from that round's partition alone (:meth:`Lake.read_at`).
    Read from every round, they cost nearly every row group of every incremental round's files
    (a round's changed documents come from all over the key space, so row-group statistics
    skip none): 1.9–2.2 s against 0.65–0.8 s for 500 documents of a 100,000-document lake
    after 56 rounds."""
    scored = lake.read("scoring_counts", rounds=range(0, round_id), columns=["doc_id", "round"], doc_ids=doc_ids)
    return lake.read_at("scores", scored.group_by("doc_id").agg(pl.col("round").max()), columns=["doc_id", "claim_id", "round", "status"])


def stored_review_inputs(lake: Lake, doc_ids: list[str], round_id: int, embedder: str) -> pl.DataFrame:
    """``doc_id, claim_id, round, prior_distance`` of the review inputs stored by each of
    ``doc_ids``' latest scoring before ``round_id`` that has any (read by key), if that round's
    scoring recorded ``embedder`` (:func:`~grace_core.models.factory.embedder_identity`) in
    every one of its stage rows; none of a round that recorded no embedder or another."""
    stages = lake.read("rounds", rounds=range(0, round_id), columns=["round", "stage", "detail_json"]).filter(pl.col("stage") == "score")
    recorded = (pl.col("detail_json").str.json_path_match("$.embedder") == embedder).fill_null(False)
    same = stages.group_by("round").agg(recorded.all().alias("same")).filter("same")["round"]
    if same.is_empty():
        return pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8, "round": pl.Int32, "prior_distance": pl.Float64})
    stored = lake.read("review_inputs", rounds=same.to_list(), columns=["doc_id", "claim_id", "round", "prior_distance"], doc_ids=doc_ids)
    return stored.filter(pl.col("round") == pl.col("round").max().over("doc_id"))


def counts_of(scores: pl.DataFrame, claims: pl.DataFrame, decisions: pl.DataFrame) -> pl.DataFrame:
    """:func:`grace_core.metrics.scoring_counts` of ``scores`` (consecutive scorings of their
    documents) from the documents' ``claims`` and ``decisions`` rows as stored."""
    return scoring_counts(
        scores.select("doc_id", "claim_id", "round", "status"),
        claims.filter(pl.col("source_kind") == "response").select("doc_id", "claim_id", "round"),
        decisions.filter(pl.col("decision") == "confirm").select("doc_id", "claim_id", "round"),
    )


def new_counts(lake: Lake, doc_ids: list[str], round_id: int, scores: pl.DataFrame, claims: pl.DataFrame,
               decisions: pl.DataFrame) -> pl.DataFrame:
    """The ``scoring_counts`` of round ``round_id``'s ``scores`` of ``doc_ids``, against each
    document's previous scoring and the confirm decisions stored before this round's
    ``decisions`` (both read by key)."""
    stored = lake.read("decisions", columns=["doc_id", "claim_id", "round", "decision"], doc_ids=doc_ids)
    before = stored.filter(pl.col("round") < round_id)
    previous = previous_scores(lake, doc_ids, round_id)
    counts = counts_of(pl.concat([previous, scores.select(previous.columns)]), claims, pl.concat([before, decisions.select(before.columns)]))
    return counts.filter(pl.col("round") == round_id)


COUNTS_COMPLETE = "scoring-counts/complete"
"""The commit that marks every scoring of the lake as having its ``scoring_counts``: every
scoring since commits its counts with its scores (:func:`score_chunk`), so none can lack them."""


def fill_scoring_counts(lake: Lake, docs_per_chunk: int) -> int:
    """Write the ``scoring_counts`` of every scoring stored without them (scores written before
    the table existed), ``docs_per_chunk`` documents at a time, read by key; returns the
    documents filled. Idempotent: a chunk is one commit, and a re-run skips what is stored.
    Once nothing is missing, the :data:`COUNTS_COMPLETE` commit records it and later calls
    return 0 at once (the search for missing counts scans every stored score: ~1 s a round at
    100,000 documents)."""
    if lake.is_committed(COUNTS_COMPLETE):
        return 0
    missing = lake.query("""
        SELECT DISTINCT doc_id FROM (SELECT DISTINCT doc_id, round FROM scores)
        ANTI JOIN scoring_counts USING (doc_id, round) ORDER BY doc_id
    """)["doc_id"].to_list()
    for i in range(0, len(missing), docs_per_chunk):
        docs = missing[i:i + docs_per_chunk]
        counts = counts_of(lake.read("scores", columns=["doc_id", "claim_id", "round", "status"], doc_ids=docs),
                           lake.read("claims", columns=["doc_id", "claim_id", "round", "source_kind"], doc_ids=docs),
                           lake.read("decisions", columns=["doc_id", "claim_id", "round", "decision"], doc_ids=docs))
        lake.commit(f"scoring-counts/docs={content_id(*docs)}", {"scoring_counts": counts})
    lake.commit(COUNTS_COMPLETE, {})
    return len(missing)


@grace_task(retries=1)
def backfill_scoring_counts(settings: GraceSettings) -> int:
    """:func:`fill_scoring_counts` over the lake (nothing to do once every scoring has its counts)."""
    return fill_scoring_counts(open_lake(settings), settings.score_docs_per_task)


@grace_task(retries=1)
def score_chunk(settings: GraceSettings, round_id: int, doc_ids: list[str], weights: dict[str, float] | None, fingerprint: str) -> int:
    """Round ``round_id`` of :mod:`grace_core.round` for ``doc_ids``: decide the votes that
    arrived (weighted by ``weights`` when set), promote and cascade, score; commit
    decisions, new sources and edges, scores and the Boundary claims' review inputs (once), the
    stage row recording the scoring settings' fingerprint and the embedder that measured the
    review inputs (a prior distance an earlier scoring measured with it is kept while it holds:
    :func:`stored_review_inputs`, :meth:`grace_core.round.Settlement.review_inputs`)."""
    lake = open_lake(settings)
    caches, built = [], []
    embedder = embedder_identity(settings)

    def roles():
        if not built:
            roles_, cache = roles_with_cache(settings, lake, round_id)
            built.append(roles_)
            caches.append(cache)
        return built[0]

    def work():
        s = settle(chunk_state(lake, doc_ids, round_id), settings, roles, quorum=settings.quorum, round_id=round_id,
                   origin=f"lake {lake.uri} edges", weights=weights)
        if remeasured := s.remeasured():  # embedded while the previous scores and stored distances are read
            roles().embedder.prefetch(remeasured)
        at_round = pl.lit(round_id, pl.Int32)
        scores, decisions = s.scores.with_columns(round=at_round), s.decisions.with_columns(round=at_round)
        tables = {
            "decisions": decisions,
            "sources": s.promotion.sources.with_columns(round=at_round, name=pl.lit("verified claim")),
            "edges": s.new_edges.with_columns(round=at_round),
            "scores": scores,
            "scoring_counts": new_counts(lake, doc_ids, round_id, scores, s.state.claims, decisions),
            "review_inputs": s.review_inputs(roles, stored_review_inputs(lake, doc_ids, round_id, embedder)).with_columns(round=at_round),
            "llm_calls": pl.concat([c.pending() for c in caches]) if caches else pl.DataFrame(),
        }
        return {k: v for k, v in tables.items() if v.width}, len(doc_ids), s.scores.height

    key = f"score/round={round_id}/docs={content_id(*doc_ids)}"
    detail = json.dumps({"scoring": fingerprint, "embedder": embedder})
    return commit_once(lake, key, round_id=round_id, stage="score", work=work, detail=detail) or 0


@grace_task(retries=1)
def record_reliability(settings: GraceSettings, round_id: int, reliability: pl.DataFrame) -> None:
    """Store the round's estimate of each reviewer's reliability (table ``reviewer_reliability``,
    shown by ``reviewer_stats`` and the report); nothing before the first vote. Once per round:
    a re-run keeps the first estimate."""
    store_reliability(open_lake(settings), round_id, reliability)


def store_reliability(lake: Lake, round_id: int, reliability: pl.DataFrame) -> None:
    """Commit round ``round_id``'s ``reviewer_reliability`` rows once (none without a vote)."""
    if reliability.height:
        lake.commit(f"reliability/round={round_id}", {"reviewer_reliability": reliability.with_columns(round=pl.lit(round_id, pl.Int32))})


@grace_task(retries=1)
def record_unchanged(settings: GraceSettings, round_id: int, fingerprint: str) -> None:
    """Record the round's scoring step when no document changed (its ``rounds`` row only), so
    the round has its metrics row: every document keeps its latest scores."""
    lake = open_lake(settings)
    if lake.read("rounds", rounds=[round_id], columns=["stage"]).filter(pl.col("stage") == "score").height:
        return  # the round's scoring step is recorded already (a re-run)
    commit_once(lake, f"score/round={round_id}/unchanged", round_id=round_id, stage="score",
                work=lambda: ({}, 0, None), detail=json.dumps({"scoring": fingerprint}))


@grace_task()
def round_metrics(settings: GraceSettings) -> pl.DataFrame:
    """The lake's ``round_metrics`` view (all rounds)."""
    return open_lake(settings).query("SELECT * FROM round_metrics ORDER BY round")


REPORT_ROWS = ("n_documents", "n_claims", "n_grounded", "n_boundary", "n_refuted", "pcr", "kf", "n_deferred", "n_confirmed",
               "n_rejected", "n_abstained", "n_pending", "yield", "yield_decided", "cascade")
"""The round report's rows, in the order a person reads them: what the lake holds, then its review."""


def metric_value(column: str, value: object) -> str:
    """One metric as a person reads it: percentages for shares, two decimals for per-document
    figures, thousands separated for counts, — for none."""
    if value is None:
        return "—"
    if column in ("pcr", "yield", "yield_decided"):
        return f"{100 * value:.1f}%"
    if column in ("kf", "cascade"):
        return f"{value:,.2f}"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.3f}"


def metrics_markdown(metrics: pl.DataFrame, round_id: int) -> str:
    """The round's metrics as a short markdown report: one line in words, a two-column table (it
    fits the artifact page, which hides a wide table's scroll bar) and the legend of PCR, KF,
    yield and cascade."""
    row = metrics.filter(pl.col("round") == round_id).to_dicts()
    if not row:
        return f"# Round {round_id}\n\nNo document has claims yet."
    m = row[0]

    def count(column: str, noun: str) -> str:
        n = m.get(column) or 0
        return f"{n:,} {noun}{'' if n == 1 else 's'}"

    rows = "\n".join(f"| {column_label(c)} | {metric_value(c, m.get(c))} |" for c in REPORT_ROWS if c in m)
    return (
        f"# Round {round_id}\n\n"
        f"{count('n_documents', 'document')}, {count('n_claims', 'claim')}: {m['n_grounded']:,} Grounded, {m['n_boundary']:,} Boundary, "
        f"{m['n_refuted']:,} Refuted. {count('n_deferred', 'claim')} deferred to review: {m['n_confirmed']:,} confirmed, "
        f"{m['n_rejected']:,} rejected, {m['n_pending']:,} pending.\n\n"
        f"| metric | round {round_id} |\n|---|---|\n{rows}\n\n{METRICS_LEGEND}\n"
    )


def publish_metrics(settings: GraceSettings, round_id: int) -> list[dict]:
    """Publish the lake's metrics per round as the run's table (readable headers, formatted
    figures) and markdown artifacts; returns the rows (:data:`METRIC_COLUMNS`)."""
    metrics = round_metrics(settings)
    table = metrics.select([c for c in METRIC_COLUMNS if c in metrics.columns])
    shown = [{column_label(c): c_value if c == "round" else metric_value(c, c_value) for c, c_value in r.items()}
             for r in table.iter_rows(named=True)]
    create_table_artifact(key="grace-round-metrics", table=shown, description=f"GRACE metrics per round. {METRICS_LEGEND}")
    create_markdown_artifact(key="grace-round-report", markdown=metrics_markdown(metrics, round_id), description=f"Round {round_id}")
    return table.to_dicts()


@flow(name="score_round", log_prints=True)
def score_round(params: ScoreParams) -> list[dict]:
    """The round's settle and scoring step for the documents whose state changed since their
    last scoring (every document with claims with ``rescore_all``, or when the scoring settings
    changed); the others keep their latest scores. Run on its own (its deployment), publish the
    round's metrics as artifacts and return them; run as a sub-flow, return nothing: the parent
    flow publishes them when its round is done."""
    settings = params.settings()
    logger = get_run_logger()
    backfill_scoring_counts(settings)
    plan = plan_scoring(settings, params.round_id, bool(params.rescore_all))
    doc_ids = plan.doc_ids
    if doc_ids:
        warm_up(settings)
    scored, running = 0, deque()
    for chunk in score_chunks(doc_ids, settings.score_docs_per_task, settings.score_tasks_at_once):
        if len(running) == settings.score_tasks_at_once:  # at most score_tasks_at_once chunks in memory at a time
            scored += running.popleft().result()
        # each task gets its own documents, not the plan's list of every changed document (Prefect
        # hashes and records a task's parameters: a 100,000-id list per task cost seconds each)
        running.append(score_chunk.submit(settings, params.round_id, chunk, plan.weights, plan.fingerprint))
    scored += sum(f.result() for f in running)
    if not doc_ids:
        record_unchanged(settings, params.round_id, plan.fingerprint)
    record_reliability(settings, params.round_id, plan.reliability)
    logger.info("round %d: scored %d claims of %d changed documents (%d documents have claims; the others keep their scores)",
                params.round_id, scored, len(doc_ids), plan.n_documents)
    if FlowRunContext.get().flow_run.parent_task_run_id is not None:
        return []  # a sub-flow (of expansion_round, which publishes the metrics after its dispatch, deferrals counted)
    return publish_metrics(settings, params.round_id)
