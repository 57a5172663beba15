"""``grace eval``: measure GRACE on QASPER / QuALITY files — the paper's retrieval QA table
(``qa``) and its expansion protocol (``expansion``). Reports go to ``--out``; the same figures
go into the lake's ``evaluations`` table (once per run: the same data and settings are not
written twice). Model calls are answered from and recorded into the same lake's call cache;
a run with failed or capped model items writes and stores no figures
(:mod:`flows.eval_workers`). Lines and documents the evaluation cannot use are left out and
listed (``skipped`` in metrics.json and report.md, one line each on stderr); a file with
nothing usable is refused."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import polars as pl

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from flows.cli import LAKE_HELP, app
from flows.settings import GraceSettings, build_settings
from grace_core.documents import DocumentBatch, content_id, parse_batch
from grace_core.errors import GraceError
from grace_core.models.factory import embedder_identity
from flows.eval_reports import budget_curve_files, expansion_report_files, qa_report_files
from flows.eval_workers import commit_calls, eval_roles, refuse_faulty, run_papers_in_workers
from grace_core.evaluation.budget_curve import budget_curve, parse_budgets
from grace_core.evaluation.expansion import evaluate_expansion, expansion_papers, summarise
from grace_core.evaluation.expansion_report import number
from grace_core.evaluation.qa_harness import (
    DATASETS,
    DatasetMismatch,
    evaluate_qa,
    select_documents,
    select_half,
)
from grace_core.evaluation.records import expansion_records, qa_records
from storage.lake import Lake
from storage.report_files import write_report_folder

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


def usable_documents(content: bytes, data: Path, dataset: str) -> tuple[DocumentBatch, list[dict]]:
    """The documents of ``content`` the evaluation can use and the ``{line, doc_id, reason}``
    of those it leaves out (:func:`~grace_core.evaluation.qa_harness.select_documents`), each
    also named on stderr."""
    batch, skipped = select_documents(parse_batch(content, str(data), skip_invalid=True), dataset)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for s in skipped:
        err.print(f"grace: skipped {data}: line {s['line']}" + (f" ({s['doc_id']})" if s["doc_id"] else "") + f": {s['reason']}",
                  markup=False)
    return batch, skipped


def check_backend(backend: str | None) -> None:
    if backend is not None and backend not in ("offline", "litellm"):
        raise EvalDataError(f"unknown backend {backend!r}; expected offline or litellm")


@contextmanager
def progress_bar(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr; yields ``advance(n)``."""
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


EVAL_HALLUCINATION_RATE = 0.2
"""The offline responder's corruption rate in evaluations unless GRACE_HALLUCINATION_RATE or
--hallucination-rate says otherwise (the product's default is 0)."""

NOT_RESULTS = frozenset({
    "api_key", "lake", "s3_endpoint_url", "s3_region", "catalog_cache", "concurrency", "torch_threads", "embed_batch_size",
    "embed_batch_tokens", "embed_cache_size", "dask_address", "task_runner", "docs_per_task", "score_docs_per_task", "score_tasks_at_once", "inbox",
    "inbox_interval_s", "nightly_cron", "maintenance_cron", "timezone", "vacuum_retention_hours", "deadline_hours", "packet_size", "reviewers", "max_retries",
    "request_timeout_s", "retry_backoff_s", "retry_backoff_max_s",
})
"""Settings that cannot change an evaluation's figures (where things are, how fast, secrets)."""


