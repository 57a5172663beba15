"""``grace serve``: serve GRACE's deployments (the nightly expansion, the inbox watcher and one
deployment per flow) from this one process, with no work pool.

Who owns what: a deployment that ``prefect deploy`` put in a work pool belongs to that pool's
workers; serve leaves it alone (does not re-register, run or pause it) and says so. Stopping
serve leaves every schedule as it was: the deployments it served stay active, so their scheduled
runs wait (Late) until serve runs again, rather than stopping silently. They then run once, not
once per missed time: before serving, serve cancels all but the last of each schedule's missed
runs as superseded (:func:`collapse_missed`), and a scheduled deployment runs one run at a time,
cancelling a run due meanwhile (deployments/definitions.py), which also covers a downtime of the
server while serve ran.

A server that answers without a login from an address other machines can reach gets a one-line
warning on stderr (:mod:`flows.api_exposure`); serve goes on: the server's login is the
operator's choice, and reviewer keys still guard the votes.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional

import typer

from flows.cli import app
from grace_core.errors import InvalidSettings


def pool_owned(deployments: list) -> dict[str, str]:
    """``flow/name`` → work pool, for each of ``deployments`` that the server has in a work pool."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    owned = {}
    with get_client(sync_client=True) as client:
        for d in deployments:
            name = f"{d.flow_name}/{d.name}"
            try:
                existing = client.read_deployment_by_name(name)
            except ObjectNotFound:
                continue
            if existing.work_pool_name:
                owned[name] = existing.work_pool_name
    return owned


def collapse_missed(deployments: list) -> list[str]:
    """Of each scheduled deployment's runs missed while nothing served it (auto-scheduled, still
    Scheduled or Late, due before now), keep the last and cancel the others as superseded (state
    Cancelled, named "Superseded", its message naming the run that replaces it); one line per
    deployment that had several. Done before serving, so a restart runs each schedule once even
    when ``--limit`` would start the missed runs one after another."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter, DeploymentFilterId, FlowRunFilter, FlowRunFilterExpectedStartTime, FlowRunFilterState, FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort
    from prefect.exceptions import ObjectNotFound
    from prefect.states import Cancelled

    due = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])),
                        expected_start_time=FlowRunFilterExpectedStartTime(before_=datetime.now(timezone.utc)))
    lines = []
    with get_client(sync_client=True) as client:
        for d in (d for d in deployments if d.schedules):
            name = f"{d.flow_name}/{d.name}"
            try:
                existing = client.read_deployment_by_name(name)
            except ObjectNotFound:
                continue
            runs = client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[existing.id])), flow_run_filter=due,
                                         sort=FlowRunSort.EXPECTED_START_TIME_DESC)
            last, *older = [r for r in runs if r.auto_scheduled] or [None]
            for run in older:
                client.set_flow_run_state(run.id, Cancelled(name="Superseded", message=(
                    f"superseded: missed while nothing served {name}; the run due {last.expected_start_time:%Y-%m-%d %H:%M:%S %Z} "
                    f"({last.name}) runs instead")), force=True)
            if older:
                lines.append(f"{name}: {len(older) + 1} runs missed while nothing served it: the last one runs now, "
                             f"{len(older)} cancelled as superseded")
    return lines


@app.command()
def serve(
    limit: Optional[int] = typer.Option(None, min=1, help="Most flow runs at once (default: no limit)."),
) -> None:
    """Serve the deployments from this process until Ctrl-C: scheduled runs start on time (nightly
    expansion at GRACE_NIGHTLY_CRON in GRACE_TIMEZONE, inbox scan every GRACE_INBOX_INTERVAL_S
    seconds, lake maintenance at GRACE_MAINTENANCE_CRON) and runs triggered from the Prefect UI or `prefect deployment run` start at once.
    A deployment that `prefect deploy` put in a work pool is left to that pool's workers.
    Stopping serve pauses nothing; of the runs a schedule missed meanwhile, the last runs at the
    restart and the others end Cancelled (Superseded). Needs a Prefect server (`prefect server start`, then
    PREFECT_API_URL=http://127.0.0.1:4200/api). Runs read the other settings (GRACE_LAKE,
    GRACE_BACKEND, …) from this process's environment. Warns (and goes on) when that server
    answers without a login on an address other machines can reach (PREFECT_SERVER_API_AUTH_STRING)."""
    from prefect import serve as prefect_serve
    from prefect.settings import get_current_settings

    from deployments.definitions import grace_deployments
    from flows.api_exposure import answers_without_login, exposure_warning
    from flows.settings import build_settings

    api = get_current_settings().api
    if not api.url:
        raise InvalidSettings(
            "no Prefect server to serve to: run `prefect server start`, then set "
            "PREFECT_API_URL=http://127.0.0.1:4200/api (a temporary server could not be reached from the UI or the CLI)"
        )
    warning = exposure_warning(api.url, answers_without_login(api.url), api.auth_string is not None)
    if warning:
        typer.echo(warning, err=True)
    deployments = grace_deployments(build_settings())
    owned = pool_owned(deployments)
    for name, pool in owned.items():
        typer.echo(f"not serving {name}: it belongs to work pool {pool!r} (prefect deploy); that pool's workers run it", err=True)
    mine = [d for d in deployments if f"{d.flow_name}/{d.name}" not in owned]
    if not mine:
        raise InvalidSettings("every GRACE deployment belongs to a work pool: start a worker (prefect worker start --pool ...) instead")
    for line in collapse_missed(mine):
        typer.echo(line, err=True)
    prefect_serve(*mine, limit=limit, pause_on_shutdown=False)
