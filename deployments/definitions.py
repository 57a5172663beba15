"""GRACE's deployments: names, descriptions, schedules and tags only; what runs is in ``flows/``.

Each deployment is named for what it does (``prefect deployment ls`` lists ``flow/name``):

- ``expansion_round/nightly-expansion``: one expansion round on the nightly cron schedule;
- ``watch_inbox/inbox-watcher``: a scan of the batch inbox at a fixed interval;
- ``maintain_lake/lake-maintenance``: compaction and vacuum of the lake on a weekly cron schedule;
- one deployment per flow with no schedule (``ingest_batch/ingest-batch``, …), run from the UI's
  Run form or ``prefect deployment run`` with the flow's typed parameters.

``grace serve`` serves them from one process; ``prefect.yaml`` declares the same deployments for
a ``process`` work pool (``prefect deploy --all``).
"""

from __future__ import annotations

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
    "review-packet": (review_packet, "A reviewer's next claims as a form: pick a verdict per claim, then Resume."),
    "expansion-round": (expansion_round, "One expansion round now: verdicts, new batches, build, score, dispatch."),
}
DESCRIPTIONS = {
    NIGHTLY: "One expansion round every night (GRACE_NIGHTLY_CRON in GRACE_TIMEZONE).",
    INBOX_WATCHER: "Ingest every new batch of the inbox (GRACE_INBOX) every GRACE_INBOX_INTERVAL_S seconds.",
    MAINTENANCE: "Compact the lake's tables, then vacuum the replaced files (GRACE_MAINTENANCE_CRON in GRACE_TIMEZONE).",
    **{name: text for name, (_, text) in ON_DEMAND.items()},
}


def grace_deployments(config: ScheduleConfig) -> list[RunnerDeployment]:
    """The scheduled deployments (schedules from ``config``), then one on-demand deployment per flow.
    Entrypoints are module paths (``flows.expansion.expansion_round``): the installed package,
    wherever the process runs from."""
    module = EntrypointType.MODULE_PATH
    return [
        expansion_round.to_deployment(
            NIGHTLY, schedule=Cron(config.nightly_cron, timezone=config.timezone), description=DESCRIPTIONS[NIGHTLY],
            tags=["grace", "scheduled"], entrypoint_type=module,
        ),
        watch_inbox.to_deployment(
            INBOX_WATCHER, schedule=Interval(config.inbox_interval_s), parameters={"params": {}},
            description=DESCRIPTIONS[INBOX_WATCHER], tags=["grace", "scheduled"], entrypoint_type=module,
        ),
        maintain_lake.to_deployment(
            MAINTENANCE, schedule=Cron(config.maintenance_cron, timezone=config.timezone), parameters={"params": {}},
            description=DESCRIPTIONS[MAINTENANCE], tags=["grace", "scheduled"], entrypoint_type=module,
        ),
        *(f.to_deployment(name, description=text, tags=["grace", "on-demand"], entrypoint_type=module)
          for name, (f, text) in ON_DEMAND.items()),
    ]
