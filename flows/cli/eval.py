"""``grace eval``: measure GRACE on QASPER / QuALITY files (the paper's retrieval QA table)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from flows.cli import app
from flows.settings import build_settings
from grace_core.documents import parse_batch
from grace_core.errors import GraceError
from grace_core.evaluation.qa_harness import (
    DATASETS,
    DatasetMismatch,
    check_dataset,
    evaluate_qa,
)
from grace_core.evaluation.qa_report import write_outputs
from grace_core.models.factory import build_roles

eval_app = typer.Typer(help="Evaluate GRACE on QASPER / QuALITY files.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")


class EvalDataError(GraceError):
    """The evaluation data file cannot be read."""


def read_limited(path: Path, limit: int | None) -> bytes:
    """The file's bytes, cut to its first ``limit`` non-blank lines."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EvalDataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if limit is None:
        return data
    kept, n = [], 0
    for line in data.split(b"\n"):
        if n >= limit:
            break
        kept.append(line)
        n += bool(line.strip())
    return b"\n".join(kept)


@eval_app.command("qa")
def qa(
    dataset: str = typer.Option(..., "--dataset", help="qasper or quality."),
    data: Path = typer.Option(..., "--data", help="JSONL file with the schema of ../shared/data (QASPER or QuALITY lines)."),
    out: Path = typer.Option(..., "--out", help="Output folder: report.md, metrics.json, qa_metrics.png."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N documents."),
    backend: Optional[str] = typer.Option(None, "--backend", help="offline (default) or litellm."),
    top: int = typer.Option(5, "--top", min=1, help="Passages given to the answerer (RAG and GRACE)."),
) -> None:
    """Retrieval QA: Zero-shot + Part, Zero-shot + Full, RAG and GRACE; accuracy, answerability,
    and for QASPER Answer-F1 and Evidence-F1."""
    if dataset not in DATASETS:
        raise DatasetMismatch(f"unknown dataset {dataset!r}; expected one of: {', '.join(DATASETS)}")
    if backend is not None and backend not in ("offline", "litellm"):
        raise EvalDataError(f"unknown backend {backend!r}; expected offline or litellm")
    batch = parse_batch(read_limited(data, limit), str(data))
    check_dataset(batch, dataset)
    settings = build_settings(backend=backend)
    roles = build_roles(settings)
    console = Console(stderr=True)
    start = time.monotonic()
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(f"{dataset} questions", total=batch.questions.height)
        result = evaluate_qa(batch, dataset, roles, settings, alpha=settings.alpha, k=top,
                             context_passages=settings.context_passages, progress=lambda n: bar.advance(task, n))
    seconds = time.monotonic() - start
    write_outputs(result.metrics, out, data=str(data), backend=settings.backend, seconds=seconds)
    console = Console()
    console.print(f"{dataset}: {result.metrics['n_questions']} questions in {seconds:.1f} s → {out}")
    for c in result.metrics["conditions"]:
        extra = "" if c["answer_f1"] is None else f"  Answer-F1 {c['answer_f1']:.3f}  Evidence-F1 {c['evidence_f1']:.3f}"
        console.print(f"  {c['name']:<18} accuracy {c['accuracy']:.3f}  answerability {c['answerability']:.3f}{extra}")
