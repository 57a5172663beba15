"""How ``./dev test`` spreads the tests over its pytest-xdist workers (``-n N --dist loadgroup``,
the whole suite as CI runs it and the fast lane alike).

Work units. Most tests are a unit of their own, sent to whichever worker is free. Two kinds of
tests are kept together in one unit, so they run on one worker:

- the tests that load the packaged offline models (torch) or talk to the loopback litellm
  server (:data:`OFFLINE_MODEL_TESTS`): only one process imports torch and litellm and loads
  the model;
- the tests that share a costly module- or session-scoped fixture (a lake built by real rounds,
  a loopback model server…: :data:`SHARED_FIXTURE_MODULES`, one unit per module;
  :data:`DEMO_LAKE_TESTS`; :data:`PER_LAKE_MODULES`, one unit per kind of lake): split over two
  workers, each worker would build the fixture again.

Order. Units are sent longest first (their expected seconds, :data:`EXPECTED_S`, measured
with ``--durations``; a unit not listed counts :data:`DEFAULT_S` a test), so the browser tests and the
real rounds start at once, on every worker, and the many short tests fill in around them at the
end instead of one long test running alone on one worker while the other idles. A worker is
sent its next unit when it holds its last test (xdist's own scheduler sends it when two are
left, which queues a long unit behind a long test while the other worker may be idle).

pytest-xdist 3.8.0 groups ``xdist_group`` marks by appending ``@group`` to the worker's node ids,
which pytest 9.2 no longer reads (pytest-dev/pytest-xdist#1386): the marks are silently ignored.
So units are chosen here, on the controller, from the node id alone, through xdist's
``pytest_xdist_make_scheduler`` hook (tests/conftest.py)."""

from __future__ import annotations

from collections import OrderedDict

from xdist.scheduler import LoadGroupScheduling

OFFLINE_MODELS = "offline-models"
OFFLINE_MODEL_TESTS = (
    "tests/models/",
    "tests/evaluation/test_expansion.py::test_hallucinated_claims_are_those_only_the_corrupted_sentence_has",
)
"""Node id prefixes of the tests that load the offline models or use litellm."""

SHARED_FIXTURE_MODULES = (
    "tests/evaluation/test_expansion.py",  # two_papers: a real eval on two papers
    "tests/flows/test_pipeline.py",  # two_rounds: two real rounds on three papers
    "tests/reliability/test_bad_inputs.py",  # the sample and review lake templates
    "tests/reliability/test_llm_faults.py",  # its loopback model server
    "tests/storage/test_catalog.py",  # two_rounds
    "tests/storage/test_cli.py",  # the filled lake template
)
"""Modules whose tests share a costly module- or session-scoped fixture: one unit each."""

DEMO_LAKE = "demo-lake"
DEMO_LAKE_TESTS = ("tests/test_doc_commands.py", "tests/storage/test_migrate_rebuild.py", "tests/storage/test_backup_round.py")
"""The tests of the README's ``./dev demo`` run and of copies of its lake (tests/conftest.py
``demo_run``, run once per session): one unit."""

PER_LAKE_MODULES = (
    "tests/reliability/test_sql_attacks.py",  # run: every attack on one local lake, then on one S3 lake
)
"""Modules whose shared fixture is built once per kind of lake (its first parameter, ``local``
or ``s3``): one unit per kind, so the two can run at once."""

DEFAULT_S = 1.0
"""Expected seconds of a test in a unit :data:`EXPECTED_S` does not list."""

