"""Model-service faults (issue 11, items 3 and 4): a loopback OpenAI-compatible server
(tests/models/openai_server.py) that answers 429s, 500s, timeouts, malformed JSON, wrong shapes
and error bodies echoing the request's ``Authorization`` header, behind the real build flow
(litellm → HTTP, a real temporary Prefect server, a real lake) and the real ``grace demo``.

For each probe the test asserts:

- the outcome: a transient fault is retried and the build succeeds whole; a lasting fault ends
  the flow Failed with :class:`ModelCallsFailed`, whose one line counts the failed items per
  role and quotes the first error; ``grace demo`` exits 2 with that line and never says the
  round is done;
- nothing partial is committed: documents with failed items have no row in sources, claims or
  edges; the next round builds them whole, making again exactly the calls that failed;
- no secret leaks: the key (``GRACE_API_KEY``) appears in no lake table, lake file, exception,
  captured output, Prefect log or flow-run parameter.

The tally (tests/reliability/conftest.py, group ``llm faults``) counts probes, clear errors,
tracebacks and, as ``got through``, probes that leaked a secret or committed a partial graph.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from flows.build import build_graphs
from flows.ingest import ingest_batch
from flows.params import IngestParams, RunOptions, StageParams
from grace_core.errors import ModelCallsFailed
from storage.lake import Lake
from storage.schemas import WRITE_ORDER
from tests.conftest import REPO
from tests.models.openai_server import OpenAICompatibleServer
from tests.reliability.conftest import Tally

pytestmark = pytest.mark.reliability

KEY = "sk-grace-probe-SECRET-5d41402abc4b2a76"
MODEL = "openai/test-model"
SAMPLE = REPO / "flows" / "samples" / "qasper_demo.jsonl"
PRIORS = ["Abstract", "Introduction"]
GROUP = "llm faults"


SERVER_SINCE: dict[str, datetime] = {}
"""When this module's first test started (key ``at``): :func:`leaks` reads every log and run the
Prefect server holds from then on."""


@pytest.fixture(scope="module", autouse=True)
def on_the_workers_server(prefect_server: None) -> None:
    """The flows of this module, in process or in a child ``grace``, run on the worker's Prefect
    server (the session's ``prefect_server``)."""
    SERVER_SINCE.setdefault("at", datetime.now(timezone.utc))


@pytest.fixture(scope="module")
def _llm() -> Iterator[OpenAICompatibleServer]:
    srv = OpenAICompatibleServer(slow_s=1.0).start()
    yield srv
    srv.stop()


@pytest.fixture()
def llm(_llm: OpenAICompatibleServer) -> OpenAICompatibleServer:
    _llm.reset()
    return _llm


def litellm_env(server: OpenAICompatibleServer, **overrides: str) -> dict[str, str]:
    """GRACE_* settings putting every LLM role on the loopback server with the probe key."""
    env = {
        "GRACE_BACKEND": "litellm", "GRACE_API_BASE": server.url, "GRACE_API_KEY": KEY, "GRACE_TORCH_THREADS": "1",
        "GRACE_RETRY_BACKOFF_S": "0.01", "GRACE_REQUEST_TIMEOUT_S": "0.5", "GRACE_MAX_RETRIES": "2", "GRACE_N_SAMPLES": "1",
        "GRACE_INPUT_COST_PER_TOKEN": "1e-6", "GRACE_OUTPUT_COST_PER_TOKEN": "2e-6", "GRACE_CONCURRENCY": "4",
        **{f"GRACE_{role}_MODEL": MODEL for role in ("RESPONDER", "DECOMPOSER", "JUDGE", "VERIFIER", "ANSWERER")},
    }
    return env | overrides


def papers(tmp_path: Path, n: int) -> Path:
    """The first ``n`` papers of the bundled sample."""
    path = tmp_path / f"papers{n}.jsonl"
    path.write_text("".join(SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)[:n]), encoding="utf-8")
    return path


def ingested(tmp_path: Path, n: int) -> str:
    root = str(tmp_path / "lake")
    ingest_batch(IngestParams(batch=str(papers(tmp_path, n)), lake=root, prior_sections=PRIORS))
    return root


def lake_of(root: str) -> Lake:
    return Lake.open(RunOptions(lake=root).settings())


