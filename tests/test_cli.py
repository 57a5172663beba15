"""The `grace` command as a user runs it: scoring files, clear errors, documented subcommands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import REPO

GRACE = str(Path(sys.executable).parent / "grace")


pytestmark = pytest.mark.e2e  # every test runs the grace console script as a subprocess

def grace(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([GRACE, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def subcommands() -> list[str]:
    import typer

    from flows.cli import _register, app

    _register()
    return sorted(typer.main.get_command(app).commands)


def test_every_subcommand_has_help_and_is_in_the_readme() -> None:
    cmds = subcommands()
    assert "score" in cmds and "demo" in cmds
    readme = (REPO / "README.md").read_text()
    for cmd in cmds:
        res = grace(cmd, "--help")
        assert res.returncode == 0 and "Usage" in res.stdout, cmd
        assert f"grace {cmd}" in readme, f"README does not document `grace {cmd}`"


def sample_edges(tmp_path: Path) -> Path:
    path = tmp_path / "edges.parquet"
    pl.read_csv(REPO / "flows" / "samples" / "sample_edges.csv").write_parquet(path)
    return path


def test_score_writes_one_row_per_claim(tmp_path: Path) -> None:
    out = tmp_path / "scores.parquet"
    res = grace("score", str(sample_edges(tmp_path)), str(out))
    assert res.returncode == 0, res.stderr
    scores = pl.read_parquet(out)
    assert scores.height == 13 and scores.select("doc_id", "claim_id").n_unique() == 13
    for col in ("closeness", "closeness_norm", "status", "betweenness", "novelty", "priority", "confidence"):
        assert col in scores.columns
    assert set(scores["status"]) == {"grounded", "boundary", "refuted"}
    assert "scored 13 claims in 2 documents" in res.stdout


def test_score_starts_without_the_orchestration_database_and_model_stacks(tmp_path: Path) -> None:
    """Start-up is most of ``grace score``'s time on a small file (benchmarks/bench_score_cli.py):
    scoring a file imports no Prefect (nor the flows), DuckDB, Delta or model library."""
    res = subprocess.run([GRACE, "score", str(sample_edges(tmp_path)), str(tmp_path / "s.parquet")], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert res.returncode == 0, res.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert "polars" in imported and "grace_core.centrality" in imported  # the import log is read right
    heavy = {"prefect", "duckdb", "deltalake", "litellm", "torch", "transformers", "sentence_transformers"}
    assert {m for m in imported if m.split(".")[0] in heavy} == set()


def test_score_options_change_the_weights(tmp_path: Path) -> None:
    edges = sample_edges(tmp_path)
    grace("score", str(edges), str(tmp_path / "a.parquet"))
    res = grace("score", str(edges), str(tmp_path / "b.parquet"), "--w-anchor", "6", "--w-contra", "0.1")
    assert res.returncode == 0, res.stderr
    a, b = pl.read_parquet(tmp_path / "a.parquet"), pl.read_parquet(tmp_path / "b.parquet")
    assert (a["closeness"] != b["closeness"]).any()


@pytest.mark.parametrize(
    "setup, expect",
    [
        (lambda p: pl.read_csv(REPO / "flows/samples/sample_edges.csv").drop("label").write_parquet(p), "missing column(s) label"),
        (lambda p: pl.read_csv(REPO / "flows/samples/sample_edges.csv").with_columns(source_kind=pl.lit("oracle")).write_parquet(p),
         "row 1: field 'source_kind' has unknown value 'oracle'"),
        (lambda p: p.write_bytes(b"not parquet at all"), "cannot read as Parquet"),
        (lambda p: None, "no such file"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_output(tmp_path: Path, setup, expect: str) -> None:
    edges, out = tmp_path / "edges.parquet", tmp_path / "out.parquet"
    setup(edges)
    res = grace("score", str(edges), str(out))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0] and str(edges) in lines[0], res.stderr
    assert not out.exists() and list(tmp_path.glob(".out.parquet*")) == []


def test_bad_weights_are_one_line_exit_2(tmp_path: Path) -> None:
    res = grace("score", str(sample_edges(tmp_path)), str(tmp_path / "o.parquet"), "--w-agree", "5")
    assert res.returncode == 2 and "w_anchor > w_agree" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_usage_errors_are_short_not_tracebacks() -> None:
    res = grace("no-such-command")
    assert res.returncode == 2 and "Traceback" not in res.stderr and "No such command" in res.stderr


def test_bad_weights_from_the_environment_are_refused(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "GRACE_W_CONTRA": "3"}
    res = subprocess.run([GRACE, "score", str(sample_edges(tmp_path)), str(tmp_path / "o.parquet")], capture_output=True, text=True, env=env)
    assert res.returncode == 2 and "contra=3.0" in res.stderr
