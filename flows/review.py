"""``dispatch_reviews`` (budgeted deferrals assigned to the reviewer pool; the verifier answers
its share at once, human reviewers get packets in the lake's review outbox) and
``ingest_verdicts`` (returned verdict files from the review inbox; the next round's settle step
decides, promotes and cascades them)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta

import polars as pl
import pyarrow.dataset as ds
from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run as current_run

from flows.params import DispatchParams, VerdictParams
from flows.queries import recheck_queries
from flows.reviewers import unregistered
from flows.runtime import open_lake, roles_with_cache, timestamp
from flows.score import backfill_scoring_counts
from flows.settings import GraceSettings
from flows.tasks import commit_once, grace_task
from flows.verdicts import LakeTexts, assignments, document_texts, ingest_verdict_file, latest_decisions, write_packets
from grace_core.adjudication import adjudication_assignments, check_adjudicator, split_claims
from grace_core.audit import audit_claims, interleave
from grace_core.assignment import (
    VERIFIER, assign_reviewers, busy_claims, expected_review_seconds, lapsed_reviewers, mean_review_seconds, overdue_by_rounds,
)
from grace_core.errors import UnprovenReviewer, VerdictFilesRefused
from grace_core.review import verify_claims
from grace_core.round import deferral
from grace_core.selection import CostReport
from grace_core.verdict_files import InvalidVerdictFile
from storage.lake import Lake
from storage.review_files import ReviewArea


def review_pool(lake: Lake, statuses: Sequence[str], *, decided: bool) -> pl.DataFrame:
    """``doc_id, claim_id, status, priority, confidence, reach, prior_distance`` of the claims a
    dispatch may send to review, as ``claim_status`` shows them (each document's latest scores: a
    document the round did not rescore keeps its own): those of ``statuses`` (Boundary, the
    audited ones) and, when ``decided``, every claim with a decision (a split vote goes to the
    adjudicator).

    Each document's latest scoring comes from ``scoring_counts`` (one row per scoring, stored
    with it; :func:`~flows.score.backfill_scoring_counts`, which the score and dispatch flows run
    first, fills a lake scored before that table existed) rather than from grouping every ``scores`` row, so
    DuckDB reads only the rows of ``statuses`` from ``scores``: on 100,000 documents (21M score
    rows, 4M Boundary) about 2.2 s where the ``claim_status`` view took about 3.3 s. With
    ``decided`` the filter cannot be pushed into the scan and every row is read."""
    listed = ", ".join(f"'{s}'" for s in statuses)
    keep = f"c.status IN ({listed})" + (" OR d.decision IS NOT NULL" if decided else "")
    with_decisions = "LEFT JOIN latest_decisions d ON d.doc_id = c.doc_id AND d.claim_id = c.claim_id" if decided else ""
    return lake.query(f"""
        WITH latest AS (SELECT doc_id, max(round) AS round FROM scoring_counts GROUP BY doc_id)
        SELECT c.doc_id, c.claim_id, c.status, c.priority, c.confidence, r.reach, r.prior_distance
        FROM scores c
        JOIN latest l ON l.doc_id = c.doc_id AND l.round = c.round
        {with_decisions}
        LEFT JOIN review_inputs r ON r.doc_id = c.doc_id AND r.claim_id = c.claim_id AND r.round = c.round
        WHERE {keep}
    """)


@grace_task(retry_delay_seconds=10)
def defer_claims(settings: GraceSettings, round_id: int, now: datetime) -> int:
    """The round's deferrals (:func:`grace_core.round.deferral`) and audit claims
    (:func:`grace_core.audit.audit_claims`, recorded in ``audits``, their ranks interleaved with
    the deferrals') assigned to ``overlap`` reviewers of the pool, committed once; returns the
    claims sent to review. What the rule and the budget left out
    (:class:`~grace_core.selection.CostReport`) is recorded as the ``detail_json`` of the
    round's ``dispatch`` row (:func:`dispatch_report` reads it).

    The candidates are every document's latest scores (a document the round did not rescore
    keeps its own). Claims decided for good (each document's latest settle step) and claims with
    an assignment still open before its deadline stay out; an overdue claim (past
    ``deadline_hours`` or, when set, ``deadline_rounds`` rounds: whichever comes first,
    :func:`grace_core.assignment.overdue_by_rounds`) is back in the pool, and goes to reviewers
    who did not let it lapse first (:func:`grace_core.assignment.lapsed_reviewers`).
    With ``adjudicator`` set, a claim whose votes split evenly goes to the adjudicator alone
    (:func:`grace_core.adjudication.split_claims`; outside the budgets, cost 0), last in rank.
    The review cost counts the expected human seconds per claim from the pool's history
    (DESIGN §4; 0 for the verifier)."""
    lake = open_lake(settings)
    check_adjudicator(settings.adjudicator, settings.pool)

    def work():
        scores = review_pool(lake, ("boundary", *settings.audited_statuses), decided=settings.adjudicator is not None)
        decisions = latest_decisions(lake).select("doc_id", "claim_id", "n_confirm", "n_reject", "decision")
        votes = lake.read("verdicts", columns=["doc_id", "claim_id", "round", "reviewer", "seconds_spent"])
        seconds = expected_review_seconds(settings.pool, settings.overlap, mean_review_seconds(votes, settings.reviewers, settings.review_seconds))
        roles, cache = roles_with_cache(settings, lake, round_id)
        busy = busy_claims(overdue_by_rounds(assignments(lake, now), round_id, settings.deadline_rounds))
        texts = LakeTexts(lake)
        splits = split_claims(decisions, votes, busy, settings.adjudicator) if settings.adjudicator else busy.head(0)
        busy = pl.concat([busy, splits])  # a split claim goes to the adjudicator only
        step = deferral(scores, decisions, busy, texts, roles, settings, budget=settings.budget, review_seconds=seconds)
        chosen = step.chosen
        responses = pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8})  # the audits' pool: read only when auditing
        if settings.audited_statuses:
            responses = lake.read("claims", columns=["doc_id", "claim_id"], filter=ds.field("source_kind") == "response")
        audits = audit_claims(scores, decisions, busy, lake.read("audits", columns=["doc_id", "claim_id"]), responses, texts, roles,
                              settings, settings, round_id=round_id, review_seconds=seconds)
        chosen = interleave(chosen, audits, f"audit:{round_id}")  # reviewers cannot tell audits from deferrals
        earlier = lake.read("deferrals", columns=["doc_id", "claim_id", "round", "reviewer"], doc_ids=chosen["doc_id"].unique().to_list())
        lapsed = lapsed_reviewers(earlier.join(chosen.select("doc_id", "claim_id"), on=["doc_id", "claim_id"], how="semi"), votes)
        assigned = assign_reviewers(chosen, settings.pool, settings.overlap, round_id, answered=votes, lapsed=lapsed)
        adjudicate = adjudication_assignments(splits, scores, settings.adjudicator, chosen.height)
        assigned = pl.concat([assigned, adjudicate], how="diagonal_relaxed")
        human_deadline = now + timedelta(hours=settings.deadline_hours)
        deferrals = assigned.select(
            "doc_id", "claim_id", pl.lit(round_id, pl.Int32).alias("round"), "reviewer",
            "priority", "confidence", "cost", "gain", pl.col("rank").cast(pl.Int32),
            # the verifier answers within the dispatch: what it leaves unanswered is back in the pool next round
            pl.when(pl.col("reviewer") == VERIFIER).then(pl.lit(now)).otherwise(pl.lit(human_deadline)).alias("deadline"),
            pl.lit(now).alias("created_at"),
        )
        audited = audits.select("doc_id", "claim_id", pl.lit(round_id, pl.Int32).alias("round"), "status", "cost", pl.lit(now).alias("created_at"))
        tables = {"deferrals": deferrals, "audits": audited, "llm_calls": cache.pending()}
        return tables, deferrals["doc_id"].n_unique(), (chosen.height, step.report)

    done = commit_once(lake, f"dispatch/round={round_id}", round_id=round_id, stage="dispatch", work=work,
                       detail=lambda result: json.dumps({"cost": result[1].as_dict()}))
    return done[0] if done else 0


def dispatch_report(lake: Lake, round_id: int) -> CostReport | None:
    """What the rule and the budget left out at the dispatch of ``round_id`` (recorded by
    :func:`defer_claims`); None before that dispatch, or for a dispatch recorded before GRACE
    kept it."""
    rows = lake.read("rounds", rounds=[round_id], columns=["stage", "finished_at", "detail_json"]).filter(pl.col("stage") == "dispatch")
    if rows.height == 0:
        return None
    return CostReport.recorded(rows.sort("finished_at")["detail_json"][-1])


def cost_line(report: CostReport | None) -> str:
    """The dispatch's selection in words: what was deferred within the budget, how many
    candidates the rule (1 − σ)·Pri > Cost blocked and by how much (the shortfall
    Cost − (1 − σ)·Pri), how many met it but did not fit the budget left."""
    if report is None:
        return "no selection recorded"
    if report.candidates == 0:
        return f"no candidates (every Boundary claim is decided or waiting on a reviewer); budget {report.budget:.2f} unspent"
    parts = [f"{report.candidates} candidate{'s' if report.candidates != 1 else ''}",
             f"{report.deferred} deferred at cost {report.spent:.2f} of budget {report.budget:.2f}"]
    if report.blocked_by_cost:
        everyone = "all " if report.all_blocked else ""
        parts.append(f"{everyone}{report.blocked_by_cost} blocked by cost ((1 − σ)·Pri ≤ Cost), shortfall Cost − (1 − σ)·Pri "
                     f"{report.shortfall_min:.3f} to {report.shortfall_max:.3f}")
    if report.over_budget:
        parts.append(f"{report.over_budget} met the rule but did not fit the budget left")
    return "; ".join(parts)


@grace_task(retry_delay_seconds=10)
def verify_deferred(settings: GraceSettings, round_id: int, now: datetime) -> dict:
    """The verifier answers the round's deferrals assigned to it; commit its verdicts (once).
    They are decided in the next round's settle step, like any other vote."""
    lake = open_lake(settings)

    def work():
        deferred = lake.read("deferrals", rounds=[round_id], columns=["doc_id", "claim_id", "reviewer"]).filter(pl.col("reviewer") == VERIFIER)
        roles, cache = roles_with_cache(settings, lake, round_id)
        docs = deferred["doc_id"].unique().sort().to_list()
        verdicts = verify_claims(deferred.join(LakeTexts(lake).claim_texts(docs), on=["doc_id", "claim_id"]), document_texts(lake, docs), roles)
        rows = verdicts.select(
            "doc_id", "claim_id", pl.lit(round_id, pl.Int32).alias("round"), pl.lit(VERIFIER).alias("reviewer"), "verdict",
            "note", pl.lit(VERIFIER).alias("channel"), pl.lit(now).alias("created_at"),
        )
        if rows.height < deferred.height:  # failed or capped calls: those claims return to the pool next round
            get_run_logger().warning("round %d: the verifier left %d of %d deferred claims unanswered (failed or capped model calls); "
                                     "they return to the pool next round", round_id, deferred.height - rows.height, deferred.height)
        return {"verdicts": rows, "llm_calls": cache.pending()}, rows["doc_id"].n_unique(), dict(rows.group_by("verdict").len().iter_rows())

    return commit_once(lake, f"verify/round={round_id}", round_id=round_id, stage="verify", work=work) or {}


@grace_task(retry_delay_seconds=10)
def send_packets(settings: GraceSettings, round_id: int, now: datetime) -> dict[str, int]:
    """Rewrite the outbox packets (CSV and JSONL) of the human reviewers: the claims each still
    has to answer, with their context. Returns claims per reviewer."""
    lake = open_lake(settings)
    roles, _ = roles_with_cache(settings, lake, round_id)
    return {name: out["claims"] for name, out in write_packets(lake, roles, now, list(settings.reviewers)).items()}


@flow(name="dispatch_reviews", log_prints=True)
def dispatch_reviews(params: DispatchParams) -> dict:
    """Budgeted selection of boundary claims → deferrals assigned to the reviewer pool; the
    verifier answers its share, human reviewers get packets in the review outbox; the open user
    questions are asked again against the round's knowledge."""
    settings = params.settings()
    now = timestamp(params.now)
    if missing := unregistered(open_lake(settings), settings.reviewers):
        get_run_logger().warning("%s in GRACE_REVIEWERS but not registered: their claims cannot be answered until `grace reviewer add "
                                 "NAME` (or they are removed from GRACE_REVIEWERS)", ", ".join(missing))
    backfill_scoring_counts(settings)  # the pool finds each document's latest scoring there (a lake scored by earlier GRACE)
    n = defer_claims(settings, params.round_id, now)
    report = dispatch_report(open_lake(settings), params.round_id)
    verdicts = verify_deferred(settings, params.round_id, now)
    packets = send_packets(settings, params.round_id, now)
    questions = recheck_queries(settings, params.round_id, now)
    logger = get_run_logger()
    logger.info(
        "round %d: deferred %d claim%s within budget %.2f to %s (overlap %d); verifier: %s; packets: %s", params.round_id, n, "" if n == 1 else "s",
        settings.budget, ", ".join(settings.pool), settings.overlap, counts(verdicts) or "nothing new", counts(packets) or "none",
    )
    (logger.warning if report is not None and report.all_blocked else logger.info)("round %d: selection: %s", params.round_id, cost_line(report))
    if current_run.parent_flow_run_id is None:  # a sub-flow's parent (expansion_round) publishes it on its own run
        publish_deferred(settings, params.round_id)
    return {"deferred": n, "cost": report.as_dict() if report else None, "verdicts": verdicts, "packets": packets, "questions": questions}


CLAIM_CHARS = 300


def deferred_claims(lake: Lake, round_id: int, deadline_rounds: int | None = None) -> list[dict]:
    """The round's deferrals as a person reads them, by rank: the claim's text (cut to
    :data:`CLAIM_CHARS`), its document, the reviewer who has it and by when (with
    ``deadline_rounds``, the hours deadline or the dispatch of round ``round_id +
    deadline_rounds``, whichever comes first). No status or confidence: an audit claim must look
    like any deferral (blind review)."""
    deferred = lake.read("deferrals", rounds=[round_id], columns=["doc_id", "claim_id", "reviewer", "rank", "deadline"])
    if deferred.height == 0:
        return []
    texts = LakeTexts(lake).claim_texts(deferred["doc_id"].unique().sort().to_list()).select("doc_id", "claim_id", "text")
    rows = deferred.join(texts, on=["doc_id", "claim_id"], how="left").sort("rank", "reviewer")
    by_round = "" if deadline_rounds is None else f" or round {round_id + deadline_rounds}, whichever comes first"
    return [{
        "rank": r["rank"], "claim": " ".join((r["text"] or "—").split())[:CLAIM_CHARS], "document": r["doc_id"], "reviewer": r["reviewer"],
        "due": "answered at dispatch" if r["reviewer"] == VERIFIER else (f"{r['deadline']:%Y-%m-%d %H:%M} UTC{by_round}" if r["deadline"] else "—"),
    } for r in rows.iter_rows(named=True)]


def publish_deferred(settings: GraceSettings, round_id: int) -> None:
    """The round's deferred claims (:func:`deferred_claims`) as the run's table artifact
    ``grace-deferred-claims``, its description ending with the selection in words
    (:func:`cost_line`); when the table would be empty, a markdown line saying none were deferred
    and why (e.g. every candidate blocked by cost, and by how much)."""
    lake = open_lake(settings)
    rows, selection = deferred_claims(lake, round_id, settings.deadline_rounds), cost_line(dispatch_report(lake, round_id))
    if rows:
        create_table_artifact(key="grace-deferred-claims", table=rows,
                              description=f"Round {round_id}: {len(rows)} deferred claim-reviewer pair{'s' if len(rows) != 1 else ''}, "
                                          f"who has each and by when. Selection: {selection}.")
    else:
        create_markdown_artifact(key="grace-deferred-claims", markdown=f"Round {round_id}: no claims deferred.\n\nSelection: {selection}.",
                                 description=f"Round {round_id}: deferred claims")


def counts(named: dict) -> str:
    """``{"alice": 2, "bob": 1}`` as ``alice 2, bob 1`` (a log line a person reads)."""
    return ", ".join(f"{k} {v}" for k, v in named.items())


@grace_task()
def ingest_review_inbox(settings: GraceSettings, now: datetime) -> tuple[list[str], list[str], list[str]]:
    """Read every file of the lake's review inbox once: signed verdict files are recorded (bad
    rows quarantined with file, line and reason) and moved to ``review/processed/``; any other
    file (not a verdict file, unsigned, forged, changed after signing, of a revoked key, holding
    another reviewer's rows: :func:`~flows.verdicts.ingest_verdict_file`) is moved to the
    quarantine whole with its reason, and nothing of it is stored. Returns one line per recorded
    file, one line per quarantined file or bad row, and one line per file quarantined whole."""
    lake = open_lake(settings)
    area = ReviewArea(lake.store)
    lines, problems, refused = [], [], []
    for name in area.inbox_names():
        data = None
        try:
            data = area.read_inbox(name, settings)
            report = ingest_verdict_file(lake, name, data, now, settings)
        except (InvalidVerdictFile, UnprovenReviewer) as exc:
            problems.append(f"{name}: quarantined: {str(exc).removeprefix(f'{name}: ')}")
            refused.append(problems[-1])
            area.quarantine_file(name, data, str(exc))
            continue
        area.mark_processed(name, data)
        lines.append(report.summary())
        problems += map(str, report.bad)
    return lines, problems, refused


@flow(name="ingest_verdicts", log_prints=True)
def ingest_verdicts(params: VerdictParams) -> list[str]:
    """The review inbox's verdict files into the lake (bad rows and files quarantined, each a
    WARNING and a line of the ``grace-verdict-problems`` artifact); the round's settle step
    (``score_round``) decides them with every other vote.

    A file refused whole (unsigned, forged, of a revoked key, …) never stops the others. Run on
    its own (the ``ingest-verdicts`` deployment), the run then ends Failed naming the refused
    files, after recording the good ones, so that someone looks; as a sub-flow of the nightly
    round it leaves them as warnings and the round goes on."""
    settings = params.settings()
    now = timestamp(params.now)
    logger = get_run_logger()
    lines, problems, refused = ingest_review_inbox(settings, now)
    for line in lines:
        logger.info(line)
    for line in problems:
        logger.warning(line)
    if problems:
        listed = "\n".join(f"- {line}" for line in problems)
        create_markdown_artifact(key="grace-verdict-problems", description="Verdict files and rows quarantined",
                                 markdown=f"# Quarantined verdicts\n\n{len(problems)} problem(s); fix and drop the file in the inbox again.\n\n{listed}\n")
    if refused and current_run.parent_flow_run_id is None:
        raise VerdictFilesRefused(f"{len(refused)} verdict file(s) refused whole and quarantined (the others were recorded): " + "; ".join(refused))
    return lines + problems
