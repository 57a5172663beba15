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


def test_every_help_text_is_clean_paragraphs_that_wrap_to_the_terminal() -> None:
    root = typer.main.get_command(app)
    for path in command_paths(root):
        cmd = root
        for name in path:
            cmd = cmd.commands[name]  # type: ignore[attr-defined]
        text = cmd.help or ""
        assert text, f"grace {' '.join(path)} has no help"
        assert all("\n" not in p and "  " not in p for p in text.split("\n\n")), f"grace {' '.join(path)}: hard-wrapped help {text!r}"
    wide = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).stdout
    narrow = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"}).stdout
    assert max(len(line) for line in wide.splitlines()) > 100, "the command list uses a wide terminal's width"
    assert max(len(line) for line in narrow.splitlines()) <= 80


def test_a_bug_is_one_line_with_the_traceback_in_a_file(tmp_path, monkeypatch, capsys) -> None:
    """An unexpected error (a bug, not a GraceError) reaches the terminal as one line naming it
    and the file holding its traceback, with exit status 70; never as a traceback."""
    import tempfile

    import flows.cli.lake as lake_commands
    from tests.grace_cli import run_grace

    def broken(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(lake_commands, "check_lake", broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the temporary folder, as TMPDIR sets it
    (tmp_path / "lake").mkdir()
    assert run_grace(monkeypatch, capsys, "ingest", str(REPO / "flows" / "samples" / "qasper_demo.jsonl"),
                     "--lake", str(tmp_path / "lake"))[0] == 0
    code, out, err = run_grace(monkeypatch, capsys, "check", "--lake", str(tmp_path / "lake"))
    assert code == 70 and out == ""
    assert err.count("\n") == 1 and err.startswith("grace: error: internal error (RuntimeError: boom second line); this is a bug")
    written = err.strip().rsplit(" ", 1)[1]
    assert written.startswith(str(tmp_path)) and "Traceback" in open(written).read() and "Traceback" not in err
