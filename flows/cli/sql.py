"""``grace sql``: read-only SQL over the lake's catalog, now or as of a round.

It starts fast (a third of a second on the demo lake, benchmarks/bench_ask_cli.py): it imports
no Prefect, polars, Arrow or Delta reader when the lake's own catalog shows the lake as it is
(:func:`storage.sql_access.sql_access`), and the query's bounded child process renders the
result (:mod:`flows.cli.result_text`)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Optional

import typer

from flows.cli import LAKE_HELP, app
from flows.cli.result_text import OutputFormat, result_text
from flows.settings import build_settings
from storage.readonly_sql import run_isolated
from storage.sql_access import sql_access



@app.command("sql")
def sql(
    query: str = typer.Argument(..., help="One SELECT statement over the lake's tables and views."),
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", help="Output format."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the result to this file instead of stdout."),
    as_of_round: Optional[int] = typer.Option(
        None, "--as-of-round", min=0, help="Query the lake as it was when round N's last commit landed (time travel; "
        "reaches back as far as vacuum kept the files)."),
) -> None:
    """Run a read-only SQL query over the lake (tables, claim_status, round_metrics,
    review_queue, reviewer_stats, …). Statements that write, attach or change settings are refused."""
    settings = build_settings(lake=lake)
    access = sql_access(settings, as_of_round=as_of_round)
    text = run_isolated(access.catalog, query, readable=access.readable, filesystem=access.filesystem, config=settings,
                        produce=functools.partial(result_text, fmt=fmt)).decode("utf-8")
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
