"""``grace score``: score an edge table with the GRACE core."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import polars as pl
import typer

from flows.cli import app
from flows.settings import GraceSettings, build_settings
from grace_core.edges import validate_edges
from grace_core.scoring import score_edges
from storage.table_files import read_table_file, write_parquet_atomic



def score_file(edges_path: Path, settings: GraceSettings) -> pl.DataFrame:
    """Read, validate and score one edge-table file."""
    edges = validate_edges(read_table_file(edges_path), origin=str(edges_path))
    return score_edges(edges, settings)


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
    scores = score_file(edges, settings)
    write_parquet_atomic(scores, out)
    counts = scores["status"].value_counts().sort("status")
    summary = ", ".join(f"{s} {n}" for s, n in counts.iter_rows())
    typer.echo(f"scored {scores.height} claims in {scores['doc_id'].n_unique()} documents → {out} ({summary})")
