"""grace_core.per_process.PerProcess: one value per key per process, shared by its threads; a
forked child makes its own."""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

from grace_core.per_process import PerProcess


def test_threads_asking_at_once_get_the_one_value_made() -> None:
    made = []
    start = threading.Barrier(4)
    values = PerProcess(lambda key: made.append(key) or object())

    def ask(_: int) -> object:
        start.wait()
        return values.get("k")

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(ask, range(4)))
    assert made == ["k"] and all(v is got[0] for v in got)
    assert values.get("other") is not got[0]


def test_a_forked_child_makes_its_own_even_when_a_parent_thread_held_the_lock() -> None:
    values = PerProcess(lambda key: (os.getpid(), key))
    assert values.get(1) == (os.getpid(), 1)
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=lambda: (values._lock.acquire(), held.set(), release.wait(), values._lock.release()))
    holder.start()
    held.wait()
    try:
        pid = os.fork()
        if pid == 0:  # the lock was held by a parent thread that the child does not have
            signal.alarm(10)
            os._exit(0 if values.get(1) == (os.getpid(), 1) else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        holder.join()
    assert os.waitstatus_to_exitcode(status) == 0