def leaks(root: str, *texts: str) -> list[str]:
    """Where the key shows: lake tables (every string cell), lake files (raw bytes), ``texts``,
    the Prefect API's logs and flow- and task-run parameters and states since this module started
    (:data:`SERVER_SINCE`)."""
    found = []
    lake = lake_of(root)
    for table in WRITE_ORDER:
        frame = lake.read(table)
        for column, dtype in frame.schema.items():
            if dtype == pl.Utf8 and frame[column].str.contains(KEY, literal=True).any():
                found.append(f"table {table}.{column}")
    for path in Path(root).rglob("*"):
        if path.is_file() and KEY.encode() in path.read_bytes():
            found.append(f"file {path}")
    found += [f"text {i}" for i, t in enumerate(texts) if KEY in t]
    from prefect.client.orchestration import get_client

    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterExpectedStartTime, LogFilter, LogFilterTimestamp

    since = SERVER_SINCE["at"]
    runs = FlowRunFilter(expected_start_time=FlowRunFilterExpectedStartTime(after_=since))
    with get_client(sync_client=True) as client:
        logs = partial(client.read_logs, log_filter=LogFilter(timestamp=LogFilterTimestamp(after_=since)))
        found += ["prefect log" for log in paged(logs) if KEY in log.message]
        for run in paged(partial(client.read_flow_runs, flow_run_filter=runs)):
            found += [f"prefect flow run {run.name}"] if KEY in repr(run.parameters) + repr(run.state and run.state.message) else []
        for run in paged(partial(client.read_task_runs, flow_run_filter=runs)):
            found += [f"prefect task run {run.name}"] if KEY in repr(run.task_inputs) + repr(run.state and run.state.message) else []
    return found


def paged(read: Callable[..., list]) -> Iterator:
    """Every item of a Prefect client ``read_*`` method, 200 at a time."""
    offset = 0
    while page := read(limit=200, offset=offset):
        yield from page
        offset += len(page)


def graph_rows(root: str) -> dict[str, int]:
    lake = lake_of(root)
    return {t: lake.read(t).height for t in ("sources", "claims", "edges")}


def unbuilt_docs_have_no_rows(root: str) -> bool:
    """No document has some rows of a graph without its claims (a partial graph)."""
    lake = lake_of(root)
    built = set(lake.read("claims", columns=["doc_id"])["doc_id"].to_list())
    responses = set(lake.read("sources").filter(pl.col("source_kind") == "response")["doc_id"].to_list())
    with_edges = set(lake.read("edges", columns=["doc_id"])["doc_id"].to_list())
    return responses <= built and with_edges <= built


def run_build(root: str, round_id: int) -> tuple[dict | None, str]:
    """``build_graphs`` of ``round_id``: (result, "") or (None, the ModelCallsFailed line)."""
    try:
        return build_graphs(StageParams(lake=root, round_id=round_id)), ""
    except ModelCallsFailed as exc:
        return None, str(exc)


TRANSIENT = {
    "429": ["429", "429"], "500": ["500", "500"], "timeout": ["slow"], "malformed JSON": ["malformed", "malformed"],
    "wrong fields": ["wrong_fields"], "no choices": ["no_choices"], "body not JSON": ["not_json"], "echoed key": ["echo_key", "echo_key"],
}
LASTING = {"429": "429", "500": "500", "timeout": "slow", "malformed JSON": "malformed", "wrong fields": "wrong_fields",
           "no choices": "no_choices", "body not JSON": "not_json", "echoed key": "echo_key"}
