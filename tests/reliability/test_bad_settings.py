"""Bad settings and careless ``grace score`` runs (issue 11, item 6), through the real ``grace``
entry point: every bad setting, from the environment or from an option, is one line naming
the setting and the problem, exit code 2, no traceback; a refused ``grace score`` leaves no
output file behind. The value of a secret setting is never printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import REPO
from tests.grace_cli import run_grace

pytestmark = pytest.mark.reliability

EDGES = REPO / "flows" / "samples" / "sample_edges.csv"
SAMPLE = REPO / "flows" / "samples" / "qasper_demo.jsonl"
API_KEY = "sk-SETTINGSMARKER-51d0"

# (GRACE_ variable, value, words the one error line must hold)
ENV_PROBES: list[tuple[str, str, tuple[str, ...]]] = [
    ("GRACE_BUDGET", "abc", ("valid number", "'abc'")),
    ("GRACE_BUDGET", "-3", ("greater than or equal to 0", "'-3'")),
    ("GRACE_BUDGET", "nan", ("finite number",)),
    ("GRACE_BUDGET", "inf", ("finite number",)),
    ("GRACE_K", "nan", ("finite number",)),
    ("GRACE_K", "0", ("greater than 0",)),
    ("GRACE_K", "-inf", ("finite number",)),
    ("GRACE_LAMBDA_C", "nan", ("finite number",)),
    ("GRACE_LAMBDA_C", "-1", ("greater than or equal to 0",)),
    ("GRACE_LAMBDA_N", "inf", ("finite number",)),
    ("GRACE_DELTA", "-5", ("greater than or equal to 0",)),
    ("GRACE_DELTA", "2", ("less than or equal to 1",)),
    ("GRACE_DELTA", "nan", ("finite number",)),
    ("GRACE_DELTA_REFUTE", "nan", ("finite number",)),
    ("GRACE_DELTA_REFUTE", "-0.1", ("greater than or equal to 0",)),
    ("GRACE_W_ANCHOR", "inf", ("finite number",)),
    ("GRACE_W_ANCHOR", "nan", ("finite number",)),
    ("GRACE_W_CONTRA", "3", ("w_anchor > w_agree > w_neutral > w_contra > 0",)),
    ("GRACE_W_CONTRA", "0", ("w_anchor > w_agree > w_neutral > w_contra > 0",)),
    ("GRACE_EPSILON", "0", ("greater than 0",)),
    ("GRACE_ALPHA", "1.5", ("less than or equal to 1",)),
    ("GRACE_MU", "-1", ("greater than or equal to 0",)),
    ("GRACE_REVIEW_SECONDS", "nan", ("finite number",)),
    ("GRACE_QUORUM", "0", ("greater than or equal to 1",)),
    ("GRACE_QUORUM", "1.5", ("valid integer",)),
    ("GRACE_TEMPERATURE", "nan", ("finite number",)),
    ("GRACE_SPEND_CAP_USD", "-1", ("greater than or equal to 0",)),
    ("GRACE_SPEND_CAP_USD", "nan", ("finite number",)),
    ("GRACE_REQUEST_TIMEOUT_S", "inf", ("finite number",)),
    ("GRACE_CONCURRENCY", "0", ("greater than or equal to 1",)),
    ("GRACE_DEADLINE_HOURS", "nan", ("finite number",)),
    ("GRACE_INBOX_INTERVAL_S", "0", ("greater than or equal to 1",)),
    ("GRACE_HALLUCINATION_RATE", "2", ("less than or equal to 1",)),
    ("GRACE_BACKEND", "magic", ("'offline' or 'litellm'",)),
    ("GRACE_TASK_RUNNER", "spark", ("'thread' or 'dask'",)),
    ("GRACE_REVIEWERS", "alice", ("not valid JSON",)),
    ("GRACE_PRIOR_SECTIONS", "[Abstract", ("not valid JSON",)),
    ("GRACE_SQL_TIMEOUT_S", "0", ("greater than 0",)),
    ("GRACE_SQL_TIMEOUT_S", "nan", ("finite number",)),
    ("GRACE_SQL_MEMORY_LIMIT", "lots", ("should match pattern", "'lots'")),
    ("GRACE_SQL_MEMORY_LIMIT", "0GB", ("should match pattern",)),
    ("GRACE_SQL_THREADS", "0", ("greater than or equal to 1",)),
    ("GRACE_NIGHTLY_CRON", "every night", ("GRACE_NIGHTLY_CRON",)),
    ("GRACE_MAINTENANCE_CRON", "0 5 * * 8", ("GRACE_MAINTENANCE_CRON", "Invalid cron string")),
    ("GRACE_VACUUM_RETENTION_HOURS", "0", ("greater than or equal to 1",)),
]

# (options of `grace score`, the option's name, words the line must hold)
OPTION_PROBES: list[tuple[tuple[str, ...], str, tuple[str, ...]]] = [
    (("--k", "nan"), "--k", ("finite number",)),
    (("--k", "0"), "--k", ("greater than 0",)),
    (("--k", "abc"), "--k", ("valid number",)),
    (("--w-anchor", "inf"), "--w-anchor", ("finite number",)),
    (("--w-agree", "5"), "w_anchor > w_agree", ()),
    (("--delta", "2"), "--delta", ("less than or equal to 1",)),
    (("--delta", "-inf"), "--delta", ("finite number",)),
    (("--delta-refute", "nan"), "--delta-refute", ("finite number",)),
    (("--lambda-c", "-1"), "--lambda-c", ("greater than or equal to 0",)),
    (("--lambda-n", "inf"), "--lambda-n", ("finite number",)),
]


grace = run_grace


def refused(code: int, out: str, err: str, *words: str) -> None:
    assert "Traceback" not in out + err, err
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and err.startswith("grace: error: "), err
    for word in words:
        assert word in err, (word, err)
    assert API_KEY not in out + err


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GRACE_ setting from the caller's environment; a secret to keep quiet."""
    for key in [k for k in os.environ if k.startswith("GRACE_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("GRACE_API_KEY", API_KEY)


@pytest.mark.parametrize("var, value, words", ENV_PROBES, ids=[f"{v}={x}" for v, x, _ in ENV_PROBES])
def test_bad_setting_from_the_environment(var: str, value: str, words: tuple[str, ...], tmp_path: Path,
                                          monkeypatch, capsys, tally) -> None:
    monkeypatch.setenv(var, value)
    out_file = tmp_path / "scores.parquet"
    code, out, err = grace(monkeypatch, capsys, "score", str(EDGES), str(out_file))
    tally("bad settings").record(clear_error=code == 2 and err.count("\n") == 1 and var in err,
                                 traceback="Traceback" in out + err, got_through=code == 0)
    refused(code, out, err, var, *words)
    assert not out_file.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("options, name, words", OPTION_PROBES, ids=[" ".join(o) for o, _, _ in OPTION_PROBES])
def test_bad_setting_from_an_option(options: tuple[str, ...], name: str, words: tuple[str, ...], tmp_path: Path,
                                    monkeypatch, capsys, tally) -> None:
    out_file = tmp_path / "scores.parquet"
    code, out, err = grace(monkeypatch, capsys, "score", str(EDGES), str(out_file), *options)
    tally("bad settings").record(clear_error=code == 2 and err.count("\n") == 1 and name in err,
                                 traceback="Traceback" in out + err, got_through=code == 0)
    refused(code, out, err, name, *words)
    assert not out_file.exists() and list(tmp_path.iterdir()) == []


def test_every_bad_setting_is_named_on_the_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("GRACE_BUDGET", "abc")
    monkeypatch.setenv("GRACE_K", "nan")
    code, out, err = grace(monkeypatch, capsys, "score", str(EDGES), str(tmp_path / "o.parquet"), "--delta", "7")
    refused(code, out, err, "GRACE_BUDGET: input should be a valid number", "GRACE_K: input should be a finite number",
            "--delta: input should be less than or equal to 1, got 7.0")


def test_inf_weights_no_longer_refute_everything(tmp_path: Path, monkeypatch, capsys) -> None:
    """The issue's `--w-anchor inf` used to be accepted and made every response claim Refuted;
    a large finite weight still scores normally."""
    out_file = tmp_path / "scores.parquet"
    code, out, err = grace(monkeypatch, capsys, "score", str(EDGES), str(out_file), "--w-anchor", "1e6")
    assert code == 0, err
    assert set(pl.read_parquet(out_file)["status"]) != {"refuted"}


# The commands that read settings, each with arguments that get it to building them.
def command_args(tmp_path: Path) -> dict[str, list[str]]:
    lake = str(tmp_path / "lake")
    return {
        "score": ["score", str(EDGES), str(tmp_path / "o.parquet")],
        "sql": ["sql", "SELECT 1", "--lake", lake],
        "ingest": ["ingest", str(SAMPLE), "--lake", lake],
        "vacuum": ["vacuum", "--lake", lake],
        "ask": ["ask", "What is it?", "--lake", lake],
        "review": ["review", "--reviewer", "alice", "--lake", lake],
        "review ingest": ["review", "ingest", str(tmp_path / "v.csv"), "--lake", lake],
        "review export": ["review", "export", "--lake", lake],
        "review sign": ["review", "sign", str(tmp_path / "v.csv"), "--reviewer", "alice", "--lake", lake],
        "reviewer add": ["reviewer", "add", "alice", "--lake", lake],
        "reviewer revoke": ["reviewer", "revoke", "alice", "--lake", lake],
        "reviewer list": ["reviewer", "list", "--lake", lake],
        "eval qa": ["eval", "qa", "--dataset", "qasper", "--data", str(SAMPLE), "--out", str(tmp_path / "r"), "--lake", lake],
        "eval expansion": ["eval", "expansion", "--data", str(SAMPLE), "--out", str(tmp_path / "r"), "--lake", lake],
        "demo": ["demo", "--lake", lake, "--rounds", "1"],
    }


@pytest.mark.parametrize("command", list(command_args(Path("x"))))
def test_every_command_refuses_a_bad_setting_in_one_line(command: str, tmp_path: Path, monkeypatch, capsys, tally) -> None:
    (tmp_path / "v.csv").write_text("claim_id,reviewer,verdict\nc1,alice,confirm\n")
    monkeypatch.setenv("GRACE_BUDGET", "abc")
    code, out, err = grace(monkeypatch, capsys, *command_args(tmp_path)[command])
    tally("bad settings").record(clear_error=code == 2 and "GRACE_BUDGET" in err, traceback="Traceback" in out + err,
                                 got_through=code == 0)
    refused(code, out, err, "GRACE_BUDGET: input should be a valid number")
    assert not (tmp_path / "lake").exists() and not (tmp_path / "r").exists()


def test_the_reviewer_key_is_not_a_setting(monkeypatch) -> None:
    """GRACE_REVIEWER_KEY is read by `grace review` itself: the settings neither refuse it nor
    carry it (so it never reaches a flow's parameters or a log of the settings)."""
    from flows.settings import build_settings

    monkeypatch.setenv("GRACE_REVIEWER_KEY", "grk_not-a-setting")
    settings = build_settings()
    assert "grk_not-a-setting" not in settings.model_dump_json()


@pytest.mark.e2e
def test_serve_refuses_a_bad_setting_in_one_line(tmp_path: Path) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GRACE_")}, "GRACE_K": "nan",
           "GRACE_API_KEY": API_KEY, "PREFECT_API_URL": "http://127.0.0.1:9/api", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", "serve"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    refused(done.returncode, done.stdout, done.stderr, "GRACE_K: input should be a finite number")


def test_a_run_option_out_of_range_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    """`grace demo --budget nan` fails in the flow parameters' own model, before the settings."""
    code, out, err = grace(monkeypatch, capsys, "demo", "--lake", str(tmp_path / "lake"), "--budget", "nan")
    refused(code, out, err, "budget")
    assert not (tmp_path / "lake").exists()


# Extreme but valid-looking values (issue "Nothing silently wrong", item 7): each one line, exit 2,
# where it once was a traceback, a thread traceback with an unlimited run, or the current folder
# silently taken for the lake. (variable, value, command key of command_args, words of the line)
EXTREME_PROBES: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("GRACE_SQL_TIMEOUT_S", "1e300", "sql", ("less than or equal to 86400",)),
    ("GRACE_SQL_MEMORY_LIMIT", "99999999999TB", "sql", ("must be between 16MB and 1000TB",)),
    ("GRACE_SQL_MEMORY_LIMIT", "1KB", "sql", ("must be between 16MB and 1000TB",)),
    ("GRACE_VACUUM_RETENTION_HOURS", str(10**12), "vacuum", ("less than or equal to 87660",)),
    ("GRACE_DASK_ADDRESS", "tcp://scheduler:99999", "sql", ("port in 1-65535",)),
    ("GRACE_DASK_ADDRESS", "not an address", "sql", ("expected a Dask scheduler address",)),
    ("GRACE_LAKE", "", "sql", ("must not be empty",)),
    ("GRACE_LAKE", " ", "ingest", ("must not be empty",)),
    ("GRACE_CATALOG_CACHE", "", "sql", ("must not be empty",)),
    ("GRACE_S3_ENDPOINT_URL", "", "ingest", ("must not be empty",)),
    ("GRACE_INBOX_INTERVAL_S", str(10**12), "sql", ("less than or equal to 604800",)),
    ("GRACE_W_ANCHOR", "1e300", "score", ("less than or equal to 1000000",)),
    ("GRACE_K", "1e300", "score", ("less than or equal to 1000000",)),
    ("GRACE_REVIEW_SECONDS", "1e300", "score", ("less than or equal to 86400",)),
    ("GRACE_BUDGET", "1e300", "sql", ("less than or equal to 1000000000",)),
    ("GRACE_AUDIT_GROUNDED", str(10**12), "sql", ("less than or equal to 1000000",)),
    ("GRACE_QUORUM", "9" * 40, "sql", ("less than or equal to 1000",)),
    ("GRACE_SCORE_TASKS_AT_ONCE", str(10**12), "sql", ("less than or equal to 1024",)),
    ("GRACE_MAX_BATCH_BYTES", "9" * 40, "ingest", ("less than or equal to 4294967296",)),
    ("GRACE_MAX_JSON_VALUES", str(10**12), "ingest", ("less than or equal to 100000000",)),
    ("GRACE_MAX_QUESTIONS", "-1", "ingest", ("greater than 0",)),
]


@pytest.mark.parametrize("var, value, command, words", EXTREME_PROBES, ids=[f"{v}={x[:20]}" for v, x, _, _ in EXTREME_PROBES])
def test_an_extreme_setting_is_one_line(var: str, value: str, command: str, words: tuple[str, ...], tmp_path: Path,
                                        monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(var, value)
    args = command_args(tmp_path)[command]
    if var == "GRACE_LAKE":  # no --lake: the setting is the lake
        args = args[:args.index("--lake")] + args[args.index("--lake") + 2:]
    code, out, err = grace(monkeypatch, capsys, *args)
    refused(code, out, err, var, *words)
    assert list(tmp_path.iterdir()) == [], "nothing written: no lake, no output, not in the current folder"


def test_an_empty_lake_option_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = grace(monkeypatch, capsys, "ingest", str(SAMPLE), "--lake", "")
    refused(code, out, err, "--lake: must not be empty")
    assert list(tmp_path.iterdir()) == []


def test_every_numeric_setting_has_a_ceiling() -> None:
    """1e300 for each float setting and 10**40 for each int one: refused in one line naming it,
    except the few where any size is harmless."""
    from typing import get_args

    from flows.settings import GraceSettings, build_settings
    from grace_core.errors import InvalidSettings

    unbounded = {"seed"}  # ModelConfig (grace_core/models/config.py): any integer seeds the offline roles
    accepted = []
    for name, field in GraceSettings.model_fields.items():
        kinds = {field.annotation, *get_args(field.annotation)}
        if bool in kinds or not kinds & {int, float}:
            continue
        try:
            build_settings(**{name: 10**40 if int in kinds else 1e300})
            accepted.append(name)
        except InvalidSettings as exc:
            assert f"--{name.replace('_', '-')}: " in str(exc) and "\n" not in str(exc), str(exc)
    assert set(accepted) <= unbounded, accepted


# `grace score` run carelessly: (id, how to make the input and the output, words of the line)
def _header_only(tmp: Path) -> tuple[Path, Path]:
    edges = tmp / "edges.csv"
    edges.write_text(EDGES.read_text().splitlines()[0] + "\n")
    return edges, tmp / "out.parquet"


def _header_only_parquet(tmp: Path) -> tuple[Path, Path]:
    edges = tmp / "edges.parquet"
    pl.read_csv(EDGES).head(0).write_parquet(edges)
    return edges, tmp / "out.parquet"


def _out_is_a_folder(tmp: Path) -> tuple[Path, Path]:
    (tmp / "outdir").mkdir()
    return EDGES, tmp / "outdir"


def _input_is_a_folder(tmp: Path) -> tuple[Path, Path]:
    (tmp / "indir").mkdir()
    return tmp / "indir", tmp / "out.parquet"


def _unreadable_input(tmp: Path) -> tuple[Path, Path]:
    return Path("/proc/self/mem"), tmp / "out.parquet"


def _out_under_a_file(tmp: Path) -> tuple[Path, Path]:
    (tmp / "plain").write_text("x")
    return EDGES, tmp / "plain" / "out.parquet"


def _out_is_the_input(tmp: Path) -> tuple[Path, Path]:
    edges = tmp / "edges.csv"
    edges.write_text(EDGES.read_text())
    return edges, edges


def _empty_file(tmp: Path) -> tuple[Path, Path]:
    edges = tmp / "edges.csv"
    edges.write_text("")
    return edges, tmp / "out.parquet"


def _not_utf8(tmp: Path) -> tuple[Path, Path]:
    edges = tmp / "edges.csv"
    edges.write_bytes(b"doc_id,source_id,source_kind,claim_id,label\n\xff\xfe,a,prior,c,entails\n")
    return edges, tmp / "out.parquet"


SCORE_PROBES = [
    ("header-only-csv", _header_only, ("no edges", "header but no rows")),
    ("header-only-parquet", _header_only_parquet, ("no edges",)),
    ("out-is-a-folder", _out_is_a_folder, ("is a folder",)),
    ("input-is-a-folder", _input_is_a_folder, ("is a folder",)),
    ("unreadable-input", _unreadable_input, ("/proc/self/mem", "cannot read")),
    ("out-under-a-file", _out_under_a_file, ("cannot write", "is a file, not a folder")),
    ("out-is-the-input", _out_is_the_input, ("is the input edge table",)),
    ("empty-file", _empty_file, ("cannot read as CSV",)),
    ("not-utf8", _not_utf8, ("cannot read as CSV",)),
]


@pytest.mark.parametrize("name, make, words", SCORE_PROBES, ids=[p[0] for p in SCORE_PROBES])
def test_careless_score_is_one_line_and_leaves_nothing(name: str, make, words: tuple[str, ...], tmp_path: Path,
                                                       monkeypatch, capsys, tally) -> None:
    edges, out_file = make(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code, out, err = grace(monkeypatch, capsys, "score", str(edges), str(out_file))
    tally("bad settings").record(clear_error=code == 2 and err.count("\n") == 1, traceback="Traceback" in out + err,
                                 got_through=code == 0)
    refused(code, out, err, *words)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # no output, no temporary file


MODEL_BOUND_PROBES = [
    ("GRACE_TORCH_THREADS", "100000", "less than or equal to 256"),
    ("GRACE_EMBED_WORKERS", "100000", "less than or equal to 256"),
    ("GRACE_CONCURRENCY", "100000", "less than or equal to 256"),
    ("GRACE_REQUEST_TIMEOUT_S", "1e9", "less than or equal to 3600"),
    ("GRACE_RETRY_BACKOFF_S", "1e9", "less than or equal to 3600"),
    ("GRACE_RETRY_BACKOFF_MAX_S", "1e9", "less than or equal to 3600"),
    ("GRACE_MAX_RETRIES", "1000000", "less than or equal to 100"),
    ("GRACE_MAX_TOKENS", "1000000000", "less than or equal to 1000000"),
    ("GRACE_N_SAMPLES", "1000000", "less than or equal to 100"),
    ("GRACE_JUDGE_BATCH_SIZE", "1000000", "less than or equal to 1000"),
    ("GRACE_EMBED_BATCH_SIZE", "1000000", "less than or equal to 4096"),
    ("GRACE_EMBED_BATCH_TOKENS", "1000000000", "less than or equal to 65536"),
    ("GRACE_EMBED_CACHE_SIZE", "1000000000000", "less than or equal to 10000000"),
    ("GRACE_MAX_REPLY_BYTES", "1000000000000", "less than or equal to 268435456"),
    ("GRACE_MAX_REPLY_BYTES", "10", "greater than or equal to 1024"),
    ("GRACE_MAX_CLAIMS_PER_TEXT", "0", "greater than or equal to 1"),
    ("GRACE_MAX_CLAIMS_PER_TEXT", "1000000", "less than or equal to 10000"),
    ("GRACE_TEMPERATURE", "100", "less than or equal to 2"),
    ("GRACE_INPUT_COST_PER_TOKEN", "5", "less than or equal to 1"),
]


def test_model_settings_are_bounded_so_a_huge_value_is_one_line_not_a_traceback_or_100000_threads(
        tmp_path: Path, monkeypatch, capsys, tally) -> None:
    for var, value, words in MODEL_BOUND_PROBES:
        monkeypatch.setenv(var, value)
        code, out, err = grace(monkeypatch, capsys, "score", str(EDGES), str(tmp_path / "scores.parquet"))
        tally("bad settings").record(clear_error=code == 2 and err.count("\n") == 1 and var in err,
                                     traceback="Traceback" in out + err, got_through=code == 0)
        refused(code, out, err, var, words)
        monkeypatch.delenv(var)
    for var in ("GRACE_TORCH_THREADS", "GRACE_EMBED_WORKERS"):  # the reported case: before any thread, server or lake
        monkeypatch.setenv(var, "100000")
        code, out, err = grace(monkeypatch, capsys, "demo", "--lake", str(tmp_path / "demo-lake"))
        refused(code, out, err, var, "less than or equal to 256")
        monkeypatch.delenv(var)
    assert list(tmp_path.iterdir()) == []
