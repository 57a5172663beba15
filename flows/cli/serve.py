"""``grace serve``: serve every GRACE deployment (the nightly expansion, the inbox watcher and
an on-demand deployment per flow) from this one process, with no work pool."""

from __future__ import annotations

from typing import Optional

import typer

from flows.cli import app
from grace_core.errors import InvalidSettings


@app.command()
def serve(
    limit: Optional[int] = typer.Option(None, min=1, help="Most flow runs at once (default: no limit)."),
) -> None:
    """Serve all deployments from this process until Ctrl-C: scheduled runs start on time (nightly
    expansion at GRACE_NIGHTLY_CRON in GRACE_TIMEZONE, inbox scan every GRACE_INBOX_INTERVAL_S
    seconds) and runs triggered from the Prefect UI or `prefect deployment run` start at once.
    Needs a Prefect server (`prefect server start`, then PREFECT_API_URL=http://127.0.0.1:4200/api).
    Runs read the other settings (GRACE_LAKE, GRACE_BACKEND, …) from this process's environment."""
    from prefect import serve as prefect_serve
    from prefect.settings import get_current_settings

    from deployments.definitions import grace_deployments
    from flows.settings import build_settings

    if not get_current_settings().api.url:
        raise InvalidSettings(
            "no Prefect server to serve to: run `prefect server start`, then set "
            "PREFECT_API_URL=http://127.0.0.1:4200/api (a temporary server could not be reached from the UI or the CLI)"
        )
    prefect_serve(*grace_deployments(build_settings()), limit=limit)
