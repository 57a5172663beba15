"""The figures of the lake report (``grace report``), computed from the rows of the lake's views
and tables; rendering them (plots, HTML) is the flows' business.

Each function takes the rows as the catalog gives them and returns a small table:

- :func:`precision_by_round`: per round, the share of decided deferrals that reviewers
  confirmed, with its 95% Wilson interval (:func:`grace_core.intervals.wilson_interval`), and
  the same share cumulated over the rounds so far;
- :func:`frontier_by_document`: each document's claims per status at its latest scoring,
  most Boundary claims first (the knowledge frontier, DESIGN §7);
- :func:`reviewer_totals`: each reviewer's verdicts over all rounds;
- :func:`costs_by_round`: model calls, tokens and dollars per round and role (``llm_calls``);
- :func:`review_budget_by_round`: per round, the review budget, what the dispatch spent of it and
  what the rule blocked, the reviewers' seconds and the Boundary claims their verdicts resolved
  (the budget curve of a real lake);
- :func:`waiting_claims`: the Boundary claims not decided for good, highest priority first,
  with the reviewers they are waiting on;

and how they are said to a person: :func:`column_label` (a column's header in words) and
:data:`METRICS_LEGEND` (what PCR, KF, yield and cascade mean), shared by the report page and
the round's Prefect artifacts.
"""

from __future__ import annotations

import polars as pl

from grace_core.intervals import wilson_interval
from grace_core.status import BOUNDARY, STATUSES

COLUMN_LABELS = {
    "doc_id": "document", "claim_id": "claim", "n_grounded": "Grounded", "n_boundary": "Boundary", "n_refuted": "Refuted",
    "pcr": "PCR", "kf": "KF", "yield_decided": "yield of decided", "n_questions_rechecked": "questions rechecked",
    "n_questions_answered": "questions answered", "share": "share confirmed", "cum_share": "share confirmed (cumulative)",
    "n_decided": "decided", "cum_decided": "decided (cumulative)", "cum_confirmed": "confirmed (cumulative)",
    "n_confirmed": "confirmed", "mean_seconds": "mean seconds", "reliability_overlap": "votes it rests on",
    "cost_usd": "cost ($)", "n_verdicts": "verdicts", "fleiss_kappa": "Fleiss' kappa",
    "refuted_false": "really false", "cum_refuted_false": "really false (cumulative)",
    "spent": "budget spent", "blocked_by_cost": "blocked by cost", "over_budget": "over budget", "n_resolved": "resolved",
    "expert_seconds": "review seconds", "seconds_per_resolved": "seconds per resolved", "kf_change": "KF change",
}
"""Readable table headers for the lake's column names (the name itself is the header's tooltip)."""


def column_label(name: str) -> str:
    """A column's header: :data:`COLUMN_LABELS`, else the name without ``n_``, ``cum_`` said
    as "(cumulative)", underscores as spaces (``n_audited_grounded`` → ``audited grounded``)."""
    if name in COLUMN_LABELS:
        return COLUMN_LABELS[name]
    cumulative = name.startswith("cum_")
    words = name.removeprefix("cum_").removeprefix("n_").replace("_", " ")
    return f"{words} (cumulative)" if cumulative else words


METRICS_LEGEND = ("PCR: share of the claims of sampled responses that are Grounded (prior coverage). KF: Boundary claims per document (the "
                  "knowledge frontier). Yield: share of the round's deferrals that reviewers confirmed; yield of decided: the "
                  "same among those decided (confirm or reject). Cascade: claims per document that turned from Boundary to "
                  "Grounded since the previous round without a confirm of their own.")
"""One line that says what the round metrics mean (DESIGN §7)."""

PRECISION_SCHEMA = {
    "round": pl.Int64, "n_confirmed": pl.Int64, "n_decided": pl.Int64, "share": pl.Float64, "low": pl.Float64, "high": pl.Float64,
    "cum_confirmed": pl.Int64, "cum_decided": pl.Int64, "cum_share": pl.Float64, "cum_low": pl.Float64, "cum_high": pl.Float64,
}


def _interval(successes: int, n: int) -> tuple[float | None, float | None, float | None]:
    bounds = wilson_interval(successes, n)
    return (successes / n, *bounds) if bounds else (None, None, None)


