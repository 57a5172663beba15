"""``grace score``: score an edge table with the GRACE core."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import polars as pl
import typer

from flows.cli import app
from flows.settings import GraceSettings, build_settings
from grace_core.edges import validate_edges
from grace_core.errors import InvalidEdgeTable
from grace_core.scoring import score_edges
from storage.table_files import TableFileError, read_table_file, write_parquet_atomic


def score_file(edges_path: Path, settings: GraceSettings) -> pl.DataFrame:
    """Read, validate and score one edge-table file; a table with no rows is refused."""
    if edges_path.is_dir():
        raise TableFileError(f"{edges_path}: is a folder, not an edge table file")
    edges = validate_edges(read_table_file(edges_path), origin=str(edges_path))
    if edges.height == 0:
        raise InvalidEdgeTable(f"{edges_path}: no edges (the table has a header but no rows)")
    return score_edges(edges, settings)


def check_output(out: Path, edges_path: Path) -> None:
    """Refuse an output path that cannot take the scores, before any work is done."""
    if out.is_dir():
        raise TableFileError(f"{out}: is a folder; OUT must be a file path such as scores.parquet")
    folder = next((p for p in out.parents if p.exists()), None)
    if folder is not None and not folder.is_dir():
        raise TableFileError(f"{out}: cannot write: {folder} is a file, not a folder")
    if out.exists() and edges_path.exists() and out.resolve() == edges_path.resolve():
        raise TableFileError(f"{out}: is the input edge table; write the scores to another file")


def write_scores(scores: pl.DataFrame, out: Path) -> None:
    """Write the scores atomically; a failure leaves no file behind and is one line."""
    try:
        write_parquet_atomic(scores, out)
    except OSError as exc:
        raise TableFileError(f"{out}: cannot write: {exc.strerror or type(exc).__name__}") from None


@app.command()
def score(
    edges: Path = typer.Argument(..., help="Edge table (Parquet, or .csv): doc_id, source_id, source_kind, claim_id, label."),
    out: Path = typer.Argument(..., help="Output Parquet: one row per (doc_id, claim_id) with closeness, status, priority, …"),
    w_anchor: Optional[float] = typer.Option(None, help="Weight of prior → claim edges (default 3.0)."),
    w_agree: Optional[float] = typer.Option(None, help="Weight of response edges to prior-entailed claims (default 2.0)."),
    w_neutral: Optional[float] = typer.Option(None, help="Weight of other response edges (default 1.0)."),
    w_contra: Optional[float] = typer.Option(None, help="Weight of response edges to contradicted claims (default 0.25)."),
    lambda_c: Optional[float] = typer.Option(None, help="Priority weight of betweenness (default 0.5)."),
    lambda_n: Optional[float] = typer.Option(None, help="Priority weight of novelty (default 0.5)."),
    k: Optional[float] = typer.Option(None, help="Confidence sigmoid steepness (default 10)."),
    delta: Optional[float] = typer.Option(None, help="Confidence sigmoid midpoint (default 0.5)."),
    delta_refute: Optional[float] = typer.Option(None, help="Refute below this share of the document's median closeness (default 0.5)."),
) -> None:
    """Score an edge table: closeness, status, betweenness, novelty, priority and confidence per claim."""
    settings = build_settings(
        w_anchor=w_anchor, w_agree=w_agree, w_neutral=w_neutral, w_contra=w_contra,
        lambda_c=lambda_c, lambda_n=lambda_n, k=k, delta=delta, delta_refute=delta_refute,
    )
    check_output(out, edges)
    scores = score_file(edges, settings)
    write_scores(scores, out)
    counts = scores["status"].value_counts().sort("status")
    summary = ", ".join(f"{s} {n}" for s, n in counts.iter_rows())
    typer.echo(f"scored {scores.height} claims in {scores['doc_id'].n_unique()} documents → {out} ({summary})")
