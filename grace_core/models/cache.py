"""The model-call cache and cost ledger: one :class:`CallRecord` per attempted model call.

The storage layer implements :class:`CallCache` over the lake's ``llm_calls`` table;
:class:`MemoryCallCache` is the in-process implementation (tests, benchmarks, one-off runs).
The litellm client serialises every ``get``/``put`` under its own lock, so an implementation
need not be thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

CallOutcome = Literal["ok", "malformed", "rate_limited", "timeout", "error"]


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One model call (one attempt) as the ``llm_calls`` table stores it.

    ``key`` is the content address of the *logical* request (model, first messages, parameters)
    shared by all attempts at it, so a later run finds the attempt that succeeded; ``attempt``
    counts from 0. ``request`` is the canonical JSON actually sent (retries after a malformed
    reply carry the correction turn). ``response`` is the reply text (for embeddings, a JSON
    object with base64 float32 vectors), None when the call raised. ``cost_usd`` is None when
    litellm has no price for the model and no per-token cost is configured.
    """

    key: str
    role: str
    round: int
    model: str
    attempt: int
    request: str
    response: str | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    latency_s: float
    outcome: CallOutcome
    error: str | None
    created_at: datetime


@runtime_checkable
class CallCache(Protocol):
    """Where the litellm client looks up earlier replies and records every call."""

    def get(self, key: str) -> CallRecord | None:
        """The most recent record with this key whose outcome is ``ok``, or None."""
        ...

    def put(self, record: CallRecord) -> None:
        """Store one call record, whatever its outcome."""
        ...


class MemoryCallCache:
    """A :class:`CallCache` in a dict and a list (lost when the process ends)."""

    def __init__(self) -> None:
        self.records: list[CallRecord] = []
        self._ok: dict[str, CallRecord] = {}

    def get(self, key: str) -> CallRecord | None:
        """The latest ``ok`` record of ``key``."""
        return self._ok.get(key)

    def put(self, record: CallRecord) -> None:
        """Append ``record``; an ``ok`` one becomes the answer for its key."""
        self.records.append(record)
        if record.outcome == "ok":
            self._ok[record.key] = record


@dataclass(frozen=True, slots=True)
class UsageStats:
    """What the current round cost so far: calls made (attempts), cache hits, requests answered
    by an identical request in flight (``deduplicated``), items that failed or were stopped by
    the cap, tokens and USD (``cost_usd`` includes what earlier tasks of the round spent)."""

    round: int = 0
    calls: int = 0
    cache_hits: int = 0
    deduplicated: int = 0
    failed_items: int = 0
    capped_items: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    spend_cap_reached: bool = False
