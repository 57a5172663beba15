"""``grace review``: the human review channels outside the Prefect UI.

- ``grace review --reviewer NAME``: the reviewer's pending claims one at a time in the
  terminal, with their context; each answer is recorded at once with the seconds spent on it;
- ``grace review ingest FILE``: a returned verdict file (CSV or JSONL, local or ``s3://``);
- ``grace review export``: rewrite the reviewers' packets in the lake's review outbox.
"""

from __future__ import annotations

import json
import textwrap
from time import monotonic
from typing import Optional

import typer

from flows.cli import app
from flows.runtime import roles_with_cache, timestamp
from flows.settings import build_settings
from flows.verdicts import ingest_verdict_file, pending_for, record_verdicts, review_context, write_packets
from grace_core.identifiers import check_id
from grace_core.verdict_files import VerdictRow
from storage.lake import Lake
from storage.review_files import read_verdict_file

LAKE_HELP = "Lake root: a folder or s3://bucket/prefix (default: the GRACE_LAKE setting, else ./lake)."
ANSWERS = {"c": "confirm", "r": "reject", "a": "abstain", "s": "skip", "q": "quit"}

review_app = typer.Typer(
    help="Review deferred claims: in the terminal (--reviewer NAME), or through verdict files (ingest, export).",
    invoke_without_command=True, no_args_is_help=False,
)
app.add_typer(review_app, name="review")


def _wrap(text: str | None) -> str:
    """``text`` indented and wrapped, at most 8 lines."""
    return textwrap.fill(" ".join((text or "—").split()), width=100, initial_indent="    ", subsequent_indent="    ",
                         max_lines=8, placeholder=" …")


def _ask_verdict() -> str:
    """Ask until the answer is one of :data:`ANSWERS` (a letter or the word); the word."""
    while True:
        raw = typer.prompt("  verdict [c]onfirm [r]eject [a]bstain [s]kip [q]uit").strip().lower()
        if raw in ANSWERS or raw in ANSWERS.values():
            return ANSWERS[raw[0]]
        typer.echo("  please answer c, r, a, s or q")


def _show(row: dict, i: int, n: int) -> None:
    """One claim with its context."""
    confidence = "—" if row["confidence"] is None else f"{row['confidence']:.2f}"
    due = f"due {row['deadline']}{' (overdue)' if row['overdue'] else ''}" if row["deadline"] else "no deadline"
    typer.echo(f"\n[{i}/{n}] round {row['round']} · document {row['doc_id']} · claim {row['claim_id']} · {due}")
    typer.echo(f"  status {row['status'] or '—'} · confidence {confidence}")
    typer.echo("  claim:\n" + _wrap(row["claim"]))
    typer.echo(f"  source passage ({row['source'] or '—'}):\n" + _wrap(row["source_passage"]))
    typer.echo("  nearest prior:\n" + _wrap(row["nearest_prior"]))


