"""``grace ask``: answer a question from the lake's grounded knowledge, or abstain."""

from __future__ import annotations

from typing import Optional

import polars as pl
import pyarrow.dataset as ds
import typer
from rich.console import Console
from rich.table import Table

from flows.cli import app
from flows.settings import build_settings
from grace_core.ask import ask as ask_question
from grace_core.ask import candidate_passages
from grace_core.errors import GraceError
from grace_core.models.factory import build_roles
from storage.lake import Lake


class NothingToAsk(GraceError):
    """The lake holds no scored knowledge (for that document)."""


@app.command()
def ask(
    question: str = typer.Argument(..., help="The question."),
    lake: Optional[str] = typer.Option(None, "--lake", help="Lake root (folder or s3://bucket/prefix); GRACE_LAKE when unset."),
    doc: Optional[str] = typer.Option(None, "--doc", help="Only this document's knowledge."),
    top: int = typer.Option(5, min=1, help="Passages given to the answerer."),
) -> None:
    """Answer from the lake's priors and grounded claims (DESIGN §6), or abstain; shows the
    passages used and their scores."""
    settings = build_settings(lake=lake)
    store = Lake.open(settings, must_exist=True)
    where = ds.field("doc_id") == doc if doc else None
    priors = store.read("sources", columns=["doc_id", "source_id", "source_kind", "text"], filter=where).filter(
        pl.col("source_kind").is_in(["prior", "verified"])
    )
    if priors.height == 0:
        raise NothingToAsk(f"lake {store.uri}: no priors{' for document ' + repr(doc) if doc else ''}; ingest a batch first")
    entails = store.read("edges", columns=["doc_id", "source_id", "source_kind", "claim_id", "label"], filter=where).filter(
        (pl.col("label") == "entails") & pl.col("source_kind").is_in(["prior", "verified"])
    ).select("doc_id", "source_id", "claim_id").unique()
    keep = pl.col("doc_id") == doc if doc else pl.lit(True)
    scores = store.query("SELECT doc_id, claim_id, status, closeness_norm FROM claim_status").filter(keep)
    claims = store.query("SELECT doc_id, claim_id, text FROM claim_texts").filter(keep)
    candidates = candidate_passages(priors.drop("source_kind"), entails, scores, claims)
    result = ask_question(question, candidates, build_roles(settings), alpha=settings.alpha, k=top)
    console = Console(width=max(120, Console().width))
    if result.answer.abstained:
        console.print("[bold]Answer:[/bold] unanswerable from the grounded knowledge (abstained)")
    else:
        console.print(f"[bold]Answer:[/bold] {result.answer.text}")
        if result.answer.evidence and result.answer.evidence != result.answer.text:
            console.print(f"[bold]Because:[/bold] {result.answer.evidence}")
    table = Table(title="Context used (best first)")
    for col in ("doc_id", "kind", "score", "cos", "ĈC", "text"):
        table.add_column(col, overflow="fold")
    for r in result.context.iter_rows(named=True):
        table.add_row(r["doc_id"], r["kind"], f"{r['score']:.3f}", f"{r['similarity']:.3f}", f"{r['passage_cc']:.3f}",
                      r["text"][:300] + ("…" if len(r["text"]) > 300 else ""))
    console.print(table)
