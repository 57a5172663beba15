"""The lake report of ``grace report``: one self-contained HTML page (``index.html``, its plots
embedded as PNG data URIs, so the file alone can be mailed or opened anywhere) plus the same
plots as PNG files beside it.

It shows, from the lake's views and tables: PCR and KF over rounds, the frontier by document,
the audited precision of the Grounded pool and Refuted-false share (``round_metrics``) and the
share of decided deferrals confirmed, each with its 95% Wilson interval, reviewer statistics
(``reviewer_stats``: verdicts, seconds, agreement, Fleiss' kappa), model costs (``llm_calls``)
and the top Boundary claims waiting. The figures are computed in
:mod:`grace_core.report_figures`; this module reads the lake, plots and writes HTML.

Written to be read: tables head their columns in words (the lake's column name is the header's
tooltip) and sit each in a box that scrolls sideways rather than push the page wider; the round
metrics come in two tables (coverage, review) with a line saying what PCR, KF, yield and
cascade mean; count axes tick whole numbers and each point sits on its round's tick; a plot with
nothing to draw is a line saying so ("No model calls recorded"), not an empty panel.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

import polars as pl

from flows.eval_reports import png_bytes, pyplot
from grace_core.report_figures import (
    METRICS_LEGEND, column_label, costs_by_round, frontier_by_document, precision_by_round, review_budget_by_round, reviewer_totals,
    waiting_claims,
)
from grace_core.round import claim_texts
from grace_core.selection import CostReport
from grace_core.status import STATUSES
from storage.lake import Lake

STATUS_COLOURS = {"grounded": "#2e7d32", "boundary": "#f9a825", "refuted": "#c62828"}
VERDICT_COLOURS = {"n_confirm": "#2e7d32", "n_reject": "#c62828", "n_abstain": "#9e9e9e"}
AUDIT_COLUMNS = (
    "round", "n_audited_grounded", "grounded_precision", "grounded_precision_low", "grounded_precision_high", "cum_audited_grounded",
    "cum_grounded_precision", "cum_grounded_precision_low", "cum_grounded_precision_high", "n_audited_refuted", "refuted_false",
    "refuted_false_low", "refuted_false_high", "cum_refuted_false", "cum_refuted_false_low", "cum_refuted_false_high",
)
FRONTIER_DOCS = 25  # documents shown in the frontier plot (most Boundary claims first)


@dataclass(frozen=True)
class ReportData:
    """What the report shows, as computed tables."""

    lake: str
    metrics: pl.DataFrame
    precision: pl.DataFrame
    frontier: pl.DataFrame
    reviewers: pl.DataFrame
    reviewer_rounds: pl.DataFrame
    costs: pl.DataFrame
    waiting: pl.DataFrame
    budget: pl.DataFrame


def read_report_data(lake: Lake, *, top: int) -> ReportData:
    """The report's tables from ``lake`` (``top``: Boundary claims waiting to list)."""
    metrics = lake.query("SELECT * FROM round_metrics ORDER BY round")
    status = lake.query("SELECT doc_id, claim_id, status, priority, confidence, decision FROM claim_status")
    stats = lake.query("SELECT * FROM reviewer_stats ORDER BY round, reviewer")
    queue = lake.query("SELECT doc_id, claim_id, reviewer FROM review_queue")
    waiting = waiting_claims(status, queue, top)
    rows = lake.read("claims", columns=["doc_id", "claim_id", "round", "text"], doc_ids=waiting["doc_id"].unique().to_list())
    waiting = waiting.join(claim_texts(rows), on=["doc_id", "claim_id"], how="left")
    calls = lake.read("llm_calls", columns=["round", "role", "outcome", "prompt_tokens", "completion_tokens", "cost_usd"])
    budget = review_budget_by_round(metrics, lake.query("SELECT round, expert_seconds FROM round_costs"), dispatch_spending(lake))
    return ReportData(
        lake=lake.uri, metrics=metrics, precision=precision_by_round(metrics), frontier=frontier_by_document(status),
        reviewers=reviewer_totals(stats), reviewer_rounds=stats, costs=costs_by_round(calls), waiting=waiting, budget=budget,
    )