@review_app.callback()
def review(
    ctx: typer.Context,
    reviewer: Optional[str] = typer.Option(None, "--reviewer", "-r", help="Review this reviewer's pending claims in the terminal."),
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
    limit: Optional[int] = typer.Option(None, min=1, help="Stop after this many claims."),
) -> None:
    """Review your pending claims one at a time: c(onfirm), r(eject), a(bstain), s(kip) or
    q(uit), then an optional note. Each verdict is recorded at once, with the seconds you spent."""
    if ctx.invoked_subcommand is not None:
        return
    if reviewer is None:
        raise typer.BadParameter("name the reviewer (or use `grace review ingest FILE` / `grace review export`)", param_hint="--reviewer")
    check_id(reviewer, "reviewer")
    settings = build_settings(lake=lake)
    target = Lake.open(settings, must_exist=True)
    pending = pending_for(target, reviewer, timestamp(None))
    if limit:
        pending = pending.head(limit)
    if pending.height == 0:
        typer.echo(f"no claims waiting for {reviewer}")
        return
    roles, _ = roles_with_cache(settings, target, int(pending["round"].max()))
    context = review_context(target, roles, pending)
    source = f"terminal:{reviewer}"
    typer.echo(f"{context.height} claim{'s' if context.height != 1 else ''} waiting for {reviewer} (lake {target.uri}).")
    counts = {"recorded": 0, "skipped": 0, "refused": 0}
    for i, row in enumerate(context.iter_rows(named=True), start=1):
        _show(row, i, context.height)
        started = monotonic()
        answer = _ask_verdict()
        if answer == "quit":
            break
        if answer == "skip":
            counts["skipped"] += 1
            continue
        note = typer.prompt("  note (optional)", default="", show_default=False).strip() or None
        verdict = VerdictRow(
            file=source, line=i, claim_id=row["claim_id"], reviewer=reviewer, verdict=answer, doc_id=row["doc_id"],
            round=row["round"], seconds_spent=round(monotonic() - started, 3), note=note,
            raw=json.dumps({"claim_id": row["claim_id"], "verdict": answer, "note": note}),
        )
        key = f"review/terminal/{reviewer}/round={row['round']}/{row['claim_id']}"
        report = record_verdicts(target, key, source, [verdict], [], "terminal", timestamp(None))
        if report.recorded:
            counts["recorded"] += 1
            typer.echo(f"  recorded: {answer} ({verdict.seconds_spent:.0f} s)")
        else:
            counts["refused"] += 1
            reason = report.bad[0].reason if report.bad else "already recorded"
            typer.echo(f"  not recorded: {reason}")
    typer.echo(f"{reviewer}: {counts['recorded']} recorded, {counts['skipped']} skipped, {counts['refused']} refused")


@review_app.command("ingest")
def ingest(
    file: str = typer.Argument(..., help="A verdict file (.csv or .jsonl): a local path or s3://bucket/key."),
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
) -> None:
    """Record a returned verdict file (columns claim_id, verdict, reviewer; optionally doc_id,
    round, seconds_spent, note; a returned packet works as is). Good rows are applied, every bad
    row is reported with file, line and reason and kept in the lake's review quarantine (exit
    code 1); the same file twice changes nothing. An empty file, a file over GRACE_MAX_VERDICT_BYTES
    or GRACE_MAX_VERDICT_ROWS, or one that is not .csv/.jsonl is refused whole (exit code 2)."""
    settings = build_settings(lake=lake)
    target = Lake.open(settings, must_exist=True)
    name, data = read_verdict_file(file, settings, settings)
    report = ingest_verdict_file(target, name, data, timestamp(None), settings)
    if not (report.recorded or report.unanswered or report.bad or report.already_recorded):
        typer.echo(f"{name}: the file holds no verdict rows (only its header); nothing recorded")
    else:
        typer.echo(report.summary())
    for bad in report.bad:
        typer.echo(str(bad), err=True)
    if report.bad:
        raise typer.Exit(1)


@review_app.command("export")
def export(
    reviewer: Optional[str] = typer.Option(None, "--reviewer", "-r", help="Only this reviewer's packet (default: every human reviewer)."),
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
) -> None:
    """Rewrite review packets (CSV and JSONL, one per reviewer) in the lake's review outbox:
    every claim still waiting for the reviewer, with its text, source passage, nearest prior,
    status, confidence and deadline, and empty verdict, seconds_spent and note columns."""
    if reviewer is not None:
        check_id(reviewer, "reviewer")
    settings = build_settings(lake=lake)
    target = Lake.open(settings, must_exist=True)
    roles, _ = roles_with_cache(settings, target, 0)
    now = timestamp(None)
    written = write_packets(target, roles, now, [reviewer] if reviewer else list(settings.reviewers), include_pending=reviewer is None)
    if not written:
        typer.echo("no human reviewers: set GRACE_REVIEWERS or name one with --reviewer")
    for name, out in written.items():
        typer.echo(f"{name}: {out['claims']} claim{'s' if out['claims'] != 1 else ''} → {', '.join(out['files'])}")
