"""Values made once per key and kept for the life of a process (thread pools, a loaded model, a
parser connection), shared by its threads; a forked child starts with none, since it has none
of its parent's threads and may inherit a lock some parent thread held."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
S = TypeVar("S")


class ForkFresh(Generic[S]):
    """What a process keeps (``_state``, made by ``fresh()``) and the lock that guards it; a forked
    child starts with new ones, since it has none of its parent's threads and may inherit a lock
    some parent thread held."""

    def __init__(self, fresh: Callable[[], S]) -> None:
        self._fresh = fresh
        self._inherited: list[S] = []
        self._state = fresh()
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        """In a forked child: a new state and a new lock. The parent's state stays referenced,
        never destroyed here (closing the parent's DuckDB connection or torch state in the child
        crashes it)."""
        self._inherited.append(self._state)
        self._state = self._fresh()
        self._lock = threading.Lock()


class PerProcess(ForkFresh[dict[K, V]], Generic[K, V]):
    """``make(key)`` once per ``key`` in this process (:meth:`get`), under a lock, so threads
    asking at once get the same value."""

    def __init__(self, make: Callable[[K], V]) -> None:
        super().__init__(dict)
        self._make = make

    def get(self, key: K) -> V:
        """The process's value for ``key``, made by the first caller."""
        with self._lock:
            if key not in self._state:
                self._state[key] = self._make(key)
            return self._state[key]