def precision_by_round(metrics: pl.DataFrame) -> pl.DataFrame:
    """``round_metrics`` rows (``round, n_confirmed, n_rejected``) → per round ``n_confirmed,
    n_decided`` (confirmed + rejected), ``share`` = confirmed / decided with its 95% Wilson
    interval ``low, high``, and the ``cum_*`` counterparts over the rounds up to it. Rounds
    where nothing was decided have null shares. Abstentions and pending votes are left out."""
    rows, cum_c, cum_n = [], 0, 0
    for r in metrics.sort("round").iter_rows(named=True):
        c, n = int(r["n_confirmed"] or 0), int(r["n_confirmed"] or 0) + int(r["n_rejected"] or 0)
        cum_c, cum_n = cum_c + c, cum_n + n
        share, low, high = _interval(c, n)
        cum_share, cum_low, cum_high = _interval(cum_c, cum_n)
        rows.append({"round": r["round"], "n_confirmed": c, "n_decided": n, "share": share, "low": low, "high": high,
                     "cum_confirmed": cum_c, "cum_decided": cum_n, "cum_share": cum_share, "cum_low": cum_low, "cum_high": cum_high})
    return pl.DataFrame(rows, schema=PRECISION_SCHEMA)


def frontier_by_document(status: pl.DataFrame) -> pl.DataFrame:
    """``claim_status`` rows (``doc_id, status``) → ``doc_id, grounded, boundary, refuted``
    (claims per status), most Boundary claims first, ties by document id."""
    counts = status.group_by("doc_id").agg(*[(pl.col("status") == s).sum().cast(pl.Int64).alias(s) for s in STATUSES])
    return counts.select("doc_id", *STATUSES).sort([BOUNDARY, "doc_id"], descending=[True, False])


def reviewer_totals(stats: pl.DataFrame) -> pl.DataFrame:
    """``reviewer_stats`` rows → per reviewer ``rounds, n_verdicts, n_confirm, n_reject,
    n_abstain`` summed over rounds, ``mean_seconds`` weighted by verdicts (null when none was
    timed, e.g. the verifier), and the reviewer's latest Dawid–Skene ``reliability`` with the
    ``reliability_overlap`` votes it rests on (the same on every row of the reviewer); by reviewer."""
    if stats.height == 0:
        return pl.DataFrame(schema={"reviewer": pl.Utf8, "rounds": pl.Int64, "n_verdicts": pl.Int64, "n_confirm": pl.Int64,
                                    "n_reject": pl.Int64, "n_abstain": pl.Int64, "mean_seconds": pl.Float64,
                                    "reliability": pl.Float64, "reliability_overlap": pl.Int64})
    return stats.group_by("reviewer").agg(
        rounds=pl.col("round").n_unique().cast(pl.Int64),
        n_verdicts=pl.col("n_verdicts").sum().cast(pl.Int64),
        n_confirm=pl.col("n_confirm").sum().cast(pl.Int64),
        n_reject=pl.col("n_reject").sum().cast(pl.Int64),
        n_abstain=pl.col("n_abstain").sum().cast(pl.Int64),
        _timed=pl.col("n_verdicts").filter(pl.col("mean_seconds").is_not_null()).sum(),
        _seconds=(pl.col("mean_seconds") * pl.col("n_verdicts")).sum(),
        reliability=pl.col("reliability").cast(pl.Float64).first(),
        reliability_overlap=pl.col("reliability_overlap").cast(pl.Int64).first(),
    ).with_columns(
        mean_seconds=pl.when(pl.col("_timed") > 0).then(pl.col("_seconds") / pl.col("_timed")),
    ).drop("_timed", "_seconds").select(
        "reviewer", "rounds", "n_verdicts", "n_confirm", "n_reject", "n_abstain", "mean_seconds", "reliability", "reliability_overlap",
    ).sort("reviewer")


def costs_by_round(calls: pl.DataFrame) -> pl.DataFrame:
    """``llm_calls`` rows (``round, role, outcome, prompt_tokens, completion_tokens,
    cost_usd``) → per round and role ``calls, failed`` (outcome other than ok), ``tokens``
    (prompt + completion) and ``cost_usd``; by round, then role."""
    return (
        calls.group_by("round", "role").agg(
            calls=pl.len().cast(pl.Int64),
            failed=(pl.col("outcome") != "ok").sum().cast(pl.Int64),
            tokens=(pl.col("prompt_tokens").fill_null(0) + pl.col("completion_tokens").fill_null(0)).sum().cast(pl.Int64),
            cost_usd=pl.col("cost_usd").fill_null(0.0).sum(),
        ).sort("round", "role")
    )