EXPECTED_S: dict[str, float] = {
    # shared units: their fixture once and their tests
    DEMO_LAKE: 170,
    "tests/reliability/test_llm_faults.py": 165,
    "tests/reliability/test_sql_attacks.py[s3]": 50,
    "tests/flows/test_pipeline.py": 80,
    "tests/storage/test_catalog.py": 80,
    "tests/evaluation/test_expansion.py": 70,
    "tests/reliability/test_bad_inputs.py": 60,
    "tests/reliability/test_sql_attacks.py[local]": 25,
    # tests of their own
    "tests/test_readme.py::test_the_readme_session_is_what_a_fresh_run_prints": 83,
    "tests/ui/test_catch_up.py::test_scans_missed_while_serve_was_down_run_once": 74,
    "tests/ui/test_review_desk.py::test_ingest_from_the_run_form_then_review_in_the_default_ui": 63,
    "tests/flows/test_scale_out.py::test_a_round_on_a_dask_cluster_of_separate_processes_with_the_lake_in_s3": 62,
    "tests/review/test_reassignment.py::test_every_claim_of_an_absent_reviewer_is_reassigned_after_the_deadline_and_decided": 61,
    "tests/ui/test_review_keys.py::test_the_login_then_votes_only_under_the_reviewers_key": 56,
    "tests/review/test_channels.py::test_file_channel_on_an_s3_lake": 44,
    "tests/review/test_accounting.py::test_round_metrics_count_each_deferral_once_and_never_rewrite_a_decided_round": 44,
    "tests/storage/test_concurrency.py::test_kill_9_at_random_moments_loses_and_duplicates_nothing[s3]": 40,
    "tests/storage/test_commit.py::test_writers_in_parallel_processes_lose_no_commit[s3]": 36,
    "tests/review/test_incremental_rounds.py::test_a_round_rescores_only_the_documents_that_changed": 26,
    "tests/flows/test_quiet_terminal.py::test_round_is_quiet_by_default_verbose_with_v_and_its_logs_reach_the_api": 26,
    "tests/flows/test_scale_out.py::test_a_round_on_a_lake_in_s3": 25,
    "tests/storage/test_maintenance.py::test_compaction_keeps_the_rows_and_merges_small_files[s3]": 21,
    "tests/test_cli.py::test_every_subcommand_has_help_and_is_in_the_readme": 20,
    "tests/evaluation/test_budget_curve.py::test_a_budget_sweep_on_one_half_writes_a_report_per_budget_and_the_curve": 19,
    "tests/review/test_audit_rounds.py::test_audit_claims_go_to_review_blind_and_are_decided_like_any_verdict": 18,
    "tests/review/test_adjudication_round.py::test_a_split_vote_is_broken_by_the_adjudicator": 17,
    "tests/flows/test_questions.py::test_an_unanswered_question_becomes_a_responder_question_next_round": 17,
    "tests/flows/test_deployments.py::test_prefect_deploy_all_then_a_process_worker_runs_a_deployment": 16,
    "tests/flows/test_deployments.py::test_grace_serve_runs_deployments_triggered_with_and_without_parameters": 15,
    "tests/storage/test_concurrency.py::test_concurrent_ingests_of_overlapping_batches_store_each_document_once[s3]": 15,
    "tests/flows/test_round_command.py::test_ingest_then_round_runs_one_round_per_call": 15,
}
"""Expected seconds of a unit (a shared unit's name, or a test's node id), from a run's
``--durations`` (setup, call and teardown summed; load ≈ 8): the units that took 15 s or more.
Only the order of the units depends on them: a wrong figure costs time, never a test."""


def worker_group(nodeid: str) -> str | None:
    """The unit of the test ``nodeid`` when it shares one (None: a unit of its own)."""
    if nodeid.startswith(OFFLINE_MODEL_TESTS):
        return OFFLINE_MODELS
    if nodeid.startswith(DEMO_LAKE_TESTS):
        return DEMO_LAKE
    module = nodeid.split("::", 1)[0]
    if module in PER_LAKE_MODULES:
        return f"{module}[{'s3' if '[s3' in nodeid else 'local'}]"
    return module if module in SHARED_FIXTURE_MODULES else None


def expected_s(unit: str, nodeids: dict[str, bool]) -> float:
    """The expected seconds of the unit ``unit`` holding the tests ``nodeids`` (:data:`EXPECTED_S`)."""
    return EXPECTED_S.get(unit, DEFAULT_S * len(nodeids))


class LongestFirstScheduling(LoadGroupScheduling):
    """``--dist loadgroup`` with the units of :func:`worker_group`, sent longest first, a
    worker's next unit when it holds its last test."""

    ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return worker_group(nodeid) or super()._split_scope(nodeid)

    def _assign_work_unit(self, node) -> None:
        if not self.ordered:  # the queue xdist built (largest units first), ordered by expected time once
            units = sorted(self.workqueue.items(), key=lambda unit: -expected_s(*unit))
            self.workqueue = OrderedDict(units)
            self.ordered = True
        super()._assign_work_unit(node)

    def _reschedule(self, node) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) > 1:
            return  # it has a test to run after the one it is running
        self._assign_work_unit(node)
