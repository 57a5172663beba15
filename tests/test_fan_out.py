"""grace_core.fan_out.run_all: a list comprehension on a pool that stops at the first failure."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from grace_core.fan_out import run_all


def test_results_come_in_item_order_whatever_finishes_first() -> None:
    with ThreadPoolExecutor(4) as pool:
        assert run_all(pool, lambda x: (time.sleep(0.01 * (5 - x)), x * x)[1], range(5)) == [0, 1, 4, 9, 16]


def test_the_first_failure_stops_the_items_not_started_and_is_raised_after_the_started_ones_end() -> None:
    started, finished = [], []
    lock = threading.Lock()

    def work(x: int) -> int:
        with lock:
            started.append(x)
        if x == 0:
            raise ValueError("item 0 refused")
        time.sleep(0.2)
        with lock:
            finished.append(x)
        return x

    with ThreadPoolExecutor(2) as pool, pytest.raises(ValueError, match="item 0 refused"):
        run_all(pool, work, range(50))
    assert len(started) < 50  # the rest were cancelled
    assert sorted(finished) == sorted(x for x in started if x != 0)  # nothing left running behind the caller
