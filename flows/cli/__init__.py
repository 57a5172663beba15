"""The ``grace`` command. Each subcommand lives in a module named for what it does; domain
errors become one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import sys

import typer

from grace_core.errors import GraceError

app = typer.Typer(
    name="grace",
    help="GRACE: grow a trusted knowledge base out of LLM output with experts in the loop.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    from flows.cli import ask, demo, eval, lake, review, scoring, serve  # noqa: F401  (each module registers its commands on `app`)


def main() -> None:
    """Entry point of the ``grace`` console command."""
    _register()
    try:
        app()  # usage errors are reported by click itself (exit code 2)
    except GraceError as exc:
        print(f"grace: error: {exc}", file=sys.stderr)
        sys.exit(2)