def dispatch_spending(lake: Lake) -> pl.DataFrame:
    """``round`` and the cost report (budget, spent, candidates, deferred, blocked_by_cost,
    over_budget) each round's latest dispatch recorded in its ``rounds`` row (``detail_json``
    ``cost``); rounds whose dispatch recorded none are left out."""
    stages = lake.read("rounds", columns=["round", "stage", "finished_at", "detail_json"]).filter(pl.col("stage") == "dispatch")
    rows = []
    for r in stages.sort("round", "finished_at").unique("round", keep="last").iter_rows(named=True):
        cost = CostReport.recorded(r["detail_json"])
        if cost is not None:
            rows.append({"round": r["round"], **{k: v for k, v in cost.as_dict().items() if not k.startswith("shortfall")}})
    return pl.DataFrame(rows, schema={"round": pl.Int64, "budget": pl.Float64, "spent": pl.Float64, "candidates": pl.Int64,
                                      "deferred": pl.Int64, "blocked_by_cost": pl.Int64, "over_budget": pl.Int64})


def _counts(axis: Any) -> None:
    """Ticks of a count axis on whole numbers only (no 0.5 verdicts)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def plot_coverage(metrics: pl.DataFrame) -> bytes | None:
    """PCR (left axis, %) and KF (right axis) per round; None before any round is scored."""
    if metrics.height == 0:
        return None
    fig, ax = pyplot().subplots(figsize=(6.4, 3.6))
    rounds = metrics["round"].to_list()
    ax.plot(rounds, [None if v is None else 100 * v for v in metrics["pcr"].to_list()], marker="o", color="#1565c0", label="PCR")
    ax.set_xlabel("round")
    ax.set_ylabel("PCR (%)", color="#1565c0")
    ax.set_ylim(0, 100)
    ax.set_xticks(rounds)
    kf = ax.twinx()
    kf.plot(rounds, metrics["kf"].to_list(), marker="s", color="#ef6c00", label="KF")
    kf.set_ylabel("KF (Boundary claims per document)", color="#ef6c00")
    kf.set_ylim(bottom=0)
    ax.set_title("Prior coverage (PCR) and knowledge frontier (KF)")
    return png_bytes(fig)


def plot_frontier(frontier: pl.DataFrame) -> bytes | None:
    """Claims per status of the documents with the most Boundary claims (horizontal stacked
    bars); None before any document is scored."""
    shown = frontier.head(FRONTIER_DOCS).reverse()
    if shown.height == 0:
        return None
    fig, ax = pyplot().subplots(figsize=(6.4, max(2.4, 0.3 * shown.height + 1.2)))
    left = [0] * shown.height
    for status in (s for s in ("boundary", "grounded", "refuted") if s in STATUSES):
        values = shown[status].to_list()
        ax.barh(shown["doc_id"].to_list(), values, left=left, color=STATUS_COLOURS[status], label=status)
        left = [a + b for a, b in zip(left, values)]
    ax.set_xlabel("claims")
    _counts(ax.xaxis)
    ax.legend(loc="lower right", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(f"Frontier by document (top {min(FRONTIER_DOCS, frontier.height)} of {frontier.height})")
    return png_bytes(fig)


def _with_interval(ax: Any, rows: pl.DataFrame, share: str, low: str, high: str, *, marker: str, colour: str, label: str) -> None:
    """One series of shares (%) with their intervals, each point on its round's tick."""
    known = rows.filter(pl.col(share).is_not_null())
    if known.height == 0:
        return
    x = known["round"].to_list()
    y = [100 * v for v in known[share].to_list()]
    err = [[a - 100 * v for a, v in zip(y, known[low].to_list())], [100 * v - a for a, v in zip(y, known[high].to_list())]]
    ax.errorbar(x, y, yerr=err, fmt=marker, markersize=7, capsize=5, color=colour, label=label, alpha=0.85)


def plot_precision(precision: pl.DataFrame, metrics: pl.DataFrame) -> bytes | None:
    """Per round, with 95% Wilson intervals: the audited precision of the Grounded pool and the
    share of audited Refuted claims really false (when the lake audits), and the share of
    decided deferrals confirmed; each point on its round's tick (the series differ by marker).
    None before anything is decided."""
    audited = metrics.filter(pl.col("cum_audited_grounded") + pl.col("cum_audited_refuted") > 0) if "cum_audited_grounded" in metrics.columns else metrics.head(0)
    if precision["share"].is_not_null().sum() == 0 and audited.height == 0:
        return None
    fig, ax = pyplot().subplots(figsize=(6.4, 3.8))
    _with_interval(ax, audited, "cum_grounded_precision", "cum_grounded_precision_low", "cum_grounded_precision_high",
                   marker="s", colour="#2e7d32", label="Grounded precision (audited, cumulative)")
    _with_interval(ax, audited, "cum_refuted_false", "cum_refuted_false_low", "cum_refuted_false_high",
                   marker="^", colour="#c62828", label="Refuted really false (audited, cumulative)")
    _with_interval(ax, precision, "share", "low", "high", marker="o", colour="#1565c0", label="deferrals confirmed (this round)")
    ax.set_xticks(precision["round"].to_list())
    ax.set_ylim(0, 105)
    ax.set_xlabel("round")
    ax.set_ylabel("share (%)")
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title("Precision with 95% Wilson intervals")
    return png_bytes(fig)


