"""``grace ask``: answer a question from the lake's grounded knowledge, or abstain."""

from __future__ import annotations

import sys
from typing import Optional

import polars as pl
import typer
from rich.console import Console
from rich.table import Table

from flows.cli import app
from flows.queries import lake_candidates, record_unanswered
from flows.runtime import timestamp
from flows.settings import build_settings
from grace_core.ask import ask as ask_question
from grace_core.errors import GraceError, LakeError
from grace_core.models.factory import build_roles
from grace_core.retrieval import Retrieval
from storage.lake import Lake


class NothingToAsk(GraceError):
    """The lake holds no scored knowledge (for that document)."""


@app.command()
def ask(
    question: str = typer.Argument(..., help="The question."),
    lake: Optional[str] = typer.Option(None, "--lake", help="Lake root (folder or s3://bucket/prefix); GRACE_LAKE when unset."),
    doc: Optional[str] = typer.Option(None, "--doc", help="Only this document's knowledge."),
    top: int = typer.Option(5, min=1, help="Passages given to the answerer."),
    no_record: bool = typer.Option(False, "--no-record", help="Do not record an unanswered question in the queries table."),
) -> None:
    """Answer from the lake's priors and grounded claims (DESIGN §6), or abstain; shows the
    passages used and their scores. The candidates are the GRACE_RETRIEVAL_K passages most
    relevant to the question (cosine at or above GRACE_RELEVANCE_FLOOR), reranked by
    GRACE_ALPHA·cos + (1 − GRACE_ALPHA)·ĈC; it abstains when the best is below
    GRACE_ABSTAIN_BELOW, and says why in one line. A question it cannot answer (abstained, or
    no passage with cosine GRACE_ASK_MIN_SCORE to the question) is recorded in the queries
    table, unless --no-record: the next round samples responses to it for its document."""
    settings = build_settings(lake=lake)
    store = Lake.open(settings, must_exist=True)
    candidates = lake_candidates(store, doc)
    if candidates.filter(pl.col("kind") == "prior").height == 0:
        raise NothingToAsk(f"lake {store.uri}: no priors{' for document ' + repr(doc) if doc else ''}; ingest a batch first")
    retrieval = Retrieval.of(settings, top=top)
    result = ask_question(question, candidates, build_roles(settings), k=top, retrieval=retrieval)
    console = Console(width=max(120, Console().width))
    if result.answer.abstained:
        console.print("[bold]Answer:[/bold] unanswerable from the grounded knowledge (abstained)")
        console.print(result.why_abstained(retrieval), markup=False, highlight=False)
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
    if result.context.height:
        console.print(table)
    if no_record:
        return
    try:
        recorded = record_unanswered(store, settings, question, doc, result, timestamp(None))
    except LakeError as exc:  # a lake this user may read but not write: the answer stands, the question is not kept
        print(f"grace: warning: the open question was not recorded: {exc}", file=sys.stderr)
        return
    if recorded:
        console.print(f"Recorded as open question {recorded} (table queries): the next round samples responses to it for its document.")