OUTCOME = {"429": "rate_limited", "500": "error", "timeout": "timeout", "malformed JSON": "malformed", "wrong fields": "malformed",
           "no choices": "malformed", "body not JSON": "error", "echoed key": "error"}


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(TRANSIENT))
def test_a_transient_fault_is_retried_and_the_build_succeeds_whole(
    fault: str, llm: OpenAICompatibleServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture, tally: Callable[[str], Tally],
) -> None:
    for k, v in litellm_env(llm).items():
        monkeypatch.setenv(k, v)
    root = ingested(tmp_path, 1)
    llm.script.extend(TRANSIENT[fault])
    result, error = run_build(root, 1)
    out, err = capfd.readouterr()
    calls = lake_of(root).read("llm_calls")
    leaked = leaks(root, out, err, error)
    partial = not unbuilt_docs_have_no_rows(root)
    tally(GROUP).record(clear_error=not error, traceback="Traceback" in out + err, got_through=bool(leaked) or partial)
    assert error == "" and result is not None and result["documents"] == 1 and result["failed_items"] == 0
    assert OUTCOME[fault] in calls["outcome"].to_list(), "the fault was recorded"
    failed_keys = set(calls.filter(pl.col("outcome") != "ok")["key"].to_list())
    assert failed_keys <= set(calls.filter(pl.col("outcome") == "ok")["key"].to_list()), "each faulty call was retried to success"
    assert not leaked and not partial


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(LASTING))
def test_a_lasting_fault_fails_the_round_with_one_clear_line_and_commits_nothing_partial(
    fault: str, llm: OpenAICompatibleServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture, tally: Callable[[str], Tally],
) -> None:
    for k, v in litellm_env(llm, GRACE_MAX_RETRIES="1").items():
        monkeypatch.setenv(k, v)
    root = ingested(tmp_path, 1)
    llm.fallback = LASTING[fault]
    result, error = run_build(root, 1)
    out, err = capfd.readouterr()
    leaked = leaks(root, out, err, error)
    partial = not unbuilt_docs_have_no_rows(root)
    clear = error.startswith("round 1: build: ") and "model item" in error and "(responder " in error and "\n" not in error
    tally(GROUP).record(clear_error=clear, traceback="Traceback" in out + err + error, got_through=bool(leaked) or partial)
    assert result is None and clear, error
    assert "1 of 1 documents left unbuilt" in error
    assert graph_rows(root)["claims"] == 0 and graph_rows(root)["edges"] == 0
    assert lake_of(root).read("sources").filter(pl.col("source_kind") == "response").height == 0
    errors = lake_of(root).read("llm_calls").filter(pl.col("outcome") != "ok")
    assert errors.height >= 2 and errors["error"].null_count() == 0, "the failed attempts are on record"
    assert not leaked and not partial, leaked


@pytest.mark.slow
def test_with_no_retries_a_flaky_server_leaves_documents_whole_and_the_next_round_makes_exactly_the_failed_calls(
    llm: OpenAICompatibleServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tally: Callable[[str], Tally],
) -> None:
    # no retries: the deadline is 5 s, not the module's 0.5 s, so that only the scripted 500s fail calls (a reply from
    # this loopback server can take longer than 0.5 s on a loaded machine, and would then fail the clean second round)
    for k, v in litellm_env(llm, GRACE_MAX_RETRIES="0", GRACE_N_SAMPLES="2", GRACE_DOCS_PER_TASK="1", GRACE_REQUEST_TIMEOUT_S="5").items():
        monkeypatch.setenv(k, v)
    root = ingested(tmp_path, 3)
    llm.fail_every = (7, "500")
    result, error = run_build(root, 1)
    assert result is None and "model item" in error and "documents left unbuilt" in error
    lake = lake_of(root)
    first = lake.read("llm_calls")
    ok_before = set(first.filter(pl.col("outcome") == "ok")["key"].to_list())
    failed_before = set(first["key"].to_list()) - ok_before
    assert failed_before and unbuilt_docs_have_no_rows(root)
    built_before = set(lake.read("claims", columns=["doc_id"])["doc_id"].to_list())

    llm.reset()
    result, error = run_build(root, 2)
    assert error == "" and result is not None and result["failed_items"] == 0
    calls = lake_of(root).read("llm_calls")
    second = set(calls.filter(pl.col("round") == 2)["key"].to_list())
    assert failed_before <= second, "every call that failed is made again"
    assert not second & ok_before, "no call that succeeded is paid twice"
    claims = lake_of(root).read("claims")
    assert claims["doc_id"].n_unique() == 3
    assert set(claims.filter(pl.col("round") == 2)["doc_id"].to_list()).isdisjoint(built_before), "built documents are not rebuilt"
    tally(GROUP).record(clear_error=True, got_through=not unbuilt_docs_have_no_rows(root))


