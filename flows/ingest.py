"""``ingest_batch`` (one JSONL batch file) and ``watch_inbox`` (every new batch of the inbox)."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

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
def ingest_inbox(settings: GraceSettings, inbox_uri: str) -> tuple[list[str], list[str]]:
    """Ingest the inbox's batches one at a time, oldest name first; quarantine malformed ones.
    Returns one line per batch, and the lines of the quarantined ones."""
    inbox = Inbox.open(inbox_uri, settings)
    lake = open_lake(settings)
    lines, quarantined = [], []
    for name in inbox.batches():
        try:
            data = inbox.read(name, settings)
            lines.append(ingest_into_lake(lake, data, name, settings.prior_sections, settings).summary())
        except InvalidBatch as exc:
            inbox.quarantine(name, str(exc))
            lines.append(f"{name}: quarantined: {exc}")
            quarantined.append(lines[-1])
            continue
        inbox.mark_processed(name)
    return lines, quarantined


def quarantine_markdown(inbox: str, quarantined: list[str]) -> str:
    """The artifact listing the batches this scan put in quarantine, and why."""
    items = "\n".join(f"- {line}" for line in quarantined)
    return (f"## {len(quarantined)} batch{'es' if len(quarantined) != 1 else ''} quarantined\n"
            f"Moved to `{inbox.rstrip('/')}/quarantine/` with an `.error.txt` beside each; fix and put back in the inbox.\n\n{items}")


@flow(name="watch_inbox", log_prints=True)
def watch_inbox(params: InboxOptions) -> list[str]:
    """Ingest each new batch of the inbox once; malformed batches go to quarantine (a WARNING
    each, and an artifact listing them)."""
    settings = params.settings()
    logger = get_run_logger()
    if not settings.inbox:
        logger.info("no inbox configured (GRACE_INBOX); nothing to watch")
        return []
    lines, quarantined = ingest_inbox(settings, settings.inbox)
    for line in lines:
        (logger.warning if line in quarantined else logger.info)(line)
    if quarantined:
        create_markdown_artifact(key="grace-inbox-quarantine", markdown=quarantine_markdown(settings.inbox, quarantined),
                                 description="Batches put in quarantine")
    return lines
