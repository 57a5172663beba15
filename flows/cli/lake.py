"""``grace ingest`` (one document batch into the lake) and the lake's upkeep: ``grace compact``, ``grace vacuum``,
``grace check`` (integrity), ``grace migrate`` (a lake of the earlier format to Delta tables),
``grace backup`` and ``grace restore`` (a consistent snapshot of the lake, and a lake made from one)."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from flows.cli import LAKE_HELP, app
from flows.settings import build_settings
from storage.inbox import read_batch_file
from storage.ingest import ingest_batch, write_invalid_report
from grace_core.errors import LakeError
from storage.backup import backup_lake, open_location, restore_lake
from storage.check import check_lake
from storage.lake import Lake
from storage.config import MIN_RETENTION_HOURS
from storage.maintenance import maintain, vacuum as vacuum_lake
from storage.migrate import migrate_lake



@app.command("ingest")
def ingest(
    batch: str = typer.Argument(..., help="A JSONL document batch (one document per line): a local path or s3://bucket/key."),
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
    prior_sections: Optional[str] = typer.Option(
        None, "--prior-sections", help="Comma-separated section names ingested as priors (e.g. 'Abstract,Introduction'); "
        "the others become passages. All sections are priors when unset (GRACE_PRIOR_SECTIONS)."),
    skip_invalid: bool = typer.Option(
        False, "--skip-invalid", help="Ingest the usable lines and leave out the invalid ones: they are named on stderr and "
        "listed in <batch>.invalid.ndjson beside the batch, and the exit code is 1."),
) -> None:
    """Ingest one document batch: all of it or nothing (unless --skip-invalid); the same batch twice changes nothing."""
    sections = tuple(s.strip() for s in prior_sections.split(",") if s.strip()) if prior_sections else None
    settings = build_settings(lake=lake, prior_sections=sections)
    name, data = read_batch_file(batch, settings, settings)  # in bounded pieces, up to GRACE_MAX_BATCH_BYTES
    target = Lake.open(settings)
    report = ingest_batch(target, data, name, settings.prior_sections, settings, skip_invalid=skip_invalid)
    print(f"{report.summary()} (lake {target.uri})")
    if report.skipped:
        where = write_invalid_report(batch, report.skipped, settings)
        for skipped in report.skipped[:SHOWN_INVALID]:
            print(f"grace: skipped {skipped.message}", file=sys.stderr)
        more = len(report.skipped) - SHOWN_INVALID
        print((f"grace: … and {more} more; " if more > 0 else "grace: ") + f"every invalid line is listed in {where}", file=sys.stderr)
        raise typer.Exit(1)


SHOWN_INVALID = 20
"""Invalid lines ``grace ingest --skip-invalid`` names on stderr; the report file lists all."""


RETENTION_HELP = ("Keep the files that versions of the last N hours name (at least 1, so that no running writer's files "
                  "are touched; time travel reaches back this far). Default: the GRACE_VACUUM_RETENTION_HOURS setting, else 168.")


@app.command("vacuum")
def vacuum(
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
    older_than_hours: Optional[int] = typer.Option(None, "--older-than-hours", min=MIN_RETENTION_HOURS, help=RETENTION_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would be deleted, delete nothing."),
) -> None:
    """Delete the files no version of the lake's Delta tables within the retention names:
    files compaction replaced, files of writers killed before their commit, and leftover
    temporary catalog files. Data of the current versions is never touched."""
    settings = build_settings(lake=lake, vacuum_retention_hours=older_than_hours)
    target = Lake.open(settings, must_exist=True)
    report = vacuum_lake(target, retention_hours=settings.vacuum_retention_hours, dry_run=dry_run)
    for table, files in report.deleted.items():
        for f in files:
            print(f"{'would delete' if dry_run else 'deleted'} {table}/{f}")
    print(f"{report.summary()} (lake {target.uri})")


@app.command("compact")
def compact(
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
    older_than_hours: Optional[int] = typer.Option(None, "--older-than-hours", min=MIN_RETENTION_HOURS, help=RETENTION_HELP),
) -> None:
    """Rewrite each table's small files into fewer large ones (per round partition), then
    vacuum the files replaced before the retention. Readers see the same rows throughout."""
    settings = build_settings(lake=lake, vacuum_retention_hours=older_than_hours)
    target = Lake.open(settings, must_exist=True)
    compactions, report = maintain(target, retention_hours=settings.vacuum_retention_hours)
    for c in compactions:
        if c.files_removed:
            print(c.summary())
    print(f"compacted; {report.summary()} (lake {target.uri})")


@app.command("check")
def check(lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP)) -> None:
    """Verify that every file the current version of each table names exists, with the size
    and row count the table's log records. Exits non-zero naming each file that does not."""
    target = Lake.open(build_settings(lake=lake), must_exist=True)
    report = check_lake(target)
    for problem in report.problems:
        print(f"error: {problem}", file=sys.stderr)
    if report.problems:
        raise LakeError(f"lake {target.uri}: {report.summary()}")
    print(f"{report.summary()} (lake {target.uri})")


@app.command("migrate")
def migrate(lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP)) -> None:
    """Convert a lake written by an earlier GRACE (commit records under _manifest/) into Delta
    tables, commit by commit under the same keys, then rebuild what later GRACE versions derive
    as rounds settle (decisions, review inputs, reviewer reliability, scoring counts), so the
    metrics and the next round read as on the old lake. Safe to re-run: what is done is skipped."""
    from flows.rebuild import rebuild_derived

    settings = build_settings(lake=lake)
    target = Lake.open(settings, must_exist=True, migrating=True)
    report = migrate_lake(target)
    print(report.summary())
    if report.migrated or report.skipped:
        print(rebuild_derived(target, settings).summary())


@app.command("backup")
def backup(
    dest: str = typer.Argument(..., help="An empty (or new) folder or s3://bucket/prefix to write the backup to."),
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
) -> None:
    """Write a consistent snapshot of the lake to DEST: every table as of one point of the commit
    log (a round running meanwhile is left out until its work is committed), with what
    --as-of-round needs, the commit log, and grace-backup.json written last. Safe while rounds run."""
    settings = build_settings(lake=lake)
    source = Lake.open(settings, must_exist=True)
    print(backup_lake(source, open_location(settings, dest)).summary())


@app.command("restore")
def restore(
    src: str = typer.Argument(..., help="A backup written by grace backup: a folder or s3://bucket/prefix."),
    lake: str = typer.Argument(..., help="The lake to create from it: a new or empty folder or s3://bucket/prefix."),
) -> None:
    """Make the lake LAKE from the backup SRC (refused when LAKE holds anything), check every file,
    build its catalog. The restored lake answers as the source did when the backup was taken."""
    settings = build_settings(lake=lake)
    report, restored = restore_lake(open_location(settings, src), settings)
    problems = check_lake(restored)
    if problems.problems:
        raise LakeError(f"lake {restored.uri}: restored, but {problems.summary()} (grace check lists them)")
    print(f"{report.summary()}; {problems.summary()}")