@pytest.mark.slow
def test_reaching_the_spend_cap_is_a_warning_with_the_amounts_and_the_skipped_work_is_done_next_round(
    llm: OpenAICompatibleServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    tally: Callable[[str], Tally],
) -> None:
    for k, v in litellm_env(llm, GRACE_CONCURRENCY="1").items():
        monkeypatch.setenv(k, v)
    (tmp_path / "uncapped").mkdir()
    full = ingested(tmp_path / "uncapped", 1)
    assert run_build(full, 1)[0] is not None
    cost = float(lake_of(full).read("llm_calls")["cost_usd"].sum())
    cap = round(cost / 3, 6)  # the document needs about three rounds of spend
    monkeypatch.setenv("GRACE_SPEND_CAP_USD", str(cap))
    root = ingested(tmp_path, 1)
    with caplog.at_level(logging.WARNING):
        result, error = run_build(root, 1)
    assert error == "" and result is not None, error
    assert result["capped_items"] > 0 and result["unbuilt"] == 1 and result["documents"] == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "spend cap reached" in r.getMessage()]
    assert any("round 1: spend cap reached: $" in w and f"cap of ${cap:.6f} per round" in w and "model items skipped" in w
               and "1 documents left for the next round" in w for w in warnings), warnings
    assert unbuilt_docs_have_no_rows(root)
    calls = lake_of(root).read("llm_calls")
    assert cap <= calls["cost_usd"].sum() < cost
    ok_round_1 = set(calls.filter(pl.col("outcome") == "ok")["key"].to_list())
    for round_id in range(2, 8):
        result, error = run_build(root, round_id)
        assert error == "" and result is not None
        if result["documents"] == 1:
            break
    assert result["documents"] == 1 and result["capped_items"] == 0, "later rounds finish the capped work"
    later = lake_of(root).read("llm_calls").filter(pl.col("round") > 1)
    assert not set(later["key"].to_list()) & ok_round_1, "no call paid in round 1 is paid again"
    tally(GROUP).record(clear_error=True, got_through=not unbuilt_docs_have_no_rows(root))


@pytest.mark.slow
@pytest.mark.e2e
def test_grace_demo_on_a_server_that_fails_every_call_exits_2_with_one_line_and_leaks_no_key(
    llm: OpenAICompatibleServer, tmp_path: Path, tally: Callable[[str], Tally],
) -> None:
    llm.fallback = "echo_key"
    env = cli_env(llm, GRACE_MAX_RETRIES="1", GRACE_REQUEST_TIMEOUT_S="5")
    root = str(tmp_path / "demo-lake")
    proc = grace_cli(["demo", "--lake", root, "--rounds", "1"], env)
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    clear = proc.returncode == 2 and last.startswith("grace: error: round 1: build: ") and "(responder " in last
    leaked = [w for w, text in (("stdout", proc.stdout), ("stderr", proc.stderr)) if KEY in text]
    leaked += leaks(root)  # its runs are on the worker's server: their logs and parameters too
    tally(GROUP).record(clear_error=clear, traceback="Traceback" in proc.stdout + proc.stderr, got_through=bool(leaked))
    assert clear, proc.stderr[-2000:]
    assert "round 1 done" not in proc.stdout and "litellm models (responder openai/test-model" in proc.stdout
    assert "offline models" not in proc.stdout
    assert "Traceback" not in proc.stderr and not leaked, leaked
    assert llm.authorizations and all(a == f"Bearer {KEY}" for a in llm.authorizations), "the key was sent, and echoed back"
    sql = grace_cli(["sql", "--lake", root, "SELECT bool_and(contains(error, '[REDACTED]')) AS all_redacted, count(*) AS failed_calls "
                     "FROM llm_calls WHERE outcome <> 'ok'"], env)
    assert sql.returncode == 0 and "true" in sql.stdout and KEY not in sql.stdout + sql.stderr, sql.stdout + sql.stderr