def core_fingerprint() -> str:
    """A hash of grace_core's source files: figures of changed domain code are another run."""
    import grace_core

    root = Path(grace_core.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def result_settings(settings: GraceSettings, **options: object) -> dict:
    """Every setting that can change the figures, the command's own options, the embedder as
    resolved on this machine (``embed_precision`` "auto" is bfloat16 on some CPUs, float32 on
    others) and the fingerprint of the domain code."""
    return {**settings.model_dump(mode="json", exclude=set(NOT_RESULTS)), **options, "embedder": embedder_identity(settings),
            "grace_core": core_fingerprint()}


def record_in_lake(settings: GraceSettings, records: pl.DataFrame, *, command: str, dataset: str, data: Path,
                   content: bytes, run_settings: dict) -> str:
    """Commit the run's figures to the lake's ``evaluations`` table, once per (command, data,
    settings that can change the figures); returns a line saying where they are."""
    settings_json = json.dumps(run_settings, sort_keys=True)
    eval_id = content_id(command, dataset, hashlib.sha256(content).hexdigest(), settings_json)
    rows = records.with_columns(
        eval_id=pl.lit(eval_id), command=pl.lit(command), dataset=pl.lit(dataset), data=pl.lit(str(data)),
        backend=pl.lit(settings.backend), settings_json=pl.lit(settings_json),
        created_at=pl.lit(datetime.now(timezone.utc)),
    )
    lake = Lake.open(settings)
    created = lake.commit(f"eval/{command}/{eval_id}", {"evaluations": rows}).created
    where = f"lake {lake.uri}, evaluations.eval_id = '{eval_id}'"
    return where if created else f"{where} (already recorded by an earlier run with the same data and settings)"


@eval_app.command("qa")
def qa(
    dataset: str = typer.Option(..., "--dataset", help="qasper or quality."),
    data: Path = typer.Option(..., "--data", help="JSONL file of QASPER/QuALITY dev lines (the schema of QASPER v0.3 or QuALITY v1.0.1, as published)."),
    out: Path = typer.Option(..., "--out", help="Output folder: report.md, metrics.json, qa_metrics.png."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N documents."),
    backend: Optional[str] = typer.Option(None, "--backend", help="offline (default) or litellm."),
    top: int = typer.Option(5, "--top", min=1, help="Passages given to the answerer (RAG and GRACE)."),
    half: Optional[str] = typer.Option(
        None, "--half", help="Only the papers of this half: tuning (SHA-256 of the document id even) or reporting (odd); all when unset."),
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
) -> None:
    """Retrieval QA: Zero-shot + Part, Zero-shot + Full, RAG and GRACE; accuracy, answerability,
    and for QASPER Answer-F1, Evidence-F1, abstention precision and recall on the unanswerable
    questions and the accuracy–coverage curve over the abstention threshold (abstention.png).
    Retrieval settings: GRACE_ALPHA, GRACE_RETRIEVAL_K, GRACE_RELEVANCE_FLOOR, GRACE_ABSTAIN_BELOW."""
    if dataset not in DATASETS:
        raise DatasetMismatch(f"unknown dataset {dataset!r}; expected one of: {', '.join(DATASETS)}")
    check_backend(backend)
    content = read_limited(data, limit)
    batch, skipped = usable_documents(content, data, dataset)
    batch = select_half(batch, half)
    if batch.documents.height == 0:
        raise DatasetMismatch(f"{data}: no document of the {half} half")
    settings = build_settings(backend=backend, lake=lake)
    roles, cache = eval_roles(settings)
    start = time.monotonic()
    try:
        with progress_bar(f"{dataset} questions", batch.questions.height) as advance:
            result = evaluate_qa(batch, dataset, roles, settings, alpha=settings.alpha, k=top,
                                 context_passages=settings.context_passages, progress=advance)
    finally:
        commit_calls(settings, cache.pending())
    refuse_faulty("qa", roles.failures())
    result.metrics["skipped"] = skipped
    seconds = time.monotonic() - start
    write_report_folder(out, qa_report_files(result.metrics, data=str(data), backend=settings.backend, seconds=seconds))
    run_settings = result_settings(settings, top=top, **({"half": half} if half else {}))
    where = record_in_lake(settings, qa_records(result.metrics), command="qa", dataset=dataset, data=data, content=content,
                           run_settings=run_settings)
    console = Console()
    left_out = f" ({len(skipped)} lines or documents skipped)" if skipped else ""
    console.print(f"{dataset}: {result.metrics['n_questions']} questions{left_out} in {seconds:.1f} s → {out}; figures in {where}")
    for c in result.metrics["conditions"]:
        extra = "" if c["answer_f1"] is None else f"  Answer-F1 {c['answer_f1']:.3f}  Evidence-F1 {c['evidence_f1']:.3f}"
        console.print(f"  {c['name']:<18} accuracy {c['accuracy']:.3f}  answerability {c['answerability']:.3f}{extra}")
    for name, a in result.metrics.get("abstention", {}).items():
        if name in ("RAG", "GRACE"):
            console.print(f"  {name:<18} abstained {a['abstained']}  precision {number(a['precision'], 3)}  recall {number(a['recall'], 3)} "
                          f"(of {a['negatives']} unanswerable)")


class BadBudget(GraceError):
    """A --budget value that is not a list of numbers ≥ 0."""


@eval_app.command("expansion")
def expansion(
    data: Path = typer.Option(..., "--data", help="JSONL file of QASPER dev lines (the schema of QASPER v0.3, as published)."),
    out: Path = typer.Option(..., "--out", help="Output folder: report.md, metrics.json, expansion_rounds.png, confusion.png "
                             "(with several budgets: one folder budget-B per budget, and budget_curve.md/.json/.png)."),
    papers: Optional[int] = typer.Option(None, "--papers", min=1, help="Only the first N papers."),
    rounds: int = typer.Option(3, "--rounds", min=1, help="Expansion rounds after round 0 (held-out sections are split into this many batches)."),
    budget: Optional[str] = typer.Option(
        None, "--budget", help="Review budget per paper and round, in cost units (docs/design.md §4); GRACE_BUDGET (3.0) when unset. "
        "Several, comma-separated (1,3,10,30), sweep them: the budget curve."),
    hallucination_rate: Optional[float] = typer.Option(
        None, "--hallucination-rate", min=0, max=1,
        help=f"Offline responder's share of corrupted sentences; GRACE_HALLUCINATION_RATE, else {EVAL_HALLUCINATION_RATE}, when unset."),
    backend: Optional[str] = typer.Option(None, "--backend", help="offline (default) or litellm."),
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
    workers: int = typer.Option(1, "--workers", min=1, help="Processes running papers in parallel (about 1 GB of memory each)."),
    consolidation_rounds: int = typer.Option(
        0, "--consolidation-rounds", min=0, help="Rounds after the protocol's with no new sections: only review and cascade act."),
    half: Optional[str] = typer.Option(
        None, "--half", help="Only the papers of this half: tuning (SHA-256 of the document id even) or reporting (odd); all when unset."),
) -> None:
    """The paper's expansion protocol: round-0 priors Abstract + Introduction, then per round the
    next batch of held-out sections as responder context, review by the verifier under the
    budget, promotion and cascade; QA accuracy, PCR, KF, yield, cascade and grounding precision
    per round, and the confusion matrices. Several budgets: the protocol once per budget and the
    budget curve (KF, PCR, yield, cascade and review seconds per round and budget)."""
    check_backend(backend)
    try:
        budgets = parse_budgets(budget) if budget is not None else [None]
    except ValueError as exc:
        raise BadBudget(f"--budget {budget!r}: {exc}") from None
    content = read_limited(data, papers)
    batch, skipped = usable_documents(content, data, "qasper")
    batch = select_half(batch, half)
    if batch.documents.height == 0:
        raise DatasetMismatch(f"{data}: no document of the {half} half")
    doc_ids = expansion_papers(batch)
    runs = {}
    for b in budgets:
        settings = build_settings(backend=backend, lake=lake, budget=b, hallucination_rate=hallucination_rate)
        if "hallucination_rate" not in settings.model_fields_set:
            settings = settings.model_copy(update={"hallucination_rate": EVAL_HALLUCINATION_RATE})
        folder = out if len(budgets) == 1 else out / f"budget-{settings.budget:g}"
        runs[settings.budget] = expansion_run(settings, batch, content, data, doc_ids, skipped, folder, rounds=rounds, workers=workers,
                                              consolidation_rounds=consolidation_rounds, half=half)
    if len(budgets) > 1:
        curve = budget_curve(runs, settings.review_seconds)
        shown = {"rounds": rounds, "consolidation_rounds": consolidation_rounds, "papers": runs[settings.budget]["n_papers"],
                 **({"half": half} if half else {})}
        write_report_folder(out, budget_curve_files(curve, data=str(data), settings=shown))
        shrinking = curve["shrinking_budget"]
        Console().print(f"budget curve → {out / 'budget_curve.md'}: " + (
            f"KF falls from round to round from budget {shrinking:g}" if shrinking is not None else "KF falls round to round at none of the budgets"))


def expansion_run(settings: GraceSettings, batch: DocumentBatch, content: bytes, data: Path, doc_ids: list[str], skipped: list[dict],
                  out: Path, *, rounds: int, workers: int, consolidation_rounds: int, half: str | None) -> dict:
    """The protocol at ``settings.budget``: report folder ``out``, figures into the lake, the
    summary printed; returns the metrics."""
    options = {"rounds": rounds, "budget": settings.budget, "context_passages": settings.context_passages,
               "consolidation_rounds": consolidation_rounds}
    start = time.monotonic()
    with progress_bar(f"papers × {rounds + consolidation_rounds + 1} rounds", len(doc_ids)) as advance:
        if workers == 1:
            roles, cache = eval_roles(settings)
            try:
                metrics = evaluate_expansion(batch, roles, settings, progress=advance, **options)
            finally:
                commit_calls(settings, cache.pending())
            failures = roles.failures()
        else:
            runs, failures = run_papers_in_workers(settings, content, str(data), doc_ids, options, workers=workers, progress=advance)
            metrics = summarise(runs, rounds, consolidation_rounds)
    refuse_faulty("expansion", failures)
    metrics["skipped"] = skipped
    seconds = time.monotonic() - start
    run_settings = result_settings(settings, rounds=rounds, consolidation_rounds=consolidation_rounds, **({"half": half} if half else {}))
    shown = {k: run_settings[k] for k in ("backend", "rounds", "budget", "hallucination_rate", "context_passages", "seed", "half")
             if k in run_settings}
    write_report_folder(out, expansion_report_files(metrics, data=str(data), backend=settings.backend, settings=shown, seconds=seconds))
    where = record_in_lake(settings, expansion_records(metrics), command="expansion", dataset="qasper", data=data,
                           content=content, run_settings=run_settings)
    console = Console()
    left_out = f" ({len(skipped)} lines or documents skipped)" if skipped else ""
    console.print(f"expansion (budget {settings.budget:g}): {metrics['n_papers']} papers, {metrics['n_questions']} questions{left_out} "
                  f"in {seconds:.1f} s → {out}; figures in {where}")
    base = metrics["baselines"]
    console.print(f"  baselines: abstract only {number(base['abstract_only'], 3)}, full paper {number(base['full_paper'], 3)}")
    for r in metrics["rounds"]:
        console.print(f"  round {r['round']}: QA {number(r['qa_accuracy'], 3)}  PCR {number(r['pcr'], 3)}  KF {number(r['kf'], 3)}  "
                      f"yield {number(r['yield'], 3)}  cascade {number(r['cascade'], 3)}  grounding precision {number(r['grounding_precision'], 3)}")
    return metrics
