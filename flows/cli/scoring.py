"""``grace score``: score an edge table with the GRACE core."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

import polars as pl
import typer

from flows.cli import app, lifelong_objects
from flows.settings import GraceSettings, build_settings
from grace_core.edges import validate_edges
from grace_core.errors import InvalidEdgeTable
from grace_core.scoring import load_compiled, score_edges
from storage.table_files import TableFileError, document_chunks, parquet_chunk_writer

ROWS_PER_CHUNK = 1_000_000  # edge rows scored at once (≈1,100 documents of 200 claims): peak memory stays under 1.5 GB


def _load_kernel() -> None:
    with lifelong_objects():
        import pyarrow.parquet  # noqa: F401  (for the writer: storage.table_files.parquet_chunk_writer)

        load_compiled()  # numba and graph-tool: imported here, on the loader thread


def score_file(edges_path: Path, out: Path, settings: GraceSettings, rows_per_chunk: int = ROWS_PER_CHUNK) -> tuple[pl.DataFrame, int]:
    """Read, validate and score one edge-table file chunk by chunk of whole documents, writing
    the scores to ``out`` (all or nothing; the same file as scoring the whole table at once); a
    table with no rows is refused. Returns the number of claims per status (``status, claims``)
    and the number of documents. The compiled kernel loads on a thread meanwhile (numba and
    graph-tool imports, numba's cache) while the first chunk is read and validated."""
    if edges_path.is_dir():
        raise TableFileError(f"{edges_path}: is a folder, not an edge table file")
    counts, n_docs = [], 0
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="grace-kernel") as loader, parquet_chunk_writer(out) as write:
            kernel = loader.submit(_load_kernel)
            for rows, file_rows in document_chunks(edges_path, rows_per_chunk):
                edges = validate_edges(rows, origin=str(edges_path), rows=file_rows)
                if edges.height == 0:
                    raise InvalidEdgeTable(f"{edges_path}: no edges (the table has a header but no rows)")
                kernel.result()
                scores = score_edges(edges, settings)
                write(scores)
                counts.append(scores.group_by("status").agg(claims=pl.len()))
                n_docs += scores["doc_id"].n_unique()  # a document lies in one chunk
    except OSError as exc:
        raise TableFileError(f"{out}: cannot write: {exc.strerror or type(exc).__name__}") from None
    return pl.concat(counts).group_by("status").agg(pl.col("claims").sum()).sort("status"), n_docs


def check_output(out: Path, edges_path: Path) -> None:
    """Refuse an output path that cannot take the scores, before any work is done."""
    if out.is_dir():
        raise TableFileError(f"{out}: is a folder; OUT must be a file path such as scores.parquet")
    folder = next((p for p in out.parents if p.exists()), None)
    if folder is not None and not folder.is_dir():
        raise TableFileError(f"{out}: cannot write: {folder} is a file, not a folder")
    if out.exists() and edges_path.exists() and out.resolve() == edges_path.resolve():
        raise TableFileError(f"{out}: is the input edge table; write the scores to another file")


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
    delta_refute: Optional[float] = typer.Option(None, help="Refute below this share of the document's median closeness (default 0.3)."),
) -> None:
    """Score an edge table: closeness, status, betweenness, novelty, priority and confidence per claim."""
    settings = build_settings(
        w_anchor=w_anchor, w_agree=w_agree, w_neutral=w_neutral, w_contra=w_contra,
        lambda_c=lambda_c, lambda_n=lambda_n, k=k, delta=delta, delta_refute=delta_refute,
    )
    check_output(out, edges)
    counts, n_docs = score_file(edges, out, settings)
    summary = ", ".join(f"{s} {n}" for s, n in counts.iter_rows())
    typer.echo(f"scored {counts['claims'].sum()} claims in {n_docs} documents → {out} ({summary})")
