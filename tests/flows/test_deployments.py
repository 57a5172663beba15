"""GRACE's deployments: their names, schedules and parameter forms; the same deployments in
``prefect.yaml``, deployed with ``prefect deploy --all`` and run by a process worker; and runs
triggered on the deployments that ``grace serve`` serves. All against the session's real
temporary Prefect server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.deployments import run_deployment
from prefect.flows import load_flow_from_entrypoint
from prefect.settings import PREFECT_API_URL

from deployments.config import ScheduleConfig
from deployments.definitions import grace_deployments
from flows.settings import build_settings
from grace_core.errors import InvalidSettings
from storage.config import LakeConfig
from storage.lake import Lake
from tests.conftest import REPO

BIN = Path(sys.executable).parent
STAGE_FLOWS = ("ingest_batch", "build_graphs", "score_round", "dispatch_reviews", "ingest_verdicts", "expansion_round", "review_packet")
EXPECTED = {"expansion_round/nightly-expansion", "watch_inbox/inbox-watcher", "maintain_lake/lake-maintenance", *(f"{f}/{f.replace('_', '-')}" for f in STAGE_FLOWS)}
PRIORS = '["Abstract", "Introduction"]'


def by_name(deployments) -> dict:
    return {f"{d.flow_name}/{d.name}": d for d in deployments}


@pytest.fixture
def one_paper(tmp_path: Path) -> Path:
    """A batch of one bundled QASPER paper (keeps the runs short)."""
    path = tmp_path / "one-paper.jsonl"
    path.write_text((REPO / "flows/samples/qasper_demo.jsonl").read_text().splitlines()[0] + "\n")
    return path


def server_env(**grace: str) -> dict[str, str]:
    """The environment of a child process that talks to the test server."""
    return {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PREFECT_LOGGING_LEVEL": "INFO", **grace}


def wait_until_final(run_id, timeout: float):
    """The flow run once it reached a final state (fails after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while not (run := client.read_flow_run(run_id)).state.is_final():
            assert time.monotonic() < deadline, f"flow run still {run.state.name} after {timeout} s"
            time.sleep(0.5)
    return run


def documents(lake: Path) -> list[str]:
    return Lake.open(LakeConfig(lake=str(lake)), must_exist=True).read("documents")["doc_id"].to_list()


def test_deployments_have_their_names_schedules_and_parameter_forms() -> None:
    deps = by_name(grace_deployments(ScheduleConfig()))
    assert set(deps) == EXPECTED
    nightly = deps["expansion_round/nightly-expansion"].schedules[0].schedule
    assert (nightly.cron, nightly.timezone) == ("0 2 * * *", "UTC")
    assert deps["watch_inbox/inbox-watcher"].schedules[0].schedule.interval == timedelta(seconds=300)
    maintenance = deps["maintain_lake/lake-maintenance"].schedules[0].schedule
    assert (maintenance.cron, maintenance.timezone) == ("0 5 * * 0", "UTC")
    assert all(not d.schedules for d in deps.values() if "on-demand" in d.tags)
    assert all(d.description for d in deps.values())  # every deployment says what it does
    # a schedule in words (the list shows a cron string or "+1"), one run at a time: missed runs collapse
    assert "every day at 02:00 (UTC)" in deps["expansion_round/nightly-expansion"].description
    assert "every 5 minutes" in deps["watch_inbox/inbox-watcher"].description
    assert "every Sunday at 05:00 (UTC)" in deps["maintain_lake/lake-maintenance"].description
    for d in deps.values():
        limit = d.concurrency_limit if "scheduled" in d.tags else None
        assert (limit, d.concurrency_options and d.concurrency_options.collision_strategy.value) == (
            (1, "CANCEL_NEW") if "scheduled" in d.tags else (None, None)), d.name
    assert "'review YOUR-NAME · round N · K claims'" in deps["review_packet/review-packet"].description  # how to find your packet
    for name, d in deps.items():  # entrypoints load from the installed package, wherever the process runs
        assert load_flow_from_entrypoint(d.entrypoint).name == d.flow_name, name
    # the UI renders a typed form per flow, required fields first, only what the flow uses
    ingest = deps["ingest_batch/ingest-batch"]._parameter_openapi_schema
    assert ingest.required == ["params"] and ingest.definitions["IngestParams"]["required"] == ["batch"]
    assert list(ingest.definitions["IngestParams"]["properties"]) == ["batch", "lake", "prior_sections"]
    stage_forms = {  # each stage's form: its own fields only, the round first
        "build_graphs/build-graphs": ("BuildParams", ["round_id", "lake", "backend", "seed", "hallucination_rate", "now"]),
        "score_round/score-round": ("ScoreParams", ["round_id", "lake", "backend", "rescore_all", "now"]),
        "dispatch_reviews/dispatch-reviews": ("DispatchParams", ["round_id", "lake", "backend", "now", "budget"]),
        "ingest_verdicts/ingest-verdicts": ("VerdictParams", ["lake", "now"]),
    }
    for name, (model, fields) in stage_forms.items():
        form = deps[name]._parameter_openapi_schema.definitions[model]
        assert list(form["properties"]) == fields, name
        assert form.get("required", []) == (["round_id"] if "round_id" in fields else []), name
    assert deps["score_round/score-round"]._parameter_openapi_schema.definitions["ScoreParams"]["properties"]["round_id"]["minimum"] == 1
    packet = deps["review_packet/review-packet"]._parameter_openapi_schema.definitions["PacketParams"]
    assert list(packet["properties"])[:3] == ["reviewer", "packet_size", "poll_seconds"] and packet["required"] == ["reviewer"]
    rounds = deps["expansion_round/expansion-round"]._parameter_openapi_schema
    assert not rounds.required and rounds.properties["params"]["default"] == {}  # the nightly run needs no parameters
    fields = rounds.definitions["RoundParams"]["properties"]
    # an empty override keeps the setting: a plain field of its type (no "str or None" choice), a choice is a select
    assert fields["budget"] == {"type": "number", "minimum": 0, "title": "Budget", "description": fields["budget"]["description"]}
    assert fields["backend"]["enum"] == ["offline", "litellm"] and "anyOf" not in str(rounds.definitions)


def test_a_form_value_out_of_bounds_is_refused_plainly() -> None:
    """What the server answers a Run form out of bounds (it validates against the same schema)."""
    from prefect.utilities.schema_tools.validation import ValidationError, validate

    schema = by_name(grace_deployments(ScheduleConfig()))["expansion_round/expansion-round"]._parameter_openapi_schema.model_dump()
    with pytest.raises(ValidationError, match="-1.0 is less than the minimum of 0"):
        validate({"params": {"budget": -1.0}}, schema, raise_on_error=True)
    validate({"params": {}}, schema, raise_on_error=True)


def test_schedules_come_from_the_grace_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRACE_NIGHTLY_CRON", "30 3 * * 1-5")
    monkeypatch.setenv("GRACE_TIMEZONE", "Europe/Paris")
    monkeypatch.setenv("GRACE_INBOX_INTERVAL_S", "60")
    monkeypatch.setenv("GRACE_MAINTENANCE_CRON", "0 12 1 * *")
    deps = by_name(grace_deployments(build_settings()))
    nightly = deps["expansion_round/nightly-expansion"].schedules[0].schedule
    assert (nightly.cron, nightly.timezone) == ("30 3 * * 1-5", "Europe/Paris")
    maintenance = deps["maintain_lake/lake-maintenance"].schedules[0].schedule
    assert (maintenance.cron, maintenance.timezone) == ("0 12 1 * *", "Europe/Paris")
    assert deps["watch_inbox/inbox-watcher"].schedules[0].schedule.interval == timedelta(seconds=60)
    assert "Monday to Friday at 03:30 (Europe/Paris)" in deps["expansion_round/nightly-expansion"].description
    assert "on day 1 of every month at 12:00 (Europe/Paris)" in deps["maintain_lake/lake-maintenance"].description
    assert "every minute" in deps["watch_inbox/inbox-watcher"].description
    monkeypatch.setenv("GRACE_TIMEZONE", "Mars/Olympus")
    with pytest.raises(InvalidSettings, match='Invalid timezone: "Mars/Olympus"'):
        build_settings()
    monkeypatch.setenv("GRACE_TIMEZONE", "UTC")
    monkeypatch.setenv("GRACE_NIGHTLY_CRON", "99 2 * * *")
    with pytest.raises(InvalidSettings, match='Invalid cron string: "99 2 \\* \\* \\*"'):
        build_settings()


def test_prefect_yaml_declares_the_same_deployments() -> None:
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    defaults = ScheduleConfig()
    served = by_name(grace_deployments(defaults))
    declared = {}
    for d in spec["deployments"]:
        flow_name = load_flow_from_entrypoint(d["entrypoint"]).name
        declared[f"{flow_name}/{d['name']}"] = d
        assert d["work_pool"]["name"] == "grace-process"
    assert set(declared) == set(served)
    for name, d in declared.items():
        assert d["entrypoint"] == served[name].entrypoint, name
        assert d.get("parameters", {}) == served[name].parameters, name
        assert set(d["tags"]) == set(served[name].tags), name
        if "scheduled" in d["tags"]:  # one run at a time, a run that would overlap is cancelled, as served
            assert d["concurrency_limit"] == {"limit": served[name].concurrency_limit, "collision_strategy": "CANCEL_NEW"}, name
    assert declared["expansion_round/nightly-expansion"]["schedules"] == [{"cron": defaults.nightly_cron, "timezone": defaults.timezone}]
    assert declared["watch_inbox/inbox-watcher"]["schedules"] == [{"interval": defaults.inbox_interval_s}]
    assert declared["maintain_lake/lake-maintenance"]["schedules"] == [{"cron": defaults.maintenance_cron, "timezone": defaults.timezone}]


@pytest.mark.usefixtures("prefect_server")
@pytest.mark.slow
@pytest.mark.e2e
def test_prefect_deploy_all_then_a_process_worker_runs_a_deployment(tmp_path: Path, one_paper: Path) -> None:
    env = server_env()
    pool = subprocess.run([BIN / "prefect", "work-pool", "create", "grace-process", "--type", "process", "--overwrite"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert pool.returncode == 0, pool.stdout + pool.stderr
    deploy = subprocess.run([BIN / "prefect", "--no-prompt", "deploy", "--all"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr

    with get_client(sync_client=True) as client:
        deployed = {name: client.read_deployment_by_name(name) for name in EXPECTED}
    served = by_name(grace_deployments(ScheduleConfig()))
    for name, d in deployed.items():
        assert d.work_pool_name == "grace-process", name
        assert d.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}], name
        assert d.entrypoint == served[name].entrypoint, name
        form = served[name]._parameter_openapi_schema
        assert d.parameter_openapi_schema.get("required", []) == form.required, name
        assert d.parameter_openapi_schema["definitions"] == form.definitions, name
    nightly = deployed["expansion_round/nightly-expansion"].schedules[0].schedule
    assert (nightly.cron, nightly.timezone) == ("0 2 * * *", "UTC")

    lake = tmp_path / "lake"
    try:
        run = run_deployment("ingest_batch/ingest-batch", parameters={"params": {"batch": str(one_paper), "lake": str(lake)}}, timeout=0)
        worker = subprocess.run([BIN / "prefect", "worker", "start", "--pool", "grace-process", "--run-once"],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
        assert worker.returncode == 0, worker.stdout + worker.stderr
        finished = wait_until_final(run.id, timeout=60)
        assert finished.state.is_completed(), finished.state
        assert len(documents(lake)) == 1
    finally:  # the session's server is shared: leave no pool-owned deployments to the next test
        with get_client(sync_client=True) as client:
            for d in deployed.values():
                client.delete_deployment(d.id)


@pytest.mark.usefixtures("prefect_server")
@pytest.mark.slow
@pytest.mark.e2e
def test_grace_serve_runs_deployments_triggered_with_and_without_parameters(tmp_path: Path, one_paper: Path) -> None:
    inbox, served_lake, param_lake = tmp_path / "inbox", tmp_path / "served-lake", tmp_path / "param-lake"
    inbox.mkdir()
    (inbox / "batch-001.jsonl").write_bytes(one_paper.read_bytes())
    log = tmp_path / "serve.log"
    env = server_env(GRACE_LAKE=str(served_lake), GRACE_INBOX=str(inbox), GRACE_PRIOR_SECTIONS=PRIORS, PREFECT_RUNNER_POLL_FREQUENCY="1")
    # the nightly deployment was moved to a work pool (as `prefect deploy` does): serve must leave it alone
    with get_client(sync_client=True) as client:
        if not any(p.name == "grace-process" for p in client.read_work_pools()):
            client.create_work_pool(WorkPoolCreate(name="grace-process", type="process"))
    nightly = by_name(grace_deployments(ScheduleConfig()))["expansion_round/nightly-expansion"]
    nightly.work_pool_name = "grace-process"
    nightly_id = nightly.apply()
    with log.open("w") as out:
        serve = subprocess.Popen([BIN / "grace", "serve"], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while "being served" not in log.read_text():  # printed once every deployment is registered
            assert serve.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        # as the schedule runs it: the deployment's own parameters, settings from the server's environment
        watcher = run_deployment("watch_inbox/inbox-watcher", timeout=0)
        # as from the UI form: typed parameters override the settings
        form = {"params": {"batch": str(one_paper), "lake": str(param_lake)}}
        ingest = run_deployment("ingest_batch/ingest-batch", parameters=form, timeout=0)
        for run in (watcher, ingest):
            finished = wait_until_final(run.id, timeout=90)
            assert finished.state.is_completed(), (finished.state, log.read_text())
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=60)
    output = log.read_text()
    assert "not serving expansion_round/nightly-expansion: it belongs to work pool 'grace-process'" in output
    assert "Pausing" not in output
    with get_client(sync_client=True) as client:
        after = {name: client.read_deployment_by_name(name) for name in EXPECTED}
        client.delete_deployment(nightly_id)
    assert after["expansion_round/nightly-expansion"].work_pool_name == "grace-process"  # still the pool's
    assert not any(d.paused for d in after.values())  # stopping serve paused no schedule
    assert after["watch_inbox/inbox-watcher"].work_pool_name is None
    assert len(documents(served_lake)) == 1 and len(documents(param_lake)) == 1
    assert not list(inbox.glob("*.jsonl")) and list((inbox / "processed").glob("*.jsonl"))


@pytest.mark.e2e
def test_grace_serve_needs_a_prefect_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    res = subprocess.run([BIN / "grace", "serve"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "prefect server start" in res.stderr and "PREFECT_API_URL" in res.stderr
