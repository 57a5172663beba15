"""Rebuilding the tables a lake derives as its rounds settle, after ``grace migrate``.

A lake written by an earlier GRACE holds the base tables (documents, sources, claims, edges,
scores, deferrals, verdicts, rounds, …) but not the tables later versions store as each round
settles: ``decisions`` (each round's decision per claim with votes), ``review_inputs`` (reach
and prior distance of each round's Boundary claims), ``reviewer_reliability`` and
``scoring_counts``. Every view of the lake's history reads them (``round_metrics``,
``verdict_outcomes``, ``deferral_outcomes``, ``claim_status``, ``reviewer_stats``, the report),
and the next round compares against them: without them a migrated lake shows no metrics, and its
next round decides every old vote again, as new.

:func:`rebuild_derived` replays the settling of each scored round, oldest first, as its scoring
step stored it (:func:`flows.score.score_chunk`), from what the lake kept:

- the documents are those the round scored (its ``scores`` partition);
- their votes and deferrals are read as the round's first scoring commit found them
  (:meth:`storage.lake.Lake.read` with ``before=``: the versions of ``verdicts`` and ``deferrals``
  the commits before it recorded; ``grace migrate`` keeps each commit's time) and decided with
  :func:`grace_core.decisions.decide`: the lake's quorum, and with ``GRACE_WEIGH_BY_RELIABILITY``
  the weights of the reliability estimated from those same votes, as the round's plan did;
- the round's stored scores give its Boundary claims, whose review inputs are measured on the
  round's settled state (:meth:`grace_core.round.Settlement.review_inputs`, reusing the distances
  of earlier rounds that still hold);
- the scoring counts follow from the scores, claims and decisions
  (:func:`flows.score.fill_scoring_counts`).

Commits insert only rows whose keys are not stored, so rows already present are kept, and the
``derived/rebuilt`` commit makes a re-run do nothing. A vote committed while a round's scoring
ran (between its chunks) is counted as if it came before: the commit log orders commits, not
the moments their work read the lake.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from flows.runtime import roles_with_cache
from flows.score import VOTE_READ, chunk_state, fill_scoring_counts, score_chunks, store_reliability, stored_review_inputs
from flows.settings import GraceSettings
from grace_core.decisions import decide
from grace_core.documents import content_id
from grace_core.edges import EDGE_COLUMNS
from grace_core.models.factory import embedder_identity
from grace_core.promotion import promote
from grace_core.reliability import estimate_reliability, vote_weights
from grace_core.round import Settlement
from storage.lake import Lake

REBUILT = "derived/rebuilt"
"""The commit that marks the lake's derived tables as rebuilt (a re-run does nothing)."""


@dataclass
class RebuildReport:
    """What :func:`rebuild_derived` did: the scored rounds replayed and the rows stored per table
    (``done_before``: the lake was rebuilt by an earlier run, nothing was done)."""

    lake: str
    rounds: list[int] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    done_before: bool = False

    def add(self, rows: dict[str, int]) -> None:
        for table, n in rows.items():
            self.rows[table] = self.rows.get(table, 0) + n

    def summary(self) -> str:
        if self.done_before:
            return f"lake {self.lake}: derived tables rebuilt before; nothing to do"
        rows = ", ".join(f"{t} {n}" for t, n in sorted(self.rows.items()) if n) or "none"
        return f"lake {self.lake}: rebuilt the derived tables of {len(self.rounds)} scored round(s); rows stored: {rows}"


def first_scoring(lake: Lake) -> dict[int, str]:
    """Round → key of the round's first commit that stored scores (by commit time)."""
    records = sorted(lake.log.records().values(), key=lambda r: (r.committed_at, r.key))
    out: dict[int, str] = {}
    for r in records:
        if r.round is not None and "scores" in r.tables:
            out.setdefault(r.round, r.key)
    return dict(sorted(out.items()))


def stored_settlement(decisions: pl.DataFrame, scores: pl.DataFrame, state) -> Settlement:
    """The settlement a round's scoring stored: its ``decisions``, the stored ``scores`` and the
    settled ``state`` (its promotion and cascade are stored already, in sources and edges)."""
    nothing = promote(decisions.clear(), state.claim_texts().clear())
    return Settlement(decisions, nothing, pl.DataFrame(schema={c: pl.Utf8 for c in EDGE_COLUMNS}), scores, state)


def rebuild_round(lake: Lake, settings: GraceSettings, round_id: int, anchor: str, report: RebuildReport) -> None:
    """Store round ``round_id``'s decisions, review inputs and reviewer reliability, as its
    scoring step (whose first commit is ``anchor``) would have."""
    votes = lake.read("verdicts", columns=list(VOTE_READ), before=anchor)
    reliability = estimate_reliability(votes)
    weights = vote_weights(reliability) if settings.weigh_by_reliability else None
    doc_ids = lake.read("scores", rounds=[round_id], columns=["doc_id"])["doc_id"].unique().sort().to_list()
    embedder = embedder_identity(settings)
    built: list = []

    def roles():
        if not built:
            built.append(roles_with_cache(settings, lake, round_id)[0])
        return built[0]

    for docs in score_chunks(doc_ids, settings.score_docs_per_task, 1):
        state = chunk_state(lake, docs, round_id, votes_before=anchor)
        decisions = decide(state.votes, settings.quorum, weights, state.deferrals)
        scores = lake.read("scores", rounds=[round_id], columns=["doc_id", "claim_id", "status"], doc_ids=docs)
        settled = stored_settlement(decisions, scores, state)
        at_round = pl.lit(round_id, pl.Int32)
        result = lake.commit(f"derived/round={round_id}/docs={content_id(*docs)}", {
            "decisions": decisions.with_columns(round=at_round),
            "review_inputs": settled.review_inputs(roles, stored_review_inputs(lake, docs, round_id, embedder)).with_columns(round=at_round),
        })
        report.add(dict(result.rows))
    before = lake.read("reviewer_reliability", rounds=[round_id], columns=["reviewer"]).height
    store_reliability(lake, round_id, reliability)
    report.add({"reviewer_reliability": lake.read("reviewer_reliability", rounds=[round_id], columns=["reviewer"]).height - before})


def rebuild_derived(lake: Lake, settings: GraceSettings) -> RebuildReport:
    """Rebuild the derived tables of ``lake`` (see the module docstring); idempotent."""
    report = RebuildReport(lake.uri)
    if lake.is_committed(REBUILT):
        report.done_before = True
        return report
    for round_id, anchor in first_scoring(lake).items():
        rebuild_round(lake, settings, round_id, anchor, report)
        report.rounds.append(round_id)
    before = lake.query("SELECT count(*) AS n FROM scoring_counts")["n"][0]
    fill_scoring_counts(lake, settings.score_docs_per_task)
    report.add({"scoring_counts": int(lake.query("SELECT count(*) AS n FROM scoring_counts")["n"][0] - before)})
    lake.commit(REBUILT, {})
    return report
