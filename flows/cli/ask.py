"""``grace ask``: answer a question, or one per line of stdin, from the lake's grounded
knowledge, or abstain."""

from __future__ import annotations

import json
import sys
from typing import Optional

import numpy as np
import polars as pl
import typer

from flows.cli import app
from flows.queries import candidate_embeddings, lake_candidates, record_unanswered, store_embeddings
from flows.runtime import timestamp
from flows.settings import GraceSettings, build_settings
from grace_core.ask import AskResult, ask as ask_question
from grace_core.errors import GraceError, LakeError
from grace_core.models.factory import ModelRoles, build_roles, embedder_identity
from grace_core.retrieval import Retrieval
from storage.lake import Lake


class NothingToAsk(GraceError):
    """The lake holds no scored knowledge (for that document)."""


def warn(message: str) -> None:
    """One warning line on stderr: the answers stand, something was not stored."""
    print(f"grace: warning: {message}", file=sys.stderr)


@app.command()
def ask(
    question: str = typer.Argument(..., help="The question, or - to read one question per line from stdin."),
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
    table, unless --no-record: the next round samples responses to it for its document.

    The candidates' embeddings are stored in the lake (table embeddings) the first time they
    are needed, so later questions embed only themselves. With - as the question, each line of
    stdin is a question (blank lines skipped), answered with the models and candidates loaded
    once; each answer is one JSON line on stdout, and the unanswered questions are recorded in
    one commit at the end."""
    settings = build_settings(lake=lake)
    store = Lake.open(settings, must_exist=True)
    candidates = lake_candidates(store, doc)
    if candidates.filter(pl.col("kind") == "prior").height == 0:
        raise NothingToAsk(f"lake {store.uri}: no priors{' for document ' + repr(doc) if doc else ''}; ingest a batch first")
    roles = build_roles(settings)
    vectors, fresh = candidate_embeddings(store, candidates, roles.embedder, embedder_identity(settings), doc)
    try:
        store_embeddings(store, fresh)
    except LakeError as exc:  # a lake this user may read but not write: the next question embeds them again
        warn(f"the candidates' embeddings were not stored: {exc}")
    retrieval = Retrieval.of(settings, top=top)
    if question == "-":
        answer_lines(store, settings, candidates, vectors, roles, retrieval, doc, record=not no_record)
        return
    result = ask_question(question, candidates, roles, k=top, retrieval=retrieval, embeddings=vectors)
    show(result, retrieval)
    if no_record:
        return
    try:
        [recorded] = record_unanswered(store, settings, [(question, result)], doc, timestamp(None))
    except LakeError as exc:  # the answer stands, the question is not kept
        warn(f"the open question was not recorded: {exc}")
        return
    if recorded:
        print(f"Recorded as open question {recorded} (table queries): the next round samples responses to it for its document.")


def show(result: AskResult, retrieval: Retrieval) -> None:
    """The answer, or why it abstained, and the context used, for a person."""
    from rich.console import Console
    from rich.table import Table

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


def answer_record(question: str, result: AskResult, retrieval: Retrieval) -> dict:
    """One question's answer as the JSON object of a batch line: ``question``, ``answer`` (None
    when abstained), ``because`` (the answerer's evidence, when it differs), ``abstained``,
    ``why`` (the one-line reason, when abstained) and ``context`` (``doc_id, passage_id, kind,
    score, cos, cc`` of each passage used, best first)."""
    answer = result.answer
    context = [{"doc_id": r["doc_id"], "passage_id": r["passage_id"], "kind": r["kind"], "score": round(r["score"], 4),
                "cos": round(r["similarity"], 4), "cc": round(r["passage_cc"], 4)} for r in result.context.iter_rows(named=True)]
    return {"question": question, "answer": None if answer.abstained else answer.text,
            "because": answer.evidence if answer.evidence and answer.evidence != answer.text else None,
            "abstained": answer.abstained, "why": result.why_abstained(retrieval) if answer.abstained else None, "context": context}


def answer_lines(store: Lake, settings: GraceSettings, candidates: pl.DataFrame, vectors: np.ndarray, roles: ModelRoles,
                 retrieval: Retrieval, doc: str | None, *, record: bool) -> None:
    """Answer each non-blank line of stdin as a question, one JSON line each
    (:func:`answer_record`) as soon as it is answered; then, when ``record``, record the
    unanswered ones in one commit and say how many on stderr."""
    asked = []
    for line in sys.stdin:
        question = line.strip()
        if not question:
            continue
        result = ask_question(question, candidates, roles, k=retrieval.top, retrieval=retrieval, embeddings=vectors)
        print(json.dumps(answer_record(question, result, retrieval), ensure_ascii=False), flush=True)
        asked.append((question, result))
    if not record or not asked:
        return
    try:
        recorded = [qid for qid in record_unanswered(store, settings, asked, doc, timestamp(None)) if qid]
    except LakeError as exc:
        warn(f"the open questions were not recorded: {exc}")
        return
    if recorded:
        print(f"Recorded {len(set(recorded))} open question(s) (table queries): the next round samples responses to them.", file=sys.stderr)
