"""``grace ARGS`` in process through its real entry point (``flows.cli.main``), for CLI tests."""

from __future__ import annotations

import sys

import pytest

from flows.cli import main


def run_grace(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    """Run ``grace ARGS``; returns (exit code, stdout, stderr). A bug in the command is exit code
    70 with one ``internal error`` line naming the file that holds its traceback (``main``)."""
    monkeypatch.setattr(sys, "argv", ["grace", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err