REVIEW_BUDGET_SCHEMA = {
    "round": pl.Int64, "budget": pl.Float64, "spent": pl.Float64, "candidates": pl.Int64, "n_deferred": pl.Int64,
    "blocked_by_cost": pl.Int64, "over_budget": pl.Int64, "expert_seconds": pl.Float64, "n_resolved": pl.Int64,
    "seconds_per_resolved": pl.Float64, "kf_change": pl.Float64,
}


def review_budget_by_round(metrics: pl.DataFrame, costs: pl.DataFrame, dispatch: pl.DataFrame) -> pl.DataFrame:
    """What each round's review budget bought (DESIGN §4, §7), by round:

    - ``budget, spent, candidates, n_deferred, blocked_by_cost, over_budget``: the round's
      dispatch (``dispatch``: ``round`` and the :class:`~grace_core.selection.CostReport`
      fields its ``rounds`` row recorded; null for a round dispatched before they were recorded):
      the cost units it could spend and spent, the Boundary candidates, those deferred, those the
      rule (1 − σ)·Pri > Cost blocked and those that met it but did not fit;
    - ``expert_seconds``: the reviewers' recorded seconds on the round's deferrals (``round_costs``);
    - ``n_resolved``: the round's deferrals decided confirm or reject (``round_metrics``);
      ``seconds_per_resolved`` = expert_seconds / n_resolved (null when none was resolved);
    - ``kf_change``: KF minus the previous round's (null in the first round).

    ``metrics``: ``round_metrics`` rows (``round, kf, n_confirmed, n_rejected``); ``costs``:
    ``round_costs`` rows (``round, expert_seconds``)."""
    if metrics.height == 0:
        return pl.DataFrame(schema=REVIEW_BUDGET_SCHEMA)
    fields = ("budget", "spent", "candidates", "deferred", "blocked_by_cost", "over_budget")
    spend = dispatch.select("round", *[c for c in fields if c in dispatch.columns]) if dispatch.height else pl.DataFrame(
        schema={"round": pl.Int64})
    rows = (
        metrics.sort("round").select(
            pl.col("round").cast(pl.Int64),
            n_resolved=(pl.col("n_confirmed").fill_null(0) + pl.col("n_rejected").fill_null(0)).cast(pl.Int64),
            kf_change=pl.col("kf").cast(pl.Float64).diff(),
        )
        .join(costs.select(pl.col("round").cast(pl.Int64), pl.col("expert_seconds").cast(pl.Float64)), on="round", how="left")
        .join(spend.with_columns(pl.col("round").cast(pl.Int64)), on="round", how="left")
        .with_columns(seconds_per_resolved=pl.when(pl.col("n_resolved") > 0).then(pl.col("expert_seconds") / pl.col("n_resolved")))
    )
    for name in fields:
        if name not in rows.columns:
            rows = rows.with_columns(pl.lit(None).alias(name))
    return rows.rename({"deferred": "n_deferred"}).select(
        [pl.col(c).cast(t) for c, t in REVIEW_BUDGET_SCHEMA.items()])


def waiting_claims(status: pl.DataFrame, queue: pl.DataFrame, limit: int) -> pl.DataFrame:
    """The ``limit`` Boundary claims of highest priority not decided for good: ``doc_id,
    claim_id, priority, confidence, decision, reviewers`` (comma-separated reviewers the claim
    is waiting on in the ``review_queue``, empty when not deferred).

    ``status``: ``claim_status`` rows; ``queue``: ``doc_id, claim_id, reviewer``."""
    keys = ["doc_id", "claim_id"]
    waiting_on = queue.group_by(keys).agg(reviewers=pl.col("reviewer").unique().sort().str.join(", "))
    return (
        status.filter((pl.col("status") == BOUNDARY) & ~pl.col("decision").fill_null("").is_in(["confirm", "reject"]))
        .sort(["priority", "doc_id", "claim_id"], descending=[True, False, False], nulls_last=True)
        .head(limit)
        .join(waiting_on, on=keys, how="left")
        .select(*keys, "priority", "confidence", "decision", pl.col("reviewers").fill_null(""))
    )
