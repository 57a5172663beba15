"""The one path by which GRACE calls hosted or local models: litellm, with a content-addressed
cache, a cost ledger, bounded retries, a concurrency limit, a per-round spend cap, single-flight
de-duplication (identical requests in flight are made once) and redaction of secrets in every
recorded or raised error.

Every reply is bounded: a whole-request deadline (``request_timeout_s``, wall clock; litellm's
own ``timeout`` is per socket read, so a server dripping one byte every 0.5 s never tripped a
3 s timeout), a size cap (``max_reply_bytes``, enforced as the bytes arrive), and usage figures
checked before they reach the ledger (a reply claiming negative or NaN tokens cannot lower the
spend).

``LITELLM_LOCAL_MODEL_COST_MAP`` is set before litellm is imported so that the import does not
fetch the price map from the network.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpcore  # noqa: E402
import httpx  # noqa: E402
import litellm  # noqa: E402
import numpy as np  # noqa: E402
import openai  # noqa: E402
from litellm.exceptions import ModelNotMappedError  # noqa: E402
from litellm.llms.custom_httpx.http_handler import get_ssl_configuration  # noqa: E402
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


MAX_CALL_TOKENS = 10_000_000
"""Most prompt or completion tokens one call may claim: five times the longest context window
offered today (2M). Usage above it, negative, fractional, NaN or infinite is not plausible."""


class _Bounds(threading.local):
    """The limits of the call running on this thread (``budget_s`` None outside a call): its
    seconds from its first network operation to the whole reply, its deadline (set by that
    operation: litellm's own work before it, e.g. 1.3 s of imports on a process's first call on
    the 2-core machine, does not count), the most bytes it may receive, the bytes received so
    far and why the reply was refused, if it was (too large, compressed)."""

    budget_s: float | None = None
    deadline: float | None = None
    max_bytes: int = 0
    received: int = 0
    refused: str | None = None
    cut_by_deadline: bool = False

    def start(self, budget_s: float | None, max_bytes: int = 0) -> None:
        """Limits for the call about to run on this thread (None: no call)."""
        self.budget_s, self.deadline, self.max_bytes, self.received, self.refused = budget_s, None, max_bytes, 0, None
        self.cut_by_deadline = False


    def remaining(self, timeout: float | None, kind: type[Exception]) -> float | None:
        """``timeout`` shortened to the time left before the deadline; ``kind`` (an httpcore
        timeout) once it has passed. ``cut_by_deadline`` says whether the deadline, not
        ``timeout``, bounds this operation (so a timeout it raises is the deadline's)."""
        if self.budget_s is None:
            return timeout
        if self.deadline is None:
            self.deadline = time.monotonic() + self.budget_s
        left = self.deadline - time.monotonic()
        self.cut_by_deadline = timeout is None or left <= timeout
        if left <= 0:
            raise kind("the whole-request deadline passed")
        return left if timeout is None else min(timeout, left)


_BOUNDS = _Bounds()


class _BoundedStream(httpcore.NetworkStream):
    """A connection whose every read and write ends by the call's deadline and whose reads
    count towards the call's byte cap (status line, headers and body, as received)."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._stream.read(max_bytes, _BOUNDS.remaining(timeout, httpcore.ReadTimeout))
        if _BOUNDS.budget_s is not None:
            _BOUNDS.received += len(data)
            if _BOUNDS.received > _BOUNDS.max_bytes:
                _BOUNDS.refused = f"larger than {_BOUNDS.max_bytes} bytes"
                raise httpcore.ReadError(f"reply {_BOUNDS.refused}")
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _BOUNDS.remaining(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> httpcore.NetworkStream:
        return _BoundedStream(self._stream.start_tls(ssl_context, server_hostname, _BOUNDS.remaining(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _BoundedBackend(httpcore.NetworkBackend):
    """httpcore's socket backend with :class:`_BoundedStream` connections, connecting by the deadline."""

    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _BoundedStream(self._backend.connect_tcp(host, port, _BOUNDS.remaining(timeout, httpcore.ConnectTimeout),
                                                        local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> httpcore.NetworkStream:
        return _BoundedStream(self._backend.connect_unix_socket(path, _BOUNDS.remaining(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def _identity_only(response: httpx.Response) -> None:
    """Refuse a compressed reply before its body is read: the byte cap counts bytes as received,
    so a small gzip body could still unpack to gigabytes (the client asks for ``identity``)."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity") and _BOUNDS.budget_s is not None:
        _BOUNDS.refused = f"compressed ({encoding}) although an uncompressed reply was asked for"
        raise httpx.DecodingError(f"reply {_BOUNDS.refused}")


def bounded_http_client() -> httpx.Client:
    """The HTTP client litellm's OpenAI-SDK path (``openai/…`` models, OpenAI-compatible
    ``api_base``) uses in this process (``litellm.client_session``): its connections end every
    read and write by the running call's deadline and count its bytes (:class:`_Bounds`), and it
    asks for uncompressed replies. Proxies from the environment are honoured but bypass the byte
    cap; the deadline still holds there (:meth:`LiteLLMClient._bounded`)."""
    ssl_context = httpx.create_ssl_context(verify=get_ssl_configuration())  # litellm's certificate settings
    limits = httpx.Limits()
    transport = httpx.HTTPTransport(verify=ssl_context)
    transport._pool = httpcore.ConnectionPool(  # httpx has no public way to pass httpcore a network backend
        ssl_context=ssl_context, network_backend=_BoundedBackend(), max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
    )
    return httpx.Client(transport=transport, verify=ssl_context, follow_redirects=True, headers={"Accept-Encoding": "identity"},
                        event_hooks={"response": [_identity_only]})


_HTTP_CLIENT: PerProcess[None, httpx.Client] = PerProcess(lambda _: bounded_http_client())

DEADLINE_SLACK_S = 10.0
"""How long past ``request_timeout_s`` a caller waits for a call's thread at most: litellm's own
work before and after the HTTP exchange (its first call in a process imports and builds clients,
1.3 s measured on the 2-core machine under load). On the OpenAI-SDK path the connection ends the
call at its deadline itself, well within this."""


def _plausible_tokens(value: Any) -> int | None:
    """A token count as a reply states it (None or absent: 0), or None when it is not one:
    negative, fractional, NaN, infinite, not a number, or above :data:`MAX_CALL_TOKENS`."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value != int(value) or not 0 <= value <= MAX_CALL_TOKENS:
        return None
    return int(value)


class _Transient(Exception):
    """A call failed in a way worth retrying after a backoff (429, timeout, 5xx, connection)."""

    def __init__(self, outcome: CallOutcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


def _as_transient(exc: Exception, cfg: ModelConfig) -> _Transient | None:
    """``exc`` of a call as a retryable :class:`_Transient` (a reply cut off at the deadline, one
    over ``max_reply_bytes``, a timeout, 429, connection error or 5xx), or None."""
    if _BOUNDS.refused:
        return _Transient("malformed", f"reply refused: {_BOUNDS.refused}")
    if isinstance(exc, openai.APITimeoutError):
        if _BOUNDS.cut_by_deadline:
            return _Transient("timeout", f"timeout: no whole reply within the {cfg.request_timeout_s:g} s deadline")
        return _Transient("timeout", f"timeout: {exc}")
    if isinstance(exc, openai.RateLimitError):
        return _Transient("rate_limited", f"rate limited: {exc}")
    if isinstance(exc, openai.APIConnectionError):
        return _Transient("error", f"connection error: {exc}")
    if isinstance(exc, openai.APIStatusError) and exc.status_code >= 500:
        return _Transient("error", f"server error {exc.status_code}: {exc}")
    return None


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
        litellm.client_session = _HTTP_CLIENT.get(None)
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
        """Add a call's cost (finite and ≥ 0, see :meth:`_charge`) to the round's spend."""
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

    def _charge(self, model: str, msgs: list[dict[str, str]], response: Any, completion_cap: int) -> tuple[int, int, float | None, str | None]:
        """(prompt tokens, completion tokens, cost, None) as the reply states them, checked before
        they reach the ledger; when they are not plausible (negative, NaN, infinite, fractional,
        above :data:`MAX_CALL_TOKENS`, or a cost that is not a finite amount ≥ 0), the most the
        call could have cost instead — one token per byte of the prompt (no token is shorter) and
        ``completion_cap`` completion tokens — and why: the reply is then refused as malformed. So
        a reply claiming negative usage never lowers the spend, and the spend cap still fires."""
        usage = getattr(response, "usage", None)
        prompt = _plausible_tokens(getattr(usage, "prompt_tokens", None))
        completion = _plausible_tokens(getattr(usage, "completion_tokens", None))
        if prompt is not None and completion is not None:
            try:
                cost = self._cost(response)
            except Exception:  # noqa: BLE001 (litellm could not price the stated usage: priced below instead)
                cost = math.nan
            if cost is None or (math.isfinite(cost) and cost >= 0):
                return prompt, completion, cost, None
            problem = f"cost {cost!r} is not a finite amount ≥ 0"
        else:
            problem = (f"prompt_tokens={getattr(usage, 'prompt_tokens', None)!r}, "
                       f"completion_tokens={getattr(usage, 'completion_tokens', None)!r}")
        prompt = min(sum(len(m["content"].encode("utf-8")) for m in msgs), MAX_CALL_TOKENS)
        cfg = self.config
        try:
            per_token = (CostPerToken(input_cost_per_token=cfg.input_cost_per_token or 0.0, output_cost_per_token=cfg.output_cost_per_token or 0.0)
                         if cfg.input_cost_per_token is not None or cfg.output_cost_per_token is not None else None)
            cost = float(sum(litellm.cost_per_token(model=model, prompt_tokens=prompt, completion_tokens=completion_cap,
                                                    custom_cost_per_token=per_token)))
        except ModelNotMappedError:
            cost = None
        return prompt, completion_cap, cost, (f"usage not plausible ({problem}): charged the most the call could cost "
                                              f"({prompt} prompt, {completion_cap} completion tokens)")

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
                text, resp = self._bounded(invoke, msgs)
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

            prompt_tokens, completion_tokens, cost, implausible = self._charge(
                model, msgs, resp, 0 if role == "embedder" else self.config.max_tokens)
            self._count(calls=1, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
            self._add_spend(cost)
            if implausible is not None:
                error = self.redact.error_text(implausible)
                record("malformed", error, text, prompt_tokens, completion_tokens, cost)
                continue
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

    def _bounded(self, invoke: Callable[[list[dict[str, str]]], tuple[str, Any]], msgs: list[dict[str, str]]) -> tuple[str, Any]:
        """``invoke(msgs)`` within the call's limits (:class:`_Bounds`: ``request_timeout_s`` from
        its first network operation, ``max_reply_bytes``), on a thread of its own that the caller
        waits for ``request_timeout_s`` + :data:`DEADLINE_SLACK_S` at most. The connections of
        :func:`bounded_http_client` end the call at the deadline themselves; the wait bounds the
        call whatever path litellm takes (a provider with its own HTTP client, a proxy): such a
        call left running past it is no longer waited for, and its cost not counted."""
        cfg = self.config
        done: Future[tuple[str, Any]] = Future()

        def run() -> None:
            _BOUNDS.start(cfg.request_timeout_s, cfg.max_reply_bytes)
            try:
                done.set_result(self._invoke(invoke, msgs, cfg))
            except BaseException as exc:  # noqa: BLE001 (handed to the waiting caller)
                done.set_exception(exc)
            finally:
                _BOUNDS.start(None)

        threading.Thread(target=run, name="grace-llm-call", daemon=True).start()
        try:
            return done.result(timeout=cfg.request_timeout_s + DEADLINE_SLACK_S)
        except TimeoutError:
            raise _Transient("timeout", f"timeout: no whole reply within the {cfg.request_timeout_s:g} s deadline") from None

    @staticmethod
    def _invoke(invoke: Callable[[list[dict[str, str]]], tuple[str, Any]], msgs: list[dict[str, str]], cfg: ModelConfig) -> tuple[str, Any]:
        """Call ``invoke`` and turn retryable litellm errors into :class:`_Transient`: a reply
        cut off at the deadline is a ``timeout``, one over ``max_reply_bytes`` ``malformed``."""
        try:
            text, resp = invoke(msgs)
        except Exception as exc:
            transient = _as_transient(exc, cfg)
            if transient is None:
                raise
            raise transient from None
        if len(text) > cfg.max_reply_bytes:  # a provider whose HTTP client litellm makes itself: checked once read
            raise _Transient("malformed", f"reply refused: {len(text)} characters, more than {cfg.max_reply_bytes} bytes")
        return text, resp
