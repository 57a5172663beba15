"""GRACE's deployments: names, descriptions, schedules and tags only; what runs is in ``flows/``.

Each deployment is named for what it does (``prefect deployment ls`` lists ``flow/name``):

- ``expansion_round/nightly-expansion``: one expansion round on the nightly cron schedule;
- ``watch_inbox/inbox-watcher``: a scan of the batch inbox at a fixed interval;
- ``maintain_lake/lake-maintenance``: compaction and vacuum of the lake on a weekly cron schedule;
- one deployment per flow with no schedule (``ingest_batch/ingest-batch``, …), run from the UI's
  Run form or ``prefect deployment run`` with the flow's typed parameters.

A scheduled deployment runs one run at a time, and a run due while another is running is
cancelled (Prefect's deployment concurrency limit 1, collision strategy ``CANCEL_NEW``; Prefect
3.9 has no catch-up setting for schedules): the runs missed during a downtime that start
together all end Cancelled ("Deployment concurrency limit reached.") but one. ``grace serve``
also cancels all but the last missed run of each schedule as it starts (``Superseded``,
flows/cli/serve.py), so a restart runs one round and one inbox scan, not one per missed slot.
Its description says its schedule in words (the deployment list shows only a cron string).

``grace serve`` serves them from one process; ``prefect.yaml`` declares the same deployments for
a ``process`` work pool (``prefect deploy --all``).
"""

from __future__ import annotations

from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.deployments.runner import RunnerDeployment
from prefect.schedules import Cron, Interval
from prefect.types.entrypoint import EntrypointType

from deployments.config import ScheduleConfig
from flows.build import build_graphs
from flows.expansion import expansion_round
from flows.ingest import ingest_batch, watch_inbox
from flows.maintenance import maintain_lake
from flows.review import dispatch_reviews, ingest_verdicts
from flows.review_ui import review_packet
from flows.score import score_round

NIGHTLY = "nightly-expansion"
INBOX_WATCHER = "inbox-watcher"
MAINTENANCE = "lake-maintenance"
ON_DEMAND = {
    "ingest-batch": (ingest_batch, "Ingest one JSONL batch file (documents, priors, questions) into the lake."),
    "build-graphs": (build_graphs, "Build stage of a round: answer questions and decompose answers into claims."),
    "score-round": (score_round, "Score stage of a round: settle reviewed claims, then score every claim."),
    "dispatch-reviews": (dispatch_reviews, "Dispatch stage of a round: defer boundary claims to reviewers within the budget."),
    "ingest-verdicts": (ingest_verdicts, "Read the verdict files returned to the review inbox."),
    "review-packet": (review_packet, (
        "Your next claims to review as a form. Run it with your name as Reviewer; your packet is the run named "
        "'review YOUR-NAME · round N · K claims' (Runs, or this deployment's Runs tab), Paused. Open it, click Resume, "
        "pick a verdict per claim (each with its passage and nearest prior), type your reviewer key, Submit.")),
    "expansion-round": (expansion_round, "One expansion round now: verdicts, new batches, build, score, dispatch."),
}
ONE_AT_A_TIME = ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW)
"""A scheduled deployment's runs: one at a time, and a run due meanwhile is cancelled."""
CATCH_UP = " One run at a time: after a downtime one missed run starts and the others end Cancelled."
WEEKDAYS = {**{str(i): day for i, day in enumerate(["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"])},
            "7": "Sunday"}


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}{'' if n == 1 else 's'}"


def interval_in_words(seconds: int) -> str:
    """``300`` → ``every 5 minutes``; ``3600`` → ``every hour``; ``90`` → ``every 90 seconds``."""
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds % size == 0:
            n = seconds // size
            return f"every {unit}" if n == 1 else f"every {_plural(n, unit)}"
    return f"every {_plural(seconds, 'second')}"


def cron_in_words(cron: str, timezone: str) -> str:
    """A cron schedule as a person reads it: ``0 5 * * 0`` → ``every Sunday at 05:00 (UTC)``.
    Fixed minute and hour on every day, some weekdays or one day of the month are said in words;
    any other schedule is quoted as cron."""
    fields = cron.split()
    if len(fields) == 5 and fields[0].isdigit() and fields[1].isdigit() and fields[3] == "*":
        minute, hour, day, _, weekday = fields
        at = f"at {int(hour):02d}:{int(minute):02d} ({timezone})"
        if day == "*" and weekday == "*":
            return f"every day {at}"
        if day == "*" and all(part in WEEKDAYS for part in weekday.split(",")):
            return f"every {' and '.join(WEEKDAYS[p] for p in weekday.split(','))} {at}"
        if day == "*" and "-" in weekday and all(p in WEEKDAYS for p in weekday.split("-", 1)):
            first, last = weekday.split("-", 1)
            return f"{WEEKDAYS[first]} to {WEEKDAYS[last]} {at}"
        if day.isdigit() and weekday == "*":
            return f"on day {int(day)} of every month {at}"
    return f"on cron `{cron}` ({timezone})"


def descriptions(config: ScheduleConfig) -> dict[str, str]:
    """Every deployment's description; a scheduled one says its schedule in words."""
    return {
        NIGHTLY: f"One expansion round {cron_in_words(config.nightly_cron, config.timezone)} (GRACE_NIGHTLY_CRON).{CATCH_UP}",
        INBOX_WATCHER: (f"Ingest every new batch of the inbox (GRACE_INBOX) {interval_in_words(config.inbox_interval_s)} "
                        f"(GRACE_INBOX_INTERVAL_S).{CATCH_UP}"),
        MAINTENANCE: (f"Compact the lake's tables, then vacuum the replaced files: "
                      f"{cron_in_words(config.maintenance_cron, config.timezone)} (GRACE_MAINTENANCE_CRON).{CATCH_UP}"),
        **{name: text for name, (_, text) in ON_DEMAND.items()},
    }


def grace_deployments(config: ScheduleConfig) -> list[RunnerDeployment]:
    """The scheduled deployments (schedules from ``config``, one run at a time), then one
    on-demand deployment per flow. Entrypoints are module paths (``flows.expansion.expansion_round``):
    the installed package, wherever the process runs from."""
    module = EntrypointType.MODULE_PATH
    text = descriptions(config)
    scheduled = {"tags": ["grace", "scheduled"], "entrypoint_type": module, "concurrency_limit": ONE_AT_A_TIME}
    return [
        expansion_round.to_deployment(
            NIGHTLY, schedule=Cron(config.nightly_cron, timezone=config.timezone), description=text[NIGHTLY], **scheduled,
        ),
        watch_inbox.to_deployment(
            INBOX_WATCHER, schedule=Interval(config.inbox_interval_s), parameters={"params": {}},
            description=text[INBOX_WATCHER], **scheduled,
        ),
        maintain_lake.to_deployment(
            MAINTENANCE, schedule=Cron(config.maintenance_cron, timezone=config.timezone), parameters={"params": {}},
            description=text[MAINTENANCE], **scheduled,
        ),
        *(f.to_deployment(name, description=text[name], tags=["grace", "on-demand"], entrypoint_type=module)
          for name, (f, _) in ON_DEMAND.items()),
    ]
