"""Quiet commands (issue 37, items 4 and 5): ``grace round`` shows one line per stage saying what
it did in this run, and no Prefect record, unless ``-v``; every record still reaches the Prefect
API (the UI's run logs); a failed run is one line; and what a command can check is checked before
a Prefect server starts."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.grace_cli import run_grace

SAMPLE = REPO / "flows" / "samples" / "qasper_demo.jsonl"


def grace(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``grace ARGS`` in a process of its own (its own logging set-up, as a user's shell runs it)."""
    return subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200", **(env or {})}, timeout=900, cwd=REPO)


def run_logs(api_url: str, flow_name: str) -> list[tuple[int, str]]:
    """(level, message) of every log of the newest run of ``flow_name`` on the Prefect API."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowRunFilter, LogFilter
    from prefect.client.schemas.sorting import FlowRunSort

    async def read() -> list[tuple[int, str]]:
        async with get_client() as client:
            runs = await client.read_flow_runs(flow_filter=FlowFilter(name={"any_": [flow_name]}), sort=FlowRunSort.START_TIME_DESC,
                                               limit=1)
            logs = await client.read_logs(log_filter=LogFilter(flow_run_id={"any_": [runs[0].id]}))
            return [(log.level, log.message) for log in logs]

    return asyncio.run(read())


@pytest.mark.slow
@pytest.mark.e2e
def test_round_is_quiet_by_default_verbose_with_v_and_its_logs_reach_the_api(prefect_server, tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    api_url = PREFECT_API_URL.value()
    lake = str(tmp_path / "lake")
    env = {"PREFECT_API_URL": api_url, "GRACE_HALLUCINATION_RATE": "0.2"}
    assert grace("ingest", str(SAMPLE), "--lake", lake, "--prior-sections", "Abstract,Introduction").returncode == 0

    first = grace("round", "--lake", lake, env=env)
    assert first.returncode == 0, first.stderr
    assert first.stderr == ""  # no Prefect line: no INFO, no "View at", no docs link
    lines = first.stdout.splitlines()
    assert lines[0] == f"• Prefect API {api_url}"
    stages = [line.strip().split(":")[0] for line in lines[1:5]]
    assert stages == [f"expansion round 1 on lake {lake} (offline backend)", "build", "score", "dispatch"], lines
    assert any(line.startswith("  build: 3 documents, ") for line in lines), lines
    assert lines[-1] == f"round 1 done: 3 documents built this run, 3 of 3 built in all (lake {lake})"
    logs = run_logs(api_url, "expansion_round")
    assert (20, f"expansion round 1 on lake {lake} (offline backend)") in logs  # the stage lines are INFO records in the UI
    assert any(level == 20 and message.startswith("build: 3 documents, ") for level, message in logs)
    assert any(level == 20 and message.startswith("Beginning flow run") for level, message in logs)  # and Prefect's own

    second = grace("round", "--lake", lake, "-v", env=env)
    assert second.returncode == 0, second.stderr
    assert "| INFO    | Flow run" in second.stderr and "Beginning flow run" in second.stderr  # Prefect's log lines with -v
    assert "Traceback" not in second.stderr
    assert "  build: 0 documents, 0 claims, 0 edges" in second.stdout.splitlines()  # what this run did, not the lake's total
    assert second.stdout.splitlines()[-1] == f"round 2 done: 0 documents built this run, 3 of 3 built in all (lake {lake})"


@pytest.mark.slow
@pytest.mark.e2e
def test_a_failed_round_is_one_line_on_the_terminal(prefect_server, tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    lake = str(tmp_path / "lake")
    assert grace("ingest", str(SAMPLE), "--lake", lake).returncode == 0
    failed = grace("round", "--lake", lake, env={"PREFECT_API_URL": PREFECT_API_URL.value(), "GRACE_BACKEND": "litellm",
                                                 "GRACE_MAX_RETRIES": "0", "OPENAI_API_KEY": "sk-none",
                                                 "OPENAI_API_BASE": "http://127.0.0.1:9/v1"})
    assert failed.returncode == 2
    assert len(failed.stderr.splitlines()) == 1 and failed.stderr.startswith("grace: error: round 1: build: "), failed.stderr
    assert "round 1 done" not in failed.stdout
    assert any(level >= 40 for level, _ in run_logs(PREFECT_API_URL.value(), "expansion_round"))  # its log in the UI says it failed


def test_a_configured_prefect_api_that_does_not_answer_is_one_line(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    assert grace("ingest", str(SAMPLE), "--lake", lake).returncode == 0
    done = grace("round", "--lake", lake, env={"PREFECT_API_URL": "http://127.0.0.1:9/api"})
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.splitlines() == [
        "grace: error: the Prefect API at http://127.0.0.1:9/api (PREFECT_API_URL) does not answer ([Errno 111] Connection refused); "
        "start that server, or unset PREFECT_API_URL to run on a temporary one"]


@pytest.mark.parametrize("case", ["a file", "cannot be created", "lost a table"])
def test_the_demo_checks_its_lake_before_a_server_starts(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture) -> None:
    import flows.prefect_server

    def no_server():
        raise AssertionError("a Prefect server was started before the lake was checked")

    lake = tmp_path / "lake"
    if case == "a file":
        lake.write_text("not a lake")
        expected = f"lake {lake}: exists and is not a folder"
    elif case == "cannot be created":
        (tmp_path / "file").write_text("a file, not a folder")
        lake = tmp_path / "file" / "lake"
        expected = f"lake {lake}: cannot be created (Not a directory)"
    else:
        assert run_grace(monkeypatch, capsys, "ingest", str(SAMPLE), "--lake", str(lake))[0] == 0
        shutil.rmtree(lake / "tables" / "documents")
        expected = "documents"
    monkeypatch.setattr(flows.prefect_server, "prefect_api", no_server)
    code, out, err = run_grace(monkeypatch, capsys, "demo", "--lake", str(lake), "--rounds", "1")
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("grace: error: ") and expected in err, err
    assert "Traceback" not in out + err and "Prefect" not in out


def test_the_terminal_shows_the_rounds_own_lines_and_every_warning_of_grace_flows_but_no_prefect_record() -> None:
    import prefect

    from flows.run_logs import StageLines, WithoutPrefect

    engine, ours = str(Path(prefect.__file__).parent / "flow_engine.py"), str(REPO / "flows" / "expansion.py")

    def record(level: int, message: str, flow: str, pathname: str, name: str = "prefect.flow_runs") -> logging.LogRecord:
        made = logging.LogRecord(name, level, pathname, 1, message, (), None)
        made.flow_name = flow
        return made

    shown: list[str] = []
    lines = StageLines(shown.append, "expansion_round")
    for r in (record(logging.INFO, "build: 3 documents, 87 claims, 229 edges", "expansion_round", ours),
              record(logging.INFO, "Beginning flow run 'x' for flow 'expansion_round'", "expansion_round", engine),
              record(logging.INFO, "round 1: scored 87 claims of 3 changed documents", "score_round", ours),
              record(logging.WARNING, "alice in GRACE_REVIEWERS but not registered", "dispatch_reviews", ours),
              record(logging.ERROR, "Finished in state Failed('boom')", "expansion_round", engine)):
        lines.handle(r)
    assert shown == ["build: 3 documents, 87 claims, 229 edges", "warning: alice in GRACE_REVIEWERS but not registered"]
    quiet = WithoutPrefect()
    assert not quiet.filter(record(logging.INFO, "Starting temporary server", "", engine, name="prefect"))
    assert not quiet.filter(record(logging.ERROR, "Encountered exception", "expansion_round", engine))
    assert quiet.filter(record(logging.WARNING, "a library's warning", "", "/usr/lib/x.py", name="urllib3"))