def plot_reviewers(reviewers: pl.DataFrame) -> bytes | None:
    """Verdicts per reviewer over all rounds (stacked bars); None before any verdict."""
    if reviewers.height == 0:
        return None
    fig, ax = pyplot().subplots(figsize=(6.4, 3.2))
    names = reviewers["reviewer"].to_list()
    bottom = [0] * len(names)
    for col, colour in VERDICT_COLOURS.items():
        values = reviewers[col].to_list()
        ax.bar(names, values, bottom=bottom, color=colour, label=col.removeprefix("n_"))
        bottom = [a + b for a, b in zip(bottom, values)]
    ax.set_ylabel("verdicts")
    _counts(ax.yaxis)
    ax.legend(fontsize=8)
    ax.set_title("Verdicts per reviewer")
    return png_bytes(fig)


def plot_reliability(reviewers: pl.DataFrame) -> bytes | None:
    """Each reviewer's estimated reliability (Dawid–Skene accuracy, ``reviewer_stats``), with
    the confirm/reject votes on shared claims it rests on above each bar; 0.5 is chance. None
    while no reviewers share claims."""
    rated = reviewers.filter(pl.col("reliability").is_not_null()) if reviewers.height else reviewers
    if rated.height == 0:
        return None
    fig, ax = pyplot().subplots(figsize=(6.4, 3.2))
    names, values = rated["reviewer"].to_list(), rated["reliability"].to_list()
    bars = ax.bar(names, values, color=["#c62828" if v < 0.5 else "#2e7d32" for v in values])
    for bar, n in zip(bars, rated["reliability_overlap"].to_list()):
        ax.annotate(f"{n} votes", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=7)
    ax.axhline(0.5, color="#666", linestyle="--", linewidth=1, label="chance")
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("estimated accuracy")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Reviewer reliability (Dawid–Skene)")
    return png_bytes(fig)


def plot_costs(costs: pl.DataFrame) -> bytes | None:
    """Tokens per round by role (stacked bars); None when no model call was recorded."""
    if costs.height == 0:
        return None
    fig, ax = pyplot().subplots(figsize=(6.4, 3.2))
    rounds = sorted(costs["round"].unique().to_list())
    bottom = [0] * len(rounds)
    for role in sorted(costs["role"].unique().to_list()):
        by_round = dict(costs.filter(pl.col("role") == role).select("round", "tokens").iter_rows())
        values = [by_round.get(r, 0) for r in rounds]
        ax.bar([str(r) for r in rounds], values, bottom=bottom, label=role)
        bottom = [a + b for a, b in zip(bottom, values)]
    ax.set_xlabel("round")
    ax.set_ylabel("tokens")
    _counts(ax.yaxis)
    ax.legend(fontsize=8)
    ax.set_title("Model tokens per round and role")
    return png_bytes(fig)


