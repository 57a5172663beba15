"""``grace reviewer``: the reviewer registry (:mod:`flows.reviewers`).

- ``grace reviewer add NAME``: register NAME and print their key, once, alone on the last line
  (``KEY=$(grace reviewer add alice | tail -1)``);
- ``grace reviewer revoke NAME``: their key proves nothing from now on;
- ``grace reviewer list``: every key of every reviewer, when added and revoked (no secrets).
"""

from __future__ import annotations

from typing import Optional

import typer

from flows.cli import LAKE_HELP, app
from flows.cli.result_text import HeldRows, OutputFormat, render
from flows.reviewers import register, registry, revoke
from flows.runtime import timestamp
from flows.settings import build_settings
from storage.lake import Lake

reviewer_app = typer.Typer(help="The reviewers who may vote, each proven by a key: add, revoke, list.", no_args_is_help=True)
app.add_typer(reviewer_app, name="reviewer")


@reviewer_app.command("add")
def add(
    name: str = typer.Argument(..., help="The reviewer's name (a safe id: letters, digits and . _ : @ + -)."),
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
) -> None:
    """Register NAME and print their new key alone on the last line, this once: the lake keeps
    only a salted hash of it. Give it to the reviewer; they type it when `grace review` asks, or
    set GRACE_REVIEWER_KEY, and sign their verdict files with it (`grace review sign`). A name
    registered already, or the verifier's, is refused (exit code 2)."""
    target = Lake.open(build_settings(lake=lake))
    key = register(target, name, timestamp(None))
    typer.echo(f"reviewer {name} registered in lake {target.uri}.")
    typer.echo("Their key, shown only now (keep it secret; GRACE_REVIEWER_KEY or type it when asked):")
    typer.echo(key)


@reviewer_app.command("revoke")
def revoke_key(
    name: str = typer.Argument(..., help="A registered reviewer."),
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
) -> None:
    """Revoke NAME's key: from now on it proves nothing in the terminal or the Prefect UI, and
    files signed with it are refused; the votes stored before stay. `grace reviewer add NAME`
    gives them a new key. An unknown or revoked name is refused (exit code 2)."""
    target = Lake.open(build_settings(lake=lake), must_exist=True)
    key_id = revoke(target, name, timestamp(None))
    typer.echo(f"reviewer {name}: key {key_id} revoked in lake {target.uri}")


@reviewer_app.command("list")
def list_reviewers(
    lake: Optional[str] = typer.Option(None, "--lake", help=LAKE_HELP),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", help="Output format."),
) -> None:
    """Every key of every reviewer: reviewer, key_id, added_at and revoked_at (empty while the
    reviewer is registered). No key, salt or hash is shown."""
    target = Lake.open(build_settings(lake=lake), must_exist=True)
    table = registry(target)
    typer.echo(render(HeldRows(table.columns, table.rows()), fmt), nl=False)
