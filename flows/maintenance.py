"""``maintain_lake``: the lake's upkeep, weekly by default (the ``lake-maintenance`` deployment,
``GRACE_MAINTENANCE_CRON``). Every round adds files to each table; compaction merges them and
sorts the tables keyed by document by ``doc_id``, so that a read of some documents opens only
their row groups however many batches wrote them (on 10,000 documents: incremental rounds of
15–17 s after the sort, 20–24 s after a compaction that only concatenated), and vacuum deletes
the files it replaced once they are older than the retention."""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows.params import MaintenanceParams
from flows.tasks import grace_task
from storage.lake import Lake
from storage.maintenance import maintain


@grace_task()
def compact_and_vacuum(lake: Lake, retention_hours: int) -> list[str]:
    """One line per table compacted, then the vacuum's summary. Retried on I/O errors: a
    compaction already done is not done again."""
    compactions, report = maintain(lake, retention_hours=retention_hours)
    lines = [c.summary() for c in compactions if c.files_removed]
    return [*lines, f"compacted {len(lines)} table(s); {report.summary()} (lake {lake.uri})"]


@flow(name="maintain_lake", log_prints=True)
def maintain_lake(params: MaintenanceParams) -> list[str]:
    """Compact the lake's tables, then vacuum what no version within the retention names.
    Readers and writers carry on meanwhile; a lake that does not exist fails the run."""
    settings = params.settings()
    lake = Lake.open(settings, must_exist=True)
    lines = compact_and_vacuum(lake, settings.vacuum_retention_hours)
    logger = get_run_logger()
    for line in lines:
        logger.info(line)
    return lines