def plot_budget(budget: pl.DataFrame) -> bytes | None:
    """Per round, the review budget and what the dispatch spent of it (cost units, left), and
    the reviewers' seconds against the Boundary claims their verdicts resolved (right); None
    before any round deferred a claim or recorded its budget."""
    if budget.height == 0 or (budget["n_resolved"].sum() == 0 and budget["spent"].drop_nulls().is_empty()):
        return None
    fig, (spend, bought) = pyplot().subplots(1, 2, figsize=(10, 3.6))
    rounds = [str(r) for r in budget["round"].to_list()]
    spend.bar(rounds, budget["budget"].fill_null(0).to_list(), color="#cfd8dc", label="budget")
    spend.bar(rounds, budget["spent"].fill_null(0).to_list(), width=0.5, color="#1565c0", label="spent")
    spend.set_xlabel("round")
    spend.set_ylabel("cost units")
    spend.legend(fontsize=8)
    spend.set_title("Review budget per round")
    seconds = budget["expert_seconds"].fill_null(0).to_list()
    resolved = budget["n_resolved"].to_list()
    bought.plot(seconds, resolved, marker="o", linestyle="none", color="#2e7d32")
    for r, x, y in zip(rounds, seconds, resolved, strict=True):
        bought.annotate(f"round {r}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    bought.set_xlabel("review seconds spent")
    bought.set_ylabel("Boundary claims resolved")
    _counts(bought.yaxis)
    bought.set_title("What the reviewers' time resolved")
    return png_bytes(fig)


PLOTS: dict[str, tuple[str, Callable[[ReportData], bytes | None], str]] = {
    "coverage.png": ("PCR and KF over rounds", lambda d: plot_coverage(d.metrics), "No scored rounds yet."),
    "frontier.png": ("Frontier by document", lambda d: plot_frontier(d.frontier), "No scored documents yet."),
    "precision.png": ("Precision with intervals", lambda d: plot_precision(d.precision, d.metrics), "No decided verdicts yet."),
    "reviewers.png": ("Verdicts per reviewer", lambda d: plot_reviewers(d.reviewers), "No verdicts yet."),
    "reliability.png": ("Reviewer reliability", lambda d: plot_reliability(d.reviewers), "No reviewers sharing claims yet."),
    "costs.png": ("Model tokens", lambda d: plot_costs(d.costs), "No model calls recorded (offline models make none)."),
    "budget.png": ("Review budget and what it resolved", lambda d: plot_budget(d.budget), "No claim deferred yet."),
}
"""Each plot: file name → (alt text, drawing, the line shown instead when there is nothing to draw)."""

def _cell(column: str, value: Any) -> str:
    """One value as shown: — for none, thousands separated, 3 decimals (4 for dollars)."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4f}" if column == "cost_usd" else f"{value:,.3f}"
    return html.escape(str(value))


def html_table(df: pl.DataFrame, *, percent: tuple[str, ...] = (), limit: int | None = None) -> str:
    """``df`` as an HTML table (readable headers, :func:`column_label`, the column's own name as
    tooltip; values escaped; ``percent`` columns shown as percentages), in a box of its own that
    scrolls sideways when the table is wider than the page."""
    rows = df.head(limit) if limit else df
    head = "".join(f'<th title="{html.escape(c)}">{html.escape(column_label(c))}</th>' for c in rows.columns)
    body = []
    for r in rows.iter_rows(named=True):
        cells = [f"{100 * v:.1f}%" if c in percent and v is not None else _cell(c, v) for c, v in r.items()]
        body.append("<tr>" + "".join(f"<td>{v}</td>" for v in cells) + "</tr>")
    if not body:
        body.append(f'<tr><td colspan="{max(1, len(rows.columns))}">none</td></tr>')
    more = f"<p class=note>{df.height - rows.height} more rows not shown.</p>" if rows.height < df.height else ""
    return f"<div class=wide><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>{more}"


def _figure(name: str, png: bytes | None) -> str:
    """Plot ``name`` embedded, or the line saying why there is none (no empty panel)."""
    alt, _, nothing = PLOTS[name]
    if png is None:
        return f'<p class="note none" id="{name.removesuffix(".png")}-none">{html.escape(nothing)}</p>'
    return f'<img id="{name.removesuffix(".png")}" alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.6em}h2{margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0}th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3;font-weight:600;vertical-align:bottom}td:last-child{text-align:left}img{max-width:100%;border:1px solid #eee}
.note{color:#666;font-size:.85em}.wide{overflow-x:auto;max-width:100%}
"""


COVERAGE_COLUMNS = ("round", "n_documents", "n_claims", "n_grounded", "n_boundary", "n_refuted", "pcr", "kf", "cascade",
                    "n_questions_rechecked", "n_questions_answered")
REVIEW_COLUMNS = ("round", "n_deferred", "n_confirmed", "n_rejected", "n_abstained", "n_pending", "yield", "yield_decided")
def _columns(df: pl.DataFrame, columns: tuple[str, ...]) -> pl.DataFrame:
    return df.select([c for c in columns if c in df.columns])


def render_html(data: ReportData, plots: dict[str, bytes | None], *, generated: datetime) -> str:
    """The report page with ``plots`` (file name → PNG, None when there is nothing to draw) embedded."""
    fig = {name: _figure(name, png) for name, png in plots.items()}
    costs_total = data.costs.select(pl.col("calls").sum(), pl.col("tokens").sum(), pl.col("cost_usd").sum()).row(0) if data.costs.height else (0, 0, 0.0)
    last = data.metrics.row(-1, named=True) if data.metrics.height else None
    summary = (
        f"{last['n_documents']:,} documents, {last['n_claims']:,} claims after round {last['round']}: "
        f"{last['n_grounded']:,} Grounded, {last['n_boundary']:,} Boundary, {last['n_refuted']:,} Refuted."
        if last else "Nothing scored yet."
    )
    audit_percent = tuple(c for c in AUDIT_COLUMNS if "precision" in c or "false" in c)
    grounded_audit = tuple(c for c in AUDIT_COLUMNS if c == "round" or "grounded" in c)
    refuted_audit = tuple(c for c in AUDIT_COLUMNS if c == "round" or "refuted" in c)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>GRACE report: {html.escape(data.lake)}</title><style>{_CSS}</style></head>
<body>
<h1>GRACE report</h1>
<p>Lake <code>{html.escape(data.lake)}</code>, generated {generated.strftime('%Y-%m-%d %H:%M UTC')}. {html.escape(summary)}</p>
<h2>PCR and KF over rounds</h2>
{fig['coverage.png']}
{html_table(_columns(data.metrics, COVERAGE_COLUMNS), percent=("pcr",))}
<p class=note>Review of each round's deferrals:</p>
{html_table(_columns(data.metrics, REVIEW_COLUMNS), percent=("yield", "yield_decided"))}
<p class=note>{html.escape(METRICS_LEGEND)}</p>
<h2>Frontier by document</h2>
<p class=note>Claims per status at each document's latest scoring; most Boundary claims first.</p>
{fig['frontier.png']}
{html_table(data.frontier, limit=50)}
<h2>Precision</h2>
<p class=note>Audited precision: of a random sample of Grounded claims (stratified by document) sent to reviewers
each round, the share confirmed; of the audited Refuted claims, the share rejected (really false). Each with its 95%
Wilson score interval, per round of the audit and cumulative; counted once decided (confirm or reject).</p>
{fig['precision.png']}
<p class=note>Audited Grounded claims:</p>
{html_table(_columns(data.metrics, grounded_audit), percent=audit_percent)}
<p class=note>Audited Refuted claims:</p>
{html_table(_columns(data.metrics, refuted_audit), percent=audit_percent)}
<p class=note>Deferrals: the share of the deferred claims decided (confirm or reject) that reviewers confirmed, by round
of deferral, with its 95% Wilson score interval; abstentions and pending votes are left out.</p>
{html_table(data.precision, percent=("share", "low", "high", "cum_share", "cum_low", "cum_high"))}
<h2>Reviewers</h2>
{fig['reviewers.png']}
<p class=note>Reliability: each reviewer's accuracy estimated from the claims they shared with others (Dawid–Skene,
one coin, every vote of the lake; 0.5 is chance, a reviewer who always contradicts the truth is near 0), and the
confirm/reject votes on shared claims it rests on. Agreeing with the majority is not the measure: a reliable reviewer
paired with a careless one is outvoted as often as not.</p>
{fig['reliability.png']}
{html_table(data.reviewers)}
<p class=note>Per round (agreement: share of a reviewer's votes on claims with ≥ 2 votes that equal the decision; Fleiss' kappa of the round).</p>
{html_table(data.reviewer_rounds, percent=("agreement",))}
<h2>Review budget</h2>
<p class=note>What each round's review budget bought, to choose a budget: the cost units the dispatch could spend
(GRACE_BUDGET) and spent, the Boundary candidates, those deferred, those the rule (1 − σ)·Pri &gt; Cost blocked and
those that met it but did not fit in the budget; the reviewers' recorded seconds on the round's deferrals, the
Boundary claims their verdicts resolved (confirmed or rejected), the seconds per resolved claim and how KF moved.
A round where the rule blocks most candidates gains nothing from a larger budget.</p>
{fig['budget.png']}
{html_table(data.budget)}
<h2>Costs</h2>
<p>{costs_total[0]:,} model calls, {costs_total[1]:,} tokens, ${costs_total[2]:.4f}.</p>
{fig['costs.png']}
{html_table(data.costs) if data.costs.height else ""}
<h2>Top Boundary claims waiting</h2>
<p class=note>Boundary claims not decided for good, highest review priority first; <em>reviewers</em> names who has the claim now.</p>
{html_table(data.waiting)}
</body></html>
"""


def report_files(lake: Lake, *, top: int, generated: datetime) -> dict[str, bytes]:
    """The report's files: ``index.html`` and each plot that has something to draw, as PNG."""
    data = read_report_data(lake, top=top)
    plots = {name: draw(data) for name, (_, draw, _) in PLOTS.items()}
    return {"index.html": render_html(data, plots, generated=generated).encode("utf-8"),
            **{name: png for name, png in plots.items() if png is not None}}