def on_this_server(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a child ``grace`` command whose flows run on the worker's Prefect server, not
    on a temporary server of its own."""
    from prefect.settings import PREFECT_API_URL

    return env | {"PREFECT_API_URL": str(PREFECT_API_URL.value())}


def grace_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", *args], capture_output=True, text=True,
                          env=on_this_server(env), cwd=REPO, timeout=900)


@pytest.mark.slow
@pytest.mark.e2e
def test_eval_expansion_uses_and_fills_the_call_cache_and_stores_no_figures_of_a_faulty_run(
    llm: OpenAICompatibleServer, tmp_path: Path, tally: Callable[[str], Tally],
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRACE_")}
    env |= litellm_env(llm, GRACE_MAX_RETRIES="0", GRACE_REQUEST_TIMEOUT_S="5") | {"OMP_NUM_THREADS": "1"}
    data = papers(tmp_path, 1)

    def run(lake: str, out: str) -> subprocess.CompletedProcess:
        return grace_cli(["eval", "expansion", "--data", str(data), "--rounds", "1", "--lake", lake, "--out", str(tmp_path / out)], env)

    clean = str(tmp_path / "clean-lake")
    first = run(clean, "out1")
    assert first.returncode == 0, first.stderr[-2000:]
    made = len(llm.requests)
    assert made > 0
    again = run(clean, "out2")
    assert again.returncode == 0 and len(llm.requests) == made, "an identical rerun is answered from the cache"
    assert "already recorded" in again.stdout
    assert (tmp_path / "out1" / "metrics.json").read_text() == (tmp_path / "out2" / "metrics.json").read_text()

    llm.reset()
    faulty = str(tmp_path / "faulty-lake")
    llm.fail_every = (5, "echo_key")
    failed = run(faulty, "out3")
    lines = failed.stderr.strip().splitlines()
    clear = failed.returncode == 2 and lines[-1].startswith("grace: error: eval expansion: ") and "model item" in lines[-1]
    leaked = leaks(faulty, failed.stdout, failed.stderr)  # its runs are on the worker's server: their logs and parameters too
    tally(GROUP).record(clear_error=clear, traceback="Traceback" in failed.stderr, got_through=bool(leaked))
    assert clear, failed.stderr[-2000:]
    assert not leaked and not (tmp_path / "out3").exists()
    assert lake_of(faulty).read("evaluations").height == 0, "no figures of a faulty run are stored"
    calls = lake_of(faulty).read("llm_calls")
    ok_before = set(calls.filter(pl.col("outcome") == "ok")["key"].to_list())
    assert ok_before and set(calls["key"].to_list()) - ok_before
    before = calls["created_at"].max()

    llm.reset()
    retried = run(faulty, "out4")
    assert retried.returncode == 0, retried.stderr[-2000:]
    calls = lake_of(faulty).read("llm_calls")
    rerun = set(calls.filter(pl.col("created_at") > before)["key"].to_list())
    assert rerun and not rerun & ok_before, "the rerun makes only calls the faulty run did not get answered"
    assert len(llm.requests) < made
    assert lake_of(faulty).read("evaluations").height > 0, "the clean rerun stores its figures"
    assert (tmp_path / "out4" / "metrics.json").read_text() == (tmp_path / "out1" / "metrics.json").read_text()


def bounded(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()``, failing the test if it has not returned within ``seconds`` (on a daemon thread,
    so that a regression to an unbounded reply fails the test instead of hanging it)."""
    done: Future = Future()
    threading.Thread(target=lambda: done.set_result(fn()), daemon=True).start()
    try:
        return done.result(timeout=seconds)
    except TimeoutError:
        pytest.fail(f"still running after {seconds} s: a reply is not bounded")


# (server mode, settings, the outcome recorded, words of the first error)
BOUNDED = {
    "slow drip": ("drip", {"GRACE_REQUEST_TIMEOUT_S": "1"}, "timeout", "1 s deadline"),
    "50 MB reply": ("huge", {}, "malformed", "larger than 8388608 bytes"),
    "negative usage": ("negative_usage", {}, "malformed", "usage not plausible"),
    "20,000 claims": ("many_claims", {}, "malformed", "20000 claims, more than the 200 allowed"),
}


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(BOUNDED))
def test_a_reply_past_a_bound_fails_its_items_in_bounded_time_and_the_round_with_one_line(
    fault: str, llm: OpenAICompatibleServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture, tally: Callable[[str], Tally],
) -> None:
    mode, settings, outcome, words = BOUNDED[fault]
    for k, v in litellm_env(llm, GRACE_MAX_RETRIES="1", **settings).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(llm, "drip_s", 0.2)  # well inside litellm's 1 s per-read timeout: only the deadline ends it
    root = ingested(tmp_path, 1)
    llm.fallback = mode
    started = time.monotonic()
    result, error = bounded(300, lambda: run_build(root, 1))
    took = time.monotonic() - started
    out, err = capfd.readouterr()
    leaked = leaks(root, out, err, error)
    partial = not unbuilt_docs_have_no_rows(root)
    clear = error.startswith("round 1: build: ") and "model item" in error and words in error and "\n" not in error
    tally(GROUP).record(clear_error=clear, traceback="Traceback" in out + err + error, got_through=bool(leaked) or partial)
    assert result is None and clear, error
    assert took < 120, f"{took:.0f} s"
    calls = lake_of(root).read("llm_calls")
    assert outcome in calls["outcome"].to_list()
    assert (calls["cost_usd"].drop_nulls() >= 0).all(), "no call lowers the spend"
    assert graph_rows(root)["claims"] == 0 and not leaked and not partial, leaked


