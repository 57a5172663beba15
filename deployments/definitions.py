"""GRACE's deployments: names, schedules and tags only; what runs is in ``flows/``.

- ``expansion_round/nightly-expansion``: one expansion round on the nightly cron schedule;
- ``watch_inbox/inbox-watcher``: a scan of the batch inbox at a fixed interval;
- ``<flow>/on-demand`` for every flow: no schedule, run from the UI or ``prefect deployment run``
  with the flow's typed parameters (the UI renders them as a form and validates them).

``grace serve`` serves them all from one process; ``prefect.yaml`` declares the same
deployments for a ``process`` work pool (``prefect deploy --all``).
"""

from __future__ import annotations

from prefect.deployments.runner import RunnerDeployment
from prefect.schedules import Cron, Interval
from prefect.types.entrypoint import EntrypointType

from deployments.config import ScheduleConfig
from flows.build import build_graphs
from flows.expansion import expansion_round
from flows.ingest import ingest_batch, watch_inbox
from flows.review import dispatch_reviews, ingest_verdicts
from flows.review_ui import review_packet
from flows.score import score_round

NIGHTLY = "nightly-expansion"
INBOX_WATCHER = "inbox-watcher"
ON_DEMAND = "on-demand"
ON_DEMAND_FLOWS = (ingest_batch, build_graphs, score_round, dispatch_reviews, ingest_verdicts, expansion_round, review_packet)


def grace_deployments(config: ScheduleConfig) -> list[RunnerDeployment]:
    """The scheduled deployments (schedules from ``config``), then one on-demand deployment per flow.
    Entrypoints are module paths (``flows.expansion.expansion_round``): the installed package,
    wherever the process runs from."""
    module = EntrypointType.MODULE_PATH
    return [
        expansion_round.to_deployment(
            NIGHTLY, schedule=Cron(config.nightly_cron, timezone=config.timezone),
            tags=["grace", "scheduled"], entrypoint_type=module,
        ),
        watch_inbox.to_deployment(
            INBOX_WATCHER, schedule=Interval(config.inbox_interval_s), parameters={"params": {}},
            tags=["grace", "scheduled"], entrypoint_type=module,
        ),
        *(f.to_deployment(ON_DEMAND, tags=["grace", ON_DEMAND], entrypoint_type=module) for f in ON_DEMAND_FLOWS),
    ]
