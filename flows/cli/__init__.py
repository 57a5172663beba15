"""The ``grace`` command. Each subcommand lives in a module named for what it does; domain
errors, bad settings and usage errors become one line on stderr and exit code 2, never a
traceback or a box."""

from __future__ import annotations

import gc
import inspect
import re
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer
from pydantic import ValidationError

from grace_core.errors import GraceError

app = typer.Typer(
    name="grace",
    help="GRACE: grow a trusted knowledge base out of LLM output with experts in the loop.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


LAKE_HELP = "Lake root: a folder or s3://bucket/prefix (default: the GRACE_LAKE setting, else ./lake)."
"""The help of every command's ``--lake`` option."""

ONE_MODULE = {"score": "scoring", "ask": "ask", "sql": "sql", "check": "lake"}
"""Commands whose start-up imports only their own module (:func:`_register`)."""


def _register(argv: list[str] | None = None) -> None:
    """Register the commands on ``app``: all of them, or only those of the module of the
    command ``argv`` names when it is in :data:`ONE_MODULE` (``grace score`` then imports no
    Prefect or DuckDB, benchmarks/bench_score_cli.py; ``grace ask``, ``sql`` and ``check`` no
    Prefect, nor the other commands' modules)."""
    if argv is not None and argv[:1] and argv[0] in ONE_MODULE:
        import importlib

        importlib.import_module(f"flows.cli.{ONE_MODULE[argv[0]]}")
    else:
        from flows.cli import ask, demo, eval, lake, report, review, reviewer, round, scoring, serve, sql  # noqa: F401  (each module registers its commands on `app`)

    _unwrap_help(app)


@contextmanager
def lifelong_objects() -> Iterator[None]:
    """For a block that makes objects living as long as the process (imports: modules, classes,
    typer's, pydantic's and numba's tables): the cyclic garbage collector is off meanwhile, and
    what the block made is frozen after it, so no later collection, nor the ones at exit, walks
    it again. Those passes were ≈ 0.3 s CPU of a 2 s ``grace score``."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def paragraphs(text: str) -> str:
    """``text`` (a docstring) as paragraphs of one line each, separated by a blank line."""
    return "\n\n".join(" ".join(p.split()) for p in re.split(r"\n\s*\n", inspect.cleandoc(text)) if p.strip())


def _unwrap_help(group: typer.Typer) -> None:
    """Give every command of ``group`` (nested groups included) its docstring as clean
    paragraphs, so help texts and the command list wrap to the terminal, not to the source."""
    for info in group.registered_commands:
        text = info.help or (info.callback.__doc__ if info.callback else None)
        if text:
            info.help = paragraphs(text)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _unwrap_help(sub.typer_instance)


def _error(message: str, code: int = 2) -> int:
    """Print ``message`` as grace's one-line error; ``code`` is the exit status to give."""
    print(f"grace: error: {message}", file=sys.stderr)
    return code


def main() -> None:
    """Entry point of the ``grace`` console command. It exits outside the handlers below, so
    the error's traceback (whose frames hold the failed command's tables and scans) is freed
    while the libraries that made them are still up."""
    with lifelong_objects():
        _register(sys.argv[1:])
    code: int | str | None = 0
    try:
        code = typer.main.get_group(app)(standalone_mode=False)  # a group even when only `score` is registered
    except typer.TyperException as exc:  # click's usage errors: unknown command or option, a value of the wrong type
        if type(exc).__name__ == "NoArgsIsHelpError":  # `grace` alone: the help is printed already
            code = 2
        else:
            ctx = getattr(exc, "ctx", None)
            hint = f" (see {ctx.command_path} --help)" if ctx is not None and getattr(exc, "exit_code", 1) == 2 else ""
            code = _error(" ".join(exc.format_message().split()) + hint, getattr(exc, "exit_code", 2))
    except typer.Abort:
        code = _error("aborted", 1)
    except GraceError as exc:
        code = _error(" ".join(str(exc).splitlines()))
    except ValidationError as exc:  # a model built from user input outside the settings
        from flows.settings import validation_message

        code = _error(validation_message(exc))
    except Exception as exc:  # a bug: one line on the terminal, the traceback in a file for the report
        code = _error(f"internal error ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); this is a bug in grace, "
                      f"its traceback is in {_traceback_file(exc)}", INTERNAL_ERROR)
    sys.exit(code if isinstance(code, int) else 0)


INTERNAL_ERROR = 70
"""Exit status of an unexpected error (a bug), EX_SOFTWARE of sysexits.h."""


def _traceback_file(exc: BaseException) -> str:
    """Write ``exc``'s traceback to a new file in the temporary folder; its path."""
    import tempfile
    import traceback

    fd, path = tempfile.mkstemp(prefix="grace-traceback-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(f"grace {' '.join(sys.argv[1:])}\n\n")
        fh.write("".join(traceback.format_exception(exc)))
    return path
