"""The one path by which GRACE calls hosted or local models: litellm, with a content-addressed
cache, a cost ledger, bounded retries, a concurrency limit, a per-round spend cap, single-flight
de-duplication (identical requests in flight are made once) and redaction of secrets in every
recorded or raised error.

``LITELLM_LOCAL_MODEL_COST_MAP`` is set before litellm is imported so that the import does not
fetch the price map from the network.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402
import numpy as np  # noqa: E402
import openai  # noqa: E402
from litellm.exceptions import ModelNotMappedError  # noqa: E402
from litellm.types.utils import CostPerToken  # noqa: E402

from grace_core.errors import MalformedReply, ModelUnavailable, SpendCapReached, UnknownModelPrice  # noqa: E402
from grace_core.fan_out import run_all  # noqa: E402
from grace_core.models.cache import CallCache, CallOutcome, CallRecord, UsageStats  # noqa: E402
from grace_core.models.config import ModelConfig  # noqa: E402
from grace_core.models.hashing import call_key, canonical_json  # noqa: E402
from grace_core.models.redaction import Redactor  # noqa: E402
from grace_core.models.roles import Outcome  # noqa: E402
from grace_core.per_process import PerProcess  # noqa: E402

litellm.suppress_debug_info = True

T = TypeVar("T")
I = TypeVar("I")
R = TypeVar("R")

Completion = Callable[..., Any]
"""``litellm.completion`` or a function with its signature (tests wrap it to add ``mock_response``)."""

_FATAL = (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError)

log = logging.getLogger("grace.models")


@dataclass(frozen=True, slots=True)
class CallResult(Generic[T]):
    """The parsed reply of one logical request (after retries), or why there is none."""

    value: T | None
    outcome: Outcome
    error: str | None = None


_CALL_WORKER = threading.local()


def _mark_call_worker() -> None:
    _CALL_WORKER.active = True


def _on_call_worker() -> bool:
    return getattr(_CALL_WORKER, "active", False)


_WORKERS: PerProcess[int, ThreadPoolExecutor] = PerProcess(
    lambda concurrency: ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="grace-llm", initializer=_mark_call_worker)
)


def call_workers(concurrency: int) -> ThreadPoolExecutor:
    """The process's ``concurrency`` threads that make model calls, started on first use and
    kept for the process's life (a forked child starts its own): every client with this limit
    (the build's chunk tasks, the stages of one document and of the next) queues its calls on
    them, so the limit holds for the process and no stage pays for starting threads."""
    return _WORKERS.get(concurrency)


class _Transient(Exception):
    """A call failed in a way worth retrying after a backoff (429, timeout, 5xx, connection)."""

    def __init__(self, outcome: CallOutcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


class LiteLLMClient:
    """Calls models through litellm for every role of the litellm backend.

    ``cache`` receives one :class:`CallRecord` per attempt; a request whose key has an ``ok``
    record is answered from it without a call, and a request whose key is already in flight
    waits for that call's result instead of making its own. ``completion`` and ``embedding``
    default to ``litellm.completion`` and ``litellm.embedding``. Errors are recorded, returned
    and raised only after redaction (the configured key, secret-looking environment variables,
    credential headers), see :mod:`grace_core.models.redaction`.
    """

    def __init__(
        self,
        config: ModelConfig,
        cache: CallCache,
        *,
        completion: Completion | None = None,
        embedding: Completion | None = None,
    ) -> None:
        self.config = config
        self.cache = cache
        self._completion = completion or litellm.completion
        self._embedding = embedding or litellm.embedding
        self._lock = threading.Lock()
        self._stats = UsageStats()
        self._in_flight: dict[str, Future[CallResult[Any]]] = {}
        self._failures: list[tuple[str, str, str | None]] = []
        key = config.api_key.get_secret_value() if config.api_key is not None else None
        self.redact = Redactor.from_environment(os.environ, key)

    # -- rounds, spend and usage ------------------------------------------------------------

    def start_round(self, round_no: int, spent_usd: float = 0.0) -> None:
        """Tag later calls with ``round_no`` and reset the counters; ``spent_usd`` is what the
        round already spent in earlier units of work (the cap is per round, not per task)."""
        cap = self.config.spend_cap_usd
        with self._lock:
            self._stats = UsageStats(round=round_no, cost_usd=spent_usd, spend_cap_reached=cap is not None and spent_usd >= cap)
            self._failures = []

    def usage(self) -> UsageStats:
        """Counters of the current round."""
        with self._lock:
            return self._stats

    @property
    def spend_cap_reached(self) -> bool:
        """True once the round's spend reached ``spend_cap_usd``: no new calls start."""
        return self.usage().spend_cap_reached

    def ensure_within_cap(self) -> None:
        """Raise :class:`SpendCapReached` if the round's spend cap is used up."""
        stats = self.usage()
        if stats.spend_cap_reached:
            raise SpendCapReached(
                f"round {stats.round}: spend cap of ${self.config.spend_cap_usd:.4f} reached "
                f"(${stats.cost_usd:.4f} spent); no new model calls this round"
            )

    def _count(self, **increments: float) -> None:
        with self._lock:
            s = self._stats
            self._stats = replace(s, **{k: getattr(s, k) + v for k, v in increments.items()})

    def _add_spend(self, cost: float | None) -> None:
        with self._lock:
            spent = self._stats.cost_usd + (cost or 0.0)
            cap = self.config.spend_cap_usd
            newly = cap is not None and spent >= cap and not self._stats.spend_cap_reached
            self._stats = replace(self._stats, cost_usd=spent, spend_cap_reached=cap is not None and spent >= cap)
            round_no = self._stats.round
        if newly:
            log.warning("round %d: spend cap reached: $%.6f spent of a $%.6f cap; no new model calls this round "
                        "(the items they were for are retried next round)", round_no, spent, cap)

    # -- concurrency --------------------------------------------------------------------------

    def map(self, fn: Callable[[I], R], items: Sequence[I]) -> list[R]:
        """``[fn(x) for x in items]`` on the process's call workers (:func:`call_workers`), so
        at most ``concurrency`` calls are in flight however many threads map at once; the first
        exception cancels the items not yet started and is raised once the started ones end.
        Called from a call worker itself (a call that maps), the items run in that worker."""
        if not items or _on_call_worker():
            return [fn(x) for x in items]
        return run_all(call_workers(self.config.concurrency), fn, items)

    # -- calls ---------------------------------------------------------------------------------

    def _auth(self) -> dict[str, Any]:
        cfg = self.config
        out: dict[str, Any] = {}
        if cfg.api_base:
            out["api_base"] = cfg.api_base
        if cfg.api_key is not None:
            out["api_key"] = cfg.api_key.get_secret_value()
        return out

    def _pricing(self) -> dict[str, float]:
        """The configured per-token prices as litellm's per-call pricing: litellm then prices the
        reply itself as it answers (``_hidden_params["response_cost"]``, which :meth:`_cost`
        reads) instead of looking up an unknown model in its price map, and nothing prices it a
        second time (≈ 3.5 ms less CPU per call; the model stage is CPU-bound on small machines)."""
        cfg = self.config
        if cfg.input_cost_per_token is None and cfg.output_cost_per_token is None:
            return {}
        return {"input_cost_per_token": cfg.input_cost_per_token or 0.0, "output_cost_per_token": cfg.output_cost_per_token or 0.0}

    def complete_json(
        self,
        role: str,
        model: str,
        messages: list[dict[str, str]],
        parse: Callable[[str], T],
        *,
        temperature: float = 0.0,
        sample: int = 0,
    ) -> CallResult[T]:
        """Send ``messages`` to ``model`` and ``parse`` the reply text (``parse`` raises
        :class:`MalformedReply` on a bad reply, which is retried with a correction turn).
        ``sample`` tells apart repeated samples of the same prompt (it is part of the cache key
        and shifts the seed)."""
        params: dict[str, Any] = {
            "temperature": temperature,
            "max_tokens": self.config.max_tokens,
            "seed": self.config.seed + sample,
        }
        if self.config.json_mode:
            params["response_format"] = {"type": "json_object"}
        key = call_key(model, messages, {**params, "sample": sample})

        def invoke(msgs: list[dict[str, str]]) -> tuple[str, Any]:
            resp = self._completion(
                model=model, messages=msgs, timeout=self.config.request_timeout_s, max_retries=0,
                drop_params=True, **params, **self._auth(), **self._pricing(),
            )
            choices = getattr(resp, "choices", None) or []
            return (choices[0].message.content or "") if choices else "", resp

        return self._run(role, model, key, messages, params, invoke, parse)

    def embed(self, model: str, texts: Sequence[str]) -> CallResult[np.ndarray]:
        """Embed ``texts`` with a litellm embedding model in one call; the vectors are kept in
        the cache record as base64 float32."""
        payload = [{"role": "input", "content": t} for t in texts]
        key = call_key(model, payload, {"embedding": True})

        def invoke(_: list[dict[str, str]]) -> tuple[str, Any]:
            resp = self._embedding(model=model, input=list(texts), timeout=self.config.request_timeout_s, max_retries=0, **self._auth())
            vecs = np.asarray([d["embedding"] for d in resp.data], dtype=np.float32)
            text = canonical_json({"shape": list(vecs.shape), "b64": base64.b64encode(vecs.tobytes()).decode("ascii")})
            return text, resp

        def parse(text: str) -> np.ndarray:
            obj = json.loads(text)
            arr = np.frombuffer(base64.b64decode(obj["b64"]), dtype=np.float32).reshape(obj["shape"])
            if arr.shape[0] != len(texts):
                raise MalformedReply(f"expected {len(texts)} vectors, got {arr.shape[0]}")
            return arr

        return self._run("embedder", model, key, payload, {"embedding": True}, invoke, parse)

    def check_prices(self, models: Sequence[str]) -> None:
        """With a spend cap set, raise :class:`UnknownModelPrice` for a model litellm cannot price
        (unless per-token costs are configured), before any call is made."""
        cfg = self.config
        if cfg.spend_cap_usd is None or cfg.input_cost_per_token is not None or cfg.output_cost_per_token is not None:
            return
        for model in models:
            try:
                litellm.get_model_info(model)
            except ModelNotMappedError:
                raise UnknownModelPrice(
                    f"a spend cap is set but litellm has no price for {model!r}: set GRACE_INPUT_COST_PER_TOKEN "
                    "and GRACE_OUTPUT_COST_PER_TOKEN"
                ) from None

    def _cost(self, response: Any) -> float | None:
        """The reply's cost in dollars: as litellm priced it while answering (with
        :meth:`_pricing`), else priced here (an embedding reply, a mocked one); None for a model
        litellm has no price for and no configured price."""
        priced = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        if priced is not None:
            return float(priced)
        cfg = self.config
        try:
            if cfg.input_cost_per_token is not None or cfg.output_cost_per_token is not None:
                per_token = CostPerToken(
                    input_cost_per_token=cfg.input_cost_per_token or 0.0,
                    output_cost_per_token=cfg.output_cost_per_token or 0.0,
                )
                return float(litellm.completion_cost(completion_response=response, custom_cost_per_token=per_token))
            return float(litellm.completion_cost(completion_response=response))
        except ModelNotMappedError:
            return None

    def _record(self, **fields: Any) -> None:
        with self._lock:
            self.cache.put(CallRecord(round=self._stats.round, created_at=datetime.now(UTC), **fields))

    @staticmethod
    def _parse_hit(hit: CallRecord | None, parse: Callable[[str], T]) -> T | None:
        if hit is None or hit.response is None:
            return None
        try:
            return parse(hit.response)
        except MalformedReply:
            return None

    def _run(
        self,
        role: str,
        model: str,
        key: str,
        messages: list[dict[str, str]],
        params: dict[str, Any],
        invoke: Callable[[list[dict[str, str]]], tuple[str, Any]],
        parse: Callable[[str], T],
    ) -> CallResult[T]:
        """Answer from the cache; else wait for the identical request already in flight (single
        flight, keyed by the cache key); else make the call."""
        with self._lock:
            flight = self._in_flight.get(key)
            if flight is None:
                value = self._parse_hit(self.cache.get(key), parse)
                if value is None:
                    mine: Future[CallResult[Any]] = Future()
                    self._in_flight[key] = mine
        if flight is not None:
            result = flight.result()  # the leader's exception, if it raised, is raised here too
            self._count(deduplicated=1)
            return self._noted(role, result)
        if value is not None:
            self._count(cache_hits=1)
            return CallResult(value, "ok")
        try:
            result = self._call(role, model, key, messages, params, invoke, parse)
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        else:
            mine.set_result(result)
            return self._noted(role, result)
        finally:
            with self._lock:
                del self._in_flight[key]

    def _noted(self, role: str, result: CallResult[T]) -> CallResult[T]:
        if result.outcome in ("failed", "capped"):
            with self._lock:
                self._failures.append((role, result.outcome, result.error))
        return result

    def failures(self) -> list[tuple[str, str, str | None]]:
        """(role, outcome, redacted error) of every item that failed or was capped since
        :meth:`start_round`."""
        with self._lock:
            return list(self._failures)

    def _call(
        self,
        role: str,
        model: str,
        key: str,
        messages: list[dict[str, str]],
        params: dict[str, Any],
        invoke: Callable[[list[dict[str, str]]], tuple[str, Any]],
        parse: Callable[[str], T],
    ) -> CallResult[T]:
        """Call with retries: transient errors back off, malformed replies get a correction
        turn, fatal errors raise, anything else fails the item."""
        msgs = list(messages)
        error = "no attempt made"
        backoffs = 0
        for attempt in range(self.config.max_retries + 1):
            if self.spend_cap_reached:
                self._count(capped_items=1)
                return CallResult(None, "capped", error="spend cap reached")
            request = self.redact.values(canonical_json({"messages": msgs, "params": params}))
            started = time.perf_counter()

            def record(outcome: CallOutcome, error: str | None, text: str | None = None, prompt: int = 0,
                       completion: int = 0, cost: float | None = None) -> None:
                self._record(key=key, role=role, model=model, attempt=attempt, request=request, response=text,
                             prompt_tokens=prompt, completion_tokens=completion, cost_usd=cost,
                             latency_s=time.perf_counter() - started, outcome=outcome, error=error)

            try:
                text, resp = self._invoke(invoke, msgs)
                if role != "embedder":  # the reply is parsed as it is recorded, so a replay from the cache gives the same value
                    text = self.redact.values(text) or ""
            except _Transient as exc:
                error = self.redact.error_text(str(exc))
                self._count(calls=1)
                record(exc.outcome, error)
                if attempt < self.config.max_retries:
                    time.sleep(min(self.config.retry_backoff_s * 2**backoffs, self.config.retry_backoff_max_s))
                    backoffs += 1
                continue
            except _FATAL as exc:
                error = self.redact.error_text(exc)
                self._count(calls=1)
                record("error", error)
                raise ModelUnavailable(f"{role} model {model!r}: {error}") from None
            except Exception as exc:  # noqa: BLE001 (any other error of the call fails this item only)
                error = self.redact.error_text(exc)
                self._count(calls=1, failed_items=1)
                record("error", error)
                return CallResult(None, "failed", error=error)

            usage = getattr(resp, "usage", None)
            prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
            completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
            cost = self._cost(resp)
            self._count(calls=1, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
            self._add_spend(cost)
            try:
                value = parse(text)
            except MalformedReply as exc:
                error = self.redact.error_text(f"malformed reply: {exc}")
                record("malformed", error, text, prompt_tokens, completion_tokens, cost)
                msgs = [*messages, {"role": "assistant", "content": text},
                        {"role": "user", "content": f"That reply was not valid ({exc}). Reply again with only the JSON object asked for."}]
                continue
            record("ok", None, text, prompt_tokens, completion_tokens, cost)
            return CallResult(value, "ok")
        self._count(failed_items=1)
        return CallResult(None, "failed", error=error)

    @staticmethod
    def _invoke(invoke: Callable[[list[dict[str, str]]], tuple[str, Any]], msgs: list[dict[str, str]]) -> tuple[str, Any]:
        """Call ``invoke`` and turn retryable litellm errors into :class:`_Transient`."""
        try:
            return invoke(msgs)
        except openai.APITimeoutError as exc:
            raise _Transient("timeout", f"timeout: {exc}") from None
        except openai.RateLimitError as exc:
            raise _Transient("rate_limited", f"rate limited: {exc}") from None
        except openai.APIConnectionError as exc:
            raise _Transient("error", f"connection error: {exc}") from None
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                raise _Transient("error", f"server error {exc.status_code}: {exc}") from None
            raise
