"""The sub-flows of a round run without heartbeat threads of their own (flows.expansion.subflows_without_heartbeats):
Prefect joins a flow run's heartbeat thread when the run ends, and that thread sleeps in steps of one
second, so each sub-flow with heartbeats ended up to a second late. Runs against a real temporary
Prefect server."""

from __future__ import annotations

import threading

import pytest
from prefect import flow

from flows.expansion import subflows_without_heartbeats


def heartbeat_threads() -> int:
    """Live threads running Prefect's flow-run heartbeat loop (started as ``Thread(target=context.run,
    args=(heartbeat_loop,))``)."""
    return sum(1 for t in threading.enumerate() if getattr(next(iter(getattr(t, "_args", ()) or ()), None), "__name__", "") == "heartbeat_loop")


@flow
def child() -> int:
    return heartbeat_threads()


@flow
def parent() -> tuple[int, int, int]:
    own = heartbeat_threads()
    with_heartbeats = child()
    with subflows_without_heartbeats():
        without = child()
    return own, with_heartbeats, without


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_server")
def test_a_subflow_inside_runs_without_a_heartbeat_thread_of_its_own_and_the_parent_keeps_its_own() -> None:
    own, with_heartbeats, without = parent()
    assert own == 1  # the parent's (what makes the check meaningful: Prefect starts one per flow run)
    assert with_heartbeats == 2  # a sub-flow outside the helper starts its own beside the parent's
    assert without == 1  # inside, only the parent's
