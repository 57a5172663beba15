"""``grace serve``: serve GRACE's deployments (the nightly expansion, the inbox watcher and one
deployment per flow) from this one process, with no work pool.

Who owns what: a deployment that ``prefect deploy`` put in a work pool belongs to that pool's
workers; serve leaves it alone (does not re-register, run or pause it) and says so. Stopping
serve leaves every schedule as it was: the deployments it served stay active, so their scheduled
runs wait (Late) until serve runs again, rather than stopping silently. They then run once, not
once per missed time: a scheduled deployment runs one run at a time and cancels a run due
meanwhile (deployments/definitions.py), so of the runs missed during the downtime, which serve
submits together, one runs and the others end Cancelled.

A server that answers without a login from an address other machines can reach gets a one-line
warning on stderr (:mod:`flows.api_exposure`); serve goes on: the server's login is the
operator's choice, and reviewer keys still guard the votes.
"""

from __future__ import annotations

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


@app.command()
def serve(
    limit: Optional[int] = typer.Option(None, min=1, help="Most flow runs at once (default: no limit)."),
) -> None:
    """Serve the deployments from this process until Ctrl-C: scheduled runs start on time (nightly
    expansion at GRACE_NIGHTLY_CRON in GRACE_TIMEZONE, inbox scan every GRACE_INBOX_INTERVAL_S
    seconds, lake maintenance at GRACE_MAINTENANCE_CRON) and runs triggered from the Prefect UI or `prefect deployment run` start at once.
    A deployment that `prefect deploy` put in a work pool is left to that pool's workers.
    Stopping serve pauses nothing; runs missed meanwhile run once at the restart (the others end
    Cancelled): leave --limit unset, or they may start one after another. Needs a Prefect server (`prefect server start`, then
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
    prefect_serve(*mine, limit=limit, pause_on_shutdown=False)
