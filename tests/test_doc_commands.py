"""The commands the docs show work (issue 37, item 2): every code block of README.md and
docs/*.md is run here (:data:`RUN`) or listed in :data:`NOT_RUNNABLE` with the reason, and a
block that is neither fails the fast test below. Not code to run: ``text`` fences (transcripts
and file formats; the README's session is tests/test_readme.py's) and docs/design.md's indented
blocks (formulas).

The blocks run in bash in a temporary folder as a user's shell in a clone would: ``.venv/bin``
on the PATH, no GRACE_*/PREFECT_* variable (but the tests' GRACE_EMBED_PRECISION), links to the clone's ``flows/`` and ``.venv``, and
``./lake``, a copy of one demo lake that ``./dev demo`` (the README's first block) makes once per
session. Also here: docs/commands.md's row of each command names every option of its --help."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer
from markdown_it import MarkdownIt

from flows.cli import _register, app
from tests.conftest import REPO
from tests.test_cli_help import command_paths

_register()

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FORMULAS = "docs/design.md"
TIMEOUT_S = 900


@dataclass(frozen=True)
class Block:
    path: str
    line: int
    info: str
    text: str

    @property
    def key(self) -> tuple[str, str]:
        """(file, first line): what names a block in :data:`RUN` and :data:`NOT_RUNNABLE`."""
        return self.path, self.text.strip().splitlines()[0].strip()


@dataclass(frozen=True)
class Run:
    """How a block runs: as written, or with ``subs`` (regular expression → replacement, per
    line; ``{folder}`` is the test's folder) applied first, for the reason ``why``; in the test's
    folder with the .venv activated, or ``in_clone``: in the clone itself, with no .venv on the
    PATH (``./dev``)."""

    subs: dict[str, str] = field(default_factory=dict)
    why: str = ""
    in_clone: bool = False


def code_blocks() -> list[Block]:
    """Every code block of the docs that shows code to run (see the module docstring)."""
    md = MarkdownIt("commonmark")
    blocks = []
    for doc in DOCS:
        path = str(doc.relative_to(REPO))
        for tok in md.parse(doc.read_text(encoding="utf-8")):
            if (tok.type == "fence" and tok.info.strip() != "text") or (tok.type == "code_block" and path != FORMULAS):
                blocks.append(Block(path, tok.map[0] + 1, tok.info.strip(), tok.content))
    return blocks


DEMO_BLOCK = ("README.md", "./dev demo     # set-up on first run, then the main job on the embedded default (no keys, no servers)")

RUN: dict[tuple[str, str], Run] = {
    DEMO_BLOCK: Run({r"^\./dev test.*$": "", r"^\./dev demo": "./dev demo --lake {folder}/demo-lake"},
                    "`./dev test` is the whole suite, this test among it (CI runs it); the demo's lake goes to the test's folder",
                    in_clone=True),
    ("docs/commands.md", "KEY=$(grace reviewer add alice | tail -1)          # give it to alice"): Run(),
    ("docs/lake.md", "grace ingest flows/samples/qasper_demo.jsonl --prior-sections Abstract,Introduction"): Run(),
    ("docs/lake.md", "import json, polars as pl"): Run(),
    ("docs/lake.md", "grace backup /backups/lake-2025-06-01"): Run(
        {r"/backups/": "backups/", r"/srv/": "srv/"}, "the backup and the restored lake go to the test's folder, not /backups and /srv"),
    ("docs/pipeline.md", 'grace sql "SELECT round, cum_audited_grounded, cum_grounded_precision, cum_grounded_precision_low,'): Run(),
}
"""The blocks run by :func:`test_a_doc_block_runs`."""

BENCHMARK = "a benchmark: minutes to hours of CPU on this machine, run by hand for the figures beside it"
NOT_RUNNABLE: dict[tuple[str, str], str] = {
    ("docs/development.md", "OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.bench_scoring --docs 200"): BENCHMARK,
    ("docs/development.md", ".venv/bin/python -m benchmarks.bench_score_cli --docs 1000"): BENCHMARK,
    ("docs/development.md", ".venv/bin/python -m benchmarks.bench_scale --docs 1000 10000"): BENCHMARK,
    ("docs/development.md", ".venv/bin/python -m benchmarks.bench_pipeline --papers 20 100"): BENCHMARK,
    ("docs/development.md", ".venv/bin/python -m benchmarks.bench_model_stage --papers 5 --concurrency 1 8 32"): BENCHMARK,
    ("docs/evaluation.md", 'grace eval expansion --data "$GRACE_DATA_DIR/qasper/qasper_dev.jsonl" --rounds 3 '
                           "--consolidation-rounds 2 --workers 2 --out DIR"):
        "needs the full QASPER dev file (GRACE_DATA_DIR) and hours of CPU; tests/evaluation runs the protocol on tests/fixtures/",
    ("docs/evaluation.md", 'grace eval expansion --data "$GRACE_DATA_DIR/qasper/qasper_dev.jsonl" --half tuning --budget 3 --rounds 3 '
                           "--workers 2 --out DIR"):
        "needs the full QASPER dev file (GRACE_DATA_DIR) and minutes of CPU per half; tests/evaluation/test_budget_curve.py runs "
        "--half and a --budget sweep on tests/fixtures/",
    ("docs/evaluation.md", 'nice -n 10 grace eval qa --dataset qasper --data "$GRACE_DATA_DIR/qasper/qasper_dev.jsonl" --out DIR '
                           "--lake EVAL_LAKE"):
        "needs the full QASPER and QuALITY dev files (GRACE_DATA_DIR) and about an hour of CPU; tests/evaluation runs eval qa on "
        "tests/fixtures/",
    ("docs/lake.md", "$ grace migrate --lake old-lake"):
        "a transcript that needs a lake written by an earlier GRACE; tests/storage/test_migrate_rebuild.py writes one and migrates it",
    ("docs/lake.md", 'duckdb /mnt/laptop/lake/catalog.duckdb "SELECT * FROM round_metrics"'):
        "the duckdb command-line program on another machine with the lake mounted; neither is here",
    ("docs/lake.md", "# Python: deltalake / polars"):
        "DuckDB's delta extension, Spark and Trino cannot be installed here; the deltalake/polars read is tests/storage/test_travel.py",
    ("docs/pipeline.md", "prefect server start                                   # UI at http://127.0.0.1:4200"):
        "starts a Prefect server that runs until stopped; the tests start their own (tests/flows/conftest.py)",
    ("docs/pipeline.md", "GRACE_LAKE=/data/grace-lake GRACE_INBOX=/data/inbox grace serve"):
        "serves deployments until Ctrl-C, on a running Prefect server; tests/flows/test_deployments.py runs grace serve on the test server",
    ("docs/pipeline.md", "prefect work-pool create grace-process --type process"):
        "a work pool, deploy and a worker that runs until stopped, on a running Prefect server; tests/flows/test_deployments.py does it",
    ("docs/pipeline.md", "prefect deployment run 'expansion_round/expansion-round'"):
        "needs deployments served on a running Prefect server; tests/flows/test_deployments.py triggers runs of served deployments",
    ("docs/pipeline.md", "PREFECT_SERVER_API_AUTH_STRING='grace:a-long-random-password' prefect server start --host 0.0.0.0"):
        "a Prefect server open to the network, running until stopped",
    ("docs/pipeline.md", "export PREFECT_API_URL=http://SERVER:4200/api"):
        "needs a Prefect server on another machine (SERVER) with a login; tests/flows/test_api_exposure.py checks the login rule",
}
"""The blocks not run here, each with the reason."""


def test_every_code_block_of_the_docs_is_run_or_marked_not_runnable() -> None:
    keys = [b.key for b in code_blocks()]
    assert len(keys) == len(set(keys)), "two blocks start with the same line: tell them apart"
    unclassified = set(keys) - RUN.keys() - NOT_RUNNABLE.keys()
    assert not unclassified, f"code blocks neither run nor marked not runnable (add them to RUN or NOT_RUNNABLE): {sorted(unclassified)}"
    stale = (RUN.keys() | NOT_RUNNABLE.keys()) - set(keys)
    assert not stale, f"entries for blocks the docs no longer have: {sorted(stale)}"
    assert not RUN.keys() & NOT_RUNNABLE.keys()
    assert all(reason for reason in NOT_RUNNABLE.values())


def test_every_option_of_every_command_is_in_its_docs_commands_row() -> None:
    """docs/commands.md: the row of ``grace PATH`` (its first cell starts ``grace PATH``) names
    every long option ``grace PATH --help`` lists."""
    root = typer.main.get_command(app)
    paths = command_paths(root)
    rows: dict[tuple[str, ...], str] = {}
    for row in (REPO / "docs" / "commands.md").read_text(encoding="utf-8").splitlines():
        if m := re.match(r"\| `grace ([^`]*)`", row):
            words = m.group(1).split()
            path = max((p for p in paths if tuple(words[:len(p)]) == p), key=len)
            rows[path] = row
    for path in paths:
        cmd = root
        for name in path:
            cmd = cmd.commands[name]  # type: ignore[attr-defined]
        if hasattr(cmd, "commands") and path not in rows:  # a group without options of its own
            continue
        row = rows[path]
        missing = [opt for p in cmd.params if p.param_type_name == "option" for opt in p.opts
                   if opt.startswith("--") and opt != "--help" and not re.search(re.escape(opt) + r"(?![\w-])", row)]
        assert not missing, f"docs/commands.md: the row of `grace {' '.join(path)}` lacks {missing}"


def block(key: tuple[str, str]) -> Block:
    return next(b for b in code_blocks() if b.key == key)


def run_block(key: tuple[str, str], folder: Path) -> subprocess.CompletedProcess:
    """Run the block ``key`` (as :data:`RUN` says) in bash (or Python) in ``folder``, as a user's
    shell in a clone with the .venv activated."""
    b, how = block(key), RUN[key]
    text = b.text
    for pattern, replacement in how.subs.items():
        text = re.sub(pattern, replacement.replace("{folder}", str(folder)), text, flags=re.MULTILINE)
    venv = REPO / ".venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRACE_", "PREFECT_")) and k not in ("COLUMNS", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(venv)))
    # the tests' embedding precision (tests/conftest.py), not "auto": tests/storage recomputes from copies of the demo's lake
    env |= {"PREFECT_HOME": str(folder / ".prefect"), "COLUMNS": "120", "GRACE_EMBED_PRECISION": os.environ["GRACE_EMBED_PRECISION"]}
    if not how.in_clone:
        for name in ("flows", ".venv"):
            (folder / name).symlink_to(REPO / name)
        env |= {"PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(venv)}
    python = b.info == "python" or text.lstrip().startswith(("import ", "from "))
    argv = [str(REPO / ".venv" / "bin" / "python"), "-c", text] if python else ["bash", "-euo", "pipefail", "-c", text]
    return subprocess.run(argv, cwd=REPO if how.in_clone else folder, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL,
                          start_new_session=True)


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(RUN), ids=lambda k: f"{k[0]}:{k[1][:40]}")
def test_a_doc_block_runs(key: tuple[str, str], demo_run: tuple[Path, subprocess.CompletedProcess], tmp_path: Path) -> None:
    demo_folder, demo = demo_run
    if key == DEMO_BLOCK:
        done = demo
        assert "• round 2 done: " in done.stdout
        assert done.stdout.rstrip().endswith("grace is not on your PATH: `. .venv/bin/activate` puts it there "
                                             "(or run it as `./dev grace ARGS`).")
        assert '  ./dev grace sql --lake ' in done.stdout  # the hints in the form that works without it
        assert "| INFO" not in done.stderr and "docs/v3" not in done.stderr  # quiet: no Prefect line, no docs link
    else:
        shutil.copytree(demo_folder / "demo-lake", tmp_path / "lake")
        done = run_block(key, tmp_path)
    assert done.returncode == 0, f"{key[0]}: block {key[1]!r} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stdout + done.stderr
