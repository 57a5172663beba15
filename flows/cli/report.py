"""``grace report``: a self-contained HTML page with PNG plots of a lake (:mod:`flows.lake_report`)."""

from __future__ import annotations

from typing import Optional

import typer

from flows.cli import LAKE_HELP, app
from flows.lake_report import report_files
from flows.runtime import timestamp
from flows.settings import build_settings
from storage.lake import Lake
from storage.report_files import write_report_folder


@app.command("report")
def report(
    out: str = typer.Option(..., "--out", help="Folder to write index.html and the PNG plots to (created if needed)."),
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
    top: int = typer.Option(20, "--top", min=1, help="Boundary claims waiting to list."),
) -> None:
    """Write a report of the lake for people: PCR and KF over rounds, the frontier by document,
    reviewed precision with its 95% Wilson interval, reviewer statistics, model costs and the
    top Boundary claims waiting — index.html (plots embedded) plus the plots as PNG files."""
    settings = build_settings(lake=lake)
    store = Lake.open(settings, must_exist=True)
    written = write_report_folder(out, report_files(store, top=top, generated=timestamp(None)))
    page = next(p for p in written if p.name == "index.html")
    print(f"report of lake {store.uri}: {page} ({len(written) - 1} plots)")
