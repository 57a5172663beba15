"""Running one function over many items on a thread pool, as a list comprehension would, but
stopping early on a failure: the one rule the build's documents and the litellm client's calls
share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Executor, wait
from typing import TypeVar

I = TypeVar("I")
R = TypeVar("R")


def run_all(pool: Executor, fn: Callable[[I], R], items: Sequence[I]) -> list[R]:
    """``[fn(x) for x in items]`` with each item submitted to ``pool``; results in item order.
    The first exception cancels the items not yet started and is raised once the started ones
    have ended (nothing is left running behind the caller's back)."""
    futures = [pool.submit(fn, x) for x in items]
    _, pending = wait(futures, return_when=FIRST_EXCEPTION)
    for f in pending:
        f.cancel()
    wait([f for f in futures if not f.cancelled()])
    for f in futures:
        if not f.cancelled() and f.exception() is not None:
            raise f.exception()
    return [f.result() for f in futures]
