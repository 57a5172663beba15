"""``grace round``: one expansion round now, exactly as the nightly deployment runs it (the
``expansion_round`` flow, on the configured Prefect API or a temporary server), then the
round's metrics. ``grace ingest batch.jsonl && grace round`` is how a user without a Prefect
server works. Every option and the lake are checked before a server starts; the terminal shows
one line per stage (what it did in this run), the metrics and a line saying what this run built
(:func:`flows.run_logs.terminal_logs`: Prefect's own log lines only with ``--verbose``)."""

from __future__ import annotations

import os
from typing import Optional

import typer
from rich.console import Console

from flows.cli import LAKE_HELP, app
from flows.cli.demo import ROUND_FLOW, VERBOSE_HELP, documents_built, metrics_table, progress, round_line
from flows.settings import build_settings
from grace_core.errors import LakeError, SpendCapReached


@app.command("round")
def round_(
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
    budget: Optional[float] = typer.Option(None, "--budget", min=0, help="Review budget of this round (default: GRACE_BUDGET or 3.0)."),
    round_id: Optional[int] = typer.Option(None, "--round", min=1, help="Round to run (default: the one after the last dispatched round; a round already run may be run again, none may be skipped)."),
    rescore_all: bool = typer.Option(False, "--rescore-all", help="Rescore every document, not only those whose state changed since their last scoring."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help=VERBOSE_HELP),
) -> None:
    """Run one expansion round now — verdicts in, build, settle (decide, promote, cascade),
    score, dispatch — as a Prefect flow run, and print the metrics per round. Only the
    documents whose state changed since their last scoring are settled and rescored (all of
    them with --rescore-all, or when the scoring settings changed). Each stage is one line saying
    what it did in this run; Prefect's own log lines show with --verbose, and in the Prefect UI
    either way."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no telemetry heartbeat from a temporary server
    from flows.expansion import expansion_round, next_round
    from flows.params import RoundParams
    from flows.prefect_server import prefect_api
    from flows.run_logs import terminal_logs
    from grace_core.round import round_to_run
    from storage.lake import Lake

    settings = build_settings(lake=lake, budget=budget)
    target = Lake.open(settings, must_exist=True)
    target.state()  # a lake that lost a table is refused here, in one line, before a server starts
    if target.read("documents", columns=["doc_id"]).height == 0:
        raise LakeError(f"lake {target.uri} has no documents: ingest a batch first (grace ingest BATCH.jsonl)")
    console = Console(width=max(150, Console().width))
    ran = round_to_run(round_id, next_round(settings), target.uri)  # a round that would skip rounds: one line, before a server starts
    params = RoundParams(round_id=round_id, lake=target.uri, budget=budget, rescore_all=rescore_all or None)
    built_before = documents_built(target)[1]
    with terminal_logs(lambda line: console.print(f"  {line}", markup=False, highlight=False), flow=ROUND_FLOW, verbose=verbose), \
            prefect_api() as (api_url, temporary):
        console.print(f"• Prefect: temporary server at {api_url} (stopped when the round ends)" if temporary else f"• Prefect API {api_url}")
        with progress(console, f"round {ran} on {target.uri}…", verbose):
            metrics = expansion_round(params)
    after = Lake.open(settings)  # the lake as the round left it
    if not metrics and settings.spend_cap_usd is not None:  # no document of the lake has claims: nothing to score or show
        spent = after.read("llm_calls", rounds=[ran], columns=["cost_usd"])["cost_usd"].sum() or 0.0
        raise SpendCapReached(f"round {ran}: spend cap ${settings.spend_cap_usd:.4f} reached (${spent:.4f} spent) before any "
                              "document was built; every document is left for the next round (GRACE_SPEND_CAP_USD is per round)")
    if metrics:
        console.print(metrics_table(metrics))
    console.print(f"{round_line(after, settings, ran, built_before)} (lake {target.uri})")
