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


class PerProcess(Generic[K, V]):
    """``make(key)`` once per ``key`` in this process (:meth:`get`), under a lock, so threads
    asking at once get the same value."""

    def __init__(self, make: Callable[[K], V]) -> None:
        self._make = make
        self._inherited: list[dict[K, V]] = []
        self._values: dict[K, V] = {}
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        """In a forked child: start with no values and a fresh lock. The parent's values stay
        referenced, never destroyed here (closing the parent's DuckDB connection or torch state in
        the child crashes it)."""
        self._inherited.append(self._values)
        self._values = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V:
        """The process's value for ``key``, made by the first caller."""
        with self._lock:
            if key not in self._values:
                self._values[key] = self._make(key)
            return self._values[key]