def grace_round(root: str, env: dict[str, str], rss_file: Path) -> subprocess.CompletedProcess:
    """``grace round --lake ROOT`` in a child process on the worker's Prefect server, bounded in
    time; the child writes its peak RSS (KiB) to ``rss_file`` as it exits."""
    code = (f"import atexit, resource; atexit.register(lambda: open({str(rss_file)!r}, 'w').write("
            "str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))); from flows.cli import main; main()")
    return subprocess.run([sys.executable, "-c", code, "round", "--lake", root], capture_output=True, text=True,
                          env=on_this_server(env), cwd=REPO, timeout=600)


def cli_env(llm: OpenAICompatibleServer, **overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRACE_", "PREFECT_API_URL"))}
    return env | litellm_env(llm, **overrides) | {"OMP_NUM_THREADS": "1"}


@pytest.mark.slow
@pytest.mark.e2e
def test_grace_round_on_a_50_mb_reply_exits_2_with_one_line_and_stays_small(
    llm: OpenAICompatibleServer, tmp_path: Path, tally: Callable[[str], Tally],
) -> None:
    env = cli_env(llm, GRACE_MAX_RETRIES="1", GRACE_REQUEST_TIMEOUT_S="5")
    (tmp_path / "clean").mkdir()
    clean = grace_round(ingested(tmp_path / "clean", 1), env, tmp_path / "clean-rss")
    assert clean.returncode == 0, clean.stderr[-2000:]
    clean_mb = int((tmp_path / "clean-rss").read_text()) / 1024
    root = ingested(tmp_path, 1)
    llm.fallback = "huge"
    proc = grace_round(root, env, tmp_path / "rss")
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    clear = proc.returncode == 2 and last.startswith("grace: error: round 1: build: ") and "larger than 8388608 bytes" in last
    peak_mb = int((tmp_path / "rss").read_text()) / 1024
    leaked = [w for w, t in (("stdout", proc.stdout), ("stderr", proc.stderr)) if KEY in t] + leaks(root)
    tally(GROUP).record(clear_error=clear, traceback="Traceback" in proc.stdout + proc.stderr, got_through=bool(leaked))
    assert clear, proc.stderr[-2000:]
    # was a SIGABRT at 4.2 GB; one 50 MB reply held whole (bytes, text, JSON) is ≥ 100 MB more than a clean round
    assert peak_mb < clean_mb + 100 and peak_mb < 2048, f"peak RSS {peak_mb:.0f} MB, a clean round {clean_mb:.0f} MB"
    assert not leaked, leaked  # (Prefect logs the failed flow run's traceback above the line: grace round does not hide it)
    print(f"grace round on 50 MB replies: exit {proc.returncode}, peak RSS {peak_mb:.0f} MB (a clean round: {clean_mb:.0f} MB)")


@pytest.mark.slow
@pytest.mark.e2e
def test_grace_round_when_the_spend_cap_leaves_every_document_unbuilt_exits_2_naming_the_cap(
    llm: OpenAICompatibleServer, tmp_path: Path, tally: Callable[[str], Tally],
) -> None:
    root = ingested(tmp_path, 1)
    llm.fallback = "negative_usage"  # each reply claims -1,000,000 tokens: refused, charged the most it could cost
    proc = grace_round(root, cli_env(llm, GRACE_SPEND_CAP_USD="0.001"), tmp_path / "rss")
    lines = proc.stderr.strip().splitlines()
    clear = (proc.returncode == 2 and bool(lines) and lines[-1].startswith("grace: error: round 1: spend cap $0.0010 reached")
             and "before any document was built" in lines[-1])
    tally(GROUP).record(clear_error=clear, traceback="Traceback" in proc.stdout + proc.stderr, got_through=proc.returncode == 0)
    assert clear, proc.stderr[-2000:]
    assert KEY not in proc.stdout + proc.stderr
    calls = lake_of(root).read("llm_calls")
    assert calls.height and (calls["cost_usd"] > 0).all() and calls["cost_usd"].sum() >= 0.001, "negative usage never lowered the spend"
    assert set(calls["outcome"].to_list()) == {"malformed"}
