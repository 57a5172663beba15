"""``grace review``: the human review channels outside the Prefect UI.

- ``grace review --reviewer NAME``: the reviewer's pending claims one at a time in the
  terminal, with their context; each answer is recorded at once with the seconds spent on it;
- ``grace review sign FILE --reviewer NAME``: sign a filled-in verdict file with the reviewer's key;
- ``grace review ingest FILE``: a returned, signed verdict file (CSV or JSONL, local or ``s3://``);
- ``grace review export``: rewrite the reviewers' packets in the lake's review outbox.

The terminal and ``sign`` prove the reviewer first (:func:`flows.reviewers.prove`) with the key
from :data:`KEY_ENV` or, when it is unset, a hidden prompt; a wrong, unknown or revoked key is one
line and exit code 2 before anything is shown or stored.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from time import monotonic
from typing import Optional

import typer

from flows.cli import LAKE_HELP, app
from flows.reviewers import prove, sign_verdict_file
from flows.runtime import roles_with_cache, timestamp
from flows.settings import build_settings
from flows.verdicts import ingest_verdict_file, pending_for, record_verdicts, review_context, write_packets
from grace_core.identifiers import check_id
from grace_core.verdict_files import MAX_SECONDS_SPENT, VerdictRow
from storage.lake import Lake
from storage.review_files import read_verdict_file

ANSWERS = {"c": "confirm", "r": "reject", "a": "abstain", "s": "skip", "q": "quit"}
KEY_ENV = "GRACE_REVIEWER_KEY"
"""The environment variable a reviewer's key may come from (not a setting: the settings ignore it)."""

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


def reviewer_key(reviewer: str) -> str:
    """The key of ``reviewer``: :data:`KEY_ENV` when set, else asked for without echo (an empty
    answer is a wrong key, refused like any other)."""
    return os.environ.get(KEY_ENV, "").strip() or typer.prompt(f"key of reviewer {reviewer}", hide_input=True, default="", show_default=False)


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
    q(uit), then an optional note. Each verdict is recorded at once, with the seconds you spent.
    Your key (from `grace reviewer add`) is asked for first, or taken from GRACE_REVIEWER_KEY; a
    wrong, unknown or revoked key is refused (exit code 2) before any claim is shown."""
    if ctx.invoked_subcommand is not None:
        return
    if reviewer is None:
        raise typer.BadParameter("name the reviewer (or use `grace review ingest FILE` / `grace review export`)", param_hint="--reviewer")
    check_id(reviewer, "reviewer")
    settings = build_settings(lake=lake)
    target = Lake.open(settings, must_exist=True)
    prove(target, reviewer, reviewer_key(reviewer))
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
            round=row["round"], seconds_spent=round(min(monotonic() - started, MAX_SECONDS_SPENT), 3), note=note,
            raw=json.dumps({"claim_id": row["claim_id"], "verdict": answer, "note": note}),
        )
        key = f"review/terminal/{reviewer}/round={row['round']}/{row['claim_id']}"
        report = record_verdicts(target, key, source, [verdict], [], "terminal", timestamp(None), author=reviewer)
        if report.recorded:
            counts["recorded"] += 1
            typer.echo(f"  recorded: {answer} ({verdict.seconds_spent:.0f} s){' after its deadline (counted)' if report.late else ''}")
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
    round, seconds_spent, note; a returned packet works as is), signed by its reviewer with
    `grace review sign`. Good rows are applied, every bad row is reported with file, line and
    reason and kept in the lake's review quarantine (exit code 1); the same file twice changes
    nothing. A file that is unsigned, forged, changed after signing, signed with a revoked key or
    holding another reviewer's rows, an empty file, a file over GRACE_MAX_VERDICT_BYTES or
    GRACE_MAX_VERDICT_ROWS, or one that is not .csv/.jsonl is refused whole (exit code 2)."""
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


@review_app.command("sign")
def sign(
    file: Path = typer.Argument(..., help="A filled-in verdict file (.csv or .jsonl, e.g. a returned packet), signed in place."),
    reviewer: str = typer.Option(..., "--reviewer", "-r", help="The reviewer whose votes the file holds (every answered row)."),
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
) -> None:
    """Sign a filled-in verdict file in place with the reviewer's key (GRACE_REVIEWER_KEY, or
    asked for without echo): a last line `# grace-signature reviewer=… key=… hmac-sha256=…` (CSV)
    or `{"grace_signature": {…}}` (JSONL) over the exact bytes before it, replacing an earlier
    signature. Any change after signing makes the file refused at ingest. A wrong, unknown or
    revoked key, or an answered row of another reviewer, is refused (exit code 2), the file unchanged."""
    check_id(reviewer, "reviewer")
    settings = build_settings(lake=lake)
    target = Lake.open(settings, must_exist=True)
    name, data = read_verdict_file(str(file), settings, settings)
    signed, n_rows = sign_verdict_file(target, name, data, reviewer, reviewer_key(reviewer), settings)
    temporary = file.with_name(f".{file.name}.signing")
    temporary.write_bytes(signed)
    os.replace(temporary, file)
    typer.echo(f"{file}: signed by {reviewer} ({n_rows} verdict{'s' if n_rows != 1 else ''}); "
               "return it with `grace review ingest FILE` or drop it in the lake's review/inbox/")


@review_app.command("export")
def export(
    reviewer: Optional[str] = typer.Option(None, "--reviewer", "-r", help="Only this reviewer's packet (default: every human reviewer)."),
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
) -> None:
    """Rewrite review packets (CSV and JSONL, one per reviewer) in the lake's review outbox:
    every claim still waiting for the reviewer, with its text, source passage, nearest prior,
    status, confidence and deadline, and empty verdict, seconds_spent and note columns. The
    reviewer fills them in and signs the file (`grace review sign`) before returning it."""
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
    if written:
        typer.echo(f"Answer in a packet, sign it with `grace review sign FILE --reviewer {reviewer or 'NAME'}`, then return it "
                   "(`grace review ingest FILE`, or the lake's review/inbox/): unsigned files are refused.")
