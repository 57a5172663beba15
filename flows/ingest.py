"""``ingest_batch`` (one JSONL batch file) and ``watch_inbox`` (every new batch of the inbox)."""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows.params import InboxOptions, IngestParams
from flows.runtime import open_lake
from flows.settings import GraceSettings
from flows.tasks import grace_task
from grace_core.errors import InvalidBatch
from storage.inbox import Inbox, read_batch_file
from storage.ingest import ingest_batch as ingest_into_lake


@grace_task()
def ingest_file(settings: GraceSettings, uri: str) -> str:
    name, data = read_batch_file(uri, settings, settings)
    return ingest_into_lake(open_lake(settings), data, name, settings.prior_sections, settings).summary()


@flow(name="ingest_batch", log_prints=True)
def ingest_batch(params: IngestParams) -> str:
    """Ingest one document batch into documents, priors and questions (exactly once per content)."""
    summary = ingest_file(params.settings(), params.batch)
    get_run_logger().info(summary)
    return summary


@grace_task()
def ingest_inbox(settings: GraceSettings, inbox_uri: str) -> list[str]:
    """Ingest the inbox's batches one at a time, oldest name first; quarantine malformed ones."""
    inbox = Inbox.open(inbox_uri, settings)
    lake = open_lake(settings)
    lines = []
    for name in inbox.batches():
        try:
            data = inbox.read(name, settings)
            lines.append(ingest_into_lake(lake, data, name, settings.prior_sections, settings).summary())
        except InvalidBatch as exc:
            inbox.quarantine(name, str(exc))
            lines.append(f"{name}: quarantined: {exc}")
            continue
        inbox.mark_processed(name)
    return lines


@flow(name="watch_inbox", log_prints=True)
def watch_inbox(params: InboxOptions) -> list[str]:
    """Ingest each new batch of the inbox once; malformed batches go to quarantine."""
    settings = params.settings()
    logger = get_run_logger()
    if not settings.inbox:
        logger.info("no inbox configured (GRACE_INBOX); nothing to watch")
        return []
    lines = ingest_inbox(settings, settings.inbox)
    for line in lines:
        logger.info(line)
    return lines
