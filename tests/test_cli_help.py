"""Every ``grace`` subcommand, nested ones included, answers ``--help`` in process and is
documented in the README (one line each) and in docs/commands.md."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from flows.cli import _register, app
from tests.conftest import REPO

_register()


def command_paths(group: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path under a click group (typer's groups have ``commands``)."""
    out = []
    for name, cmd in sorted(group.commands.items()):  # type: ignore[attr-defined]
        out.append((*prefix, name))
        if hasattr(cmd, "commands"):
            out += command_paths(cmd, (*prefix, name))
    return out


def test_every_subcommand_answers_help_and_is_documented() -> None:
    paths = command_paths(typer.main.get_command(app))
    assert ("review", "ingest") in paths and ("eval", "expansion") in paths and ("round",) in paths
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    commands = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
    runner = CliRunner()
    for path in paths:
        res = runner.invoke(app, [*path, "--help"])
        assert res.exit_code == 0 and "Usage" in res.stdout, path
        assert f"grace {path[0]}" in readme, f"README does not name `grace {path[0]}`"
        assert f"grace {' '.join(path)}" in commands, f"docs/commands.md does not document `grace {' '.join(path)}`"
