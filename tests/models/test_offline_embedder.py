"""The offline embedder's own batching (texts sorted by token count, token-budget batches) gives
the vectors of ``SentenceTransformer.encode``, on which the offline thresholds were calibrated;
one embedder per configuration serves a whole process, threads embedding at once; one encode's
forward passes run on the process's forward workers, as many at once as there are workers."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from grace_core.models.config import ModelConfig
from grace_core.models.offline_embedder import (
    WORKER_NICENESS,
    ForwardWorkers,
    OfflineEmbedder,
    _load_sentence_model,
    embed_precision,
    forward_workers,
    load_sentence_model,
    native_bfloat16,
    packaged_model_dir,
)
from grace_core.errors import InvalidSettings
from grace_core.models.factory import embedder_identity
from grace_core.models.hashing import text_hash
from grace_core.models.offline_support import source_units


@pytest.fixture(scope="module")
def texts(qasper_papers: list[dict]) -> list[str]:
    """48 real sentences of varied length, a whole section (over the 256-token limit) and a word."""
    paper = qasper_papers[0]
    units = [u for s in paper["sections"] for p in s["paragraphs"] for u in source_units(p)]
    section = "\n\n".join(max(paper["sections"], key=lambda s: sum(map(len, s["paragraphs"])))["paragraphs"])
    return list(dict.fromkeys(units[:48] + [section, "Embeddings"]))


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_vectors_match_sentence_transformers_encode(texts: list[str], precision: str) -> None:
    from sentence_transformers import SentenceTransformer

    model = load_sentence_model(1)
    assert len(model.tokenize(texts[-2:-1])[0]) == model.max_seq_length  # truncated, as sentence-transformers does
    embedder = OfflineEmbedder(threads=1, precision=precision)  # bfloat16 runs emulated on a CPU without it, slower
    assert embedder.precision == precision
    vecs = embedder.embed(texts)
    assert embedder.encoded == len(texts) and vecs.dtype == np.float32
    reference = SentenceTransformer(str(packaged_model_dir()), device="cpu")
    assert reference.max_seq_length == model.max_seq_length
    ref = reference.encode(texts, batch_size=8, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    assert float((vecs * ref).sum(axis=1).min()) >= 0.9999
    if precision == "float32":
        np.testing.assert_allclose(vecs, ref, atol=1e-5)  # the same vectors, not merely close in angle
    else:
        assert float(np.abs(vecs - ref).max()) > 1e-5  # the passes did run in bfloat16
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize(("batch_size", "batch_tokens"), [(1, 512), (64, 64), (7, 10_000)])
def test_batching_does_not_change_vectors(texts: list[str], batch_size: int, batch_tokens: int, precision: str) -> None:
    """No pass pads, so a text's vector does not depend on the texts it is batched with (padding
    moved bfloat16 vectors by up to 1e-3). On the development machine they are equal bit for bit
    in both precisions; the bounds here leave room for CPUs whose matrix kernels sum in another
    order for another batch size."""
    base = OfflineEmbedder(threads=1, precision=precision).embed(texts)
    vecs = OfflineEmbedder(threads=1, batch_size=batch_size, batch_tokens=batch_tokens, precision=precision).embed(texts[::-1])[::-1]
    if precision == "float32":
        np.testing.assert_allclose(vecs, base, rtol=0, atol=1e-6)
    else:
        assert float((vecs * base).sum(axis=1).min()) >= 0.99999


def test_every_forward_pass_holds_texts_of_one_token_count(texts: list[str]) -> None:
    embedder = OfflineEmbedder(threads=1, workers=1, batch_size=5, batch_tokens=10_000)
    passes = embedder._model = _Recorder(embedder._model)  # type: ignore[assignment]
    embedder.embed(texts)
    widths = [{len(seq) for seq in ids} for ids in passes.batches]
    assert all(len(w) == 1 for w in widths), widths
    assert sum(map(len, passes.batches)) == len(texts) and max(map(len, passes.batches)) <= 5
    assert len({next(iter(w)) for w in widths}) > 5  # the texts had many token counts


class _Recorder:
    """The model, recording the token ids of every forward pass."""

    def __init__(self, model: Any) -> None:
        self.model, self.batches = model, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def __call__(self, ids: list, **kw: Any) -> Any:
        self.batches.append(list(ids))
        return self.model(ids, **kw)


def test_auto_precision_is_bfloat16_where_the_cpu_has_it_and_stored_distances_name_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("grace_core.models.offline_embedder.native_bfloat16", native_bfloat16)  # this CPU's answer, not the suite's pin
    import torch

    assert native_bfloat16() == bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())  # torch agrees
    auto = OfflineEmbedder(threads=1).precision
    assert auto == ("bfloat16" if native_bfloat16() else "float32") == embed_precision("auto")
    assert embed_precision("float32") == "float32" and embed_precision("bfloat16") == "bfloat16"
    with pytest.raises(InvalidSettings, match="embed_precision 'float16'"):
        embed_precision("float16")
    with pytest.raises(ValidationError, match="embed_precision"):
        ModelConfig(embed_precision="float16")
    by_precision = {p: embedder_identity(ModelConfig(embed_precision=p)) for p in ("float32", "bfloat16", "auto")}
    assert by_precision["float32"].startswith("offline:") and by_precision["bfloat16"] == by_precision["float32"] + ":bfloat16"
    assert by_precision["auto"] == by_precision[auto]  # distances measured in one precision are measured again in the other


def test_a_forward_pass_takes_texts_of_one_token_count() -> None:
    model = load_sentence_model(1)
    a, b = model.tokenize(["Embeddings.", "Sentence embeddings of claims."])
    assert len(a) != len(b)
    with pytest.raises(ValueError, match="one token count"):
        model([a, b])
    assert tuple(model([a, a]).shape) == (2, model.dim)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_the_traced_encoder_gives_the_eager_encoders_states_bit_for_bit_at_any_shape(precision: str) -> None:
    import torch

    model, bfloat16 = load_sentence_model(1), precision == "bfloat16"
    traced = model.encoder(bfloat16)
    assert traced is model.encoder(bfloat16)  # traced once
    generator = torch.Generator().manual_seed(7)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16):
        for shape in [(2, 8), (1, 40), (7, 11), (32, 3), (3, 256)] * 3:  # repeated: TorchScript's executor re-plans after its first runs
            tokens = torch.randint(1000, 20_000, shape, generator=generator)
            assert torch.equal(traced(tokens), model._bert(tokens, bfloat16=bfloat16)), shape


def test_a_process_shares_one_embedder_and_its_cache_per_configuration(texts: list[str]) -> None:
    config = ModelConfig()
    first = OfflineEmbedder.from_config(config)
    assert OfflineEmbedder.from_config(config) is first  # a second task, or the next stage, gets the same one
    assert OfflineEmbedder.from_config(config.model_copy(update={"embed_batch_size": 7})) is not first
    first.embed(texts[:5])
    before = first.encoded
    OfflineEmbedder.from_config(config).embed(texts[:5])
    assert first.encoded == before  # the build's vectors serve the scoring


def test_threads_embedding_at_once_get_the_vectors_of_one_thread(texts: list[str]) -> None:
    alone = OfflineEmbedder(threads=1).embed(texts)
    shared = OfflineEmbedder(threads=1)
    start = threading.Barrier(3)

    def embed(part: list[str]) -> np.ndarray:
        start.wait()
        return shared.embed(part)

    with ThreadPoolExecutor(3) as pool:
        parts = list(pool.map(embed, [texts, texts[::-1], texts[::2]]))
    for vecs, order in zip(parts, [texts, texts[::-1], texts[::2]], strict=True):
        want = alone[[texts.index(t) for t in order]]
        assert float((vecs * want).sum(axis=1).min()) >= 0.9999
    assert shared.encoded == len(texts), "a text another thread is encoding is waited for, not encoded again"


class _Passes:
    """The model, counting the forward passes running at once and the threads they run on;
    with ``meet``, the first two passes each wait (at most 30 s) until the other is running."""

    def __init__(self, model: Any, meet: bool = False) -> None:
        self.model, self.calls, self.running, self.most, self.threads = model, 0, 0, 0, set()
        self.meet = threading.Barrier(2, timeout=30) if meet else None
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def __call__(self, ids: list, **kw: Any) -> Any:
        with self.lock:
            self.calls += 1
            self.running += 1
            self.most = max(self.most, self.running)
            self.threads.add(threading.current_thread().name)
            wait = self.meet is not None and self.calls <= 2
        try:
            if wait:
                self.meet.wait()  # type: ignore[union-attr]
            return self.model(ids, **kw)
        finally:
            with self.lock:
                self.running -= 1


def test_one_encode_runs_its_forward_passes_on_two_workers_at_once_with_the_same_vectors(texts: list[str]) -> None:
    alone = OfflineEmbedder(threads=1, workers=1, batch_size=4).embed(texts)
    two = OfflineEmbedder(threads=1, workers=2, batch_size=4)
    passes = two._model = _Passes(two._model, meet=True)  # type: ignore[assignment]
    vecs = two.embed(texts)
    assert passes.most == 2 and len(passes.threads) == 2 and all(t.startswith("grace-embed") for t in passes.threads)
    np.testing.assert_allclose(vecs, alone, atol=1e-6)
    assert two.encode_cpu_s > 0


def test_threads_embedding_at_once_never_run_more_passes_than_workers(texts: list[str]) -> None:
    one = OfflineEmbedder(threads=1, workers=1, batch_size=4)
    passes = one._model = _Passes(one._model)  # type: ignore[assignment]
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(one.embed, [texts[:16], texts[16:32], texts[32:]]))
    assert passes.most == 1 and one.encoded == len(texts)


def test_a_prefetched_text_is_encoded_once_and_gives_the_vectors_of_embed(texts: list[str]) -> None:
    alone = OfflineEmbedder(threads=1).embed(texts)
    ahead = OfflineEmbedder(threads=1)
    ahead.prefetch(texts[:30])
    vecs = ahead.embed(texts)  # waits for the prefetch's texts still being encoded, encodes the rest
    assert ahead.encoded == len(texts)
    assert float((vecs * alone).sum(axis=1).min()) >= 0.9999


def test_passes_someone_waits_for_run_before_prefetched_ones() -> None:
    workers = ForwardWorkers(1)
    release, ran = threading.Event(), []
    blocker = workers.now.submit(release.wait, 30)
    queued = [workers.later.submit(ran.append, "later 1"), workers.now.submit(ran.append, "now 1"),
              workers.later.submit(ran.append, "later 2"), workers.now.submit(ran.append, "now 2")]
    release.set()
    for f in [blocker, *queued]:
        f.result(timeout=30)
    assert ran == ["now 1", "now 2", "later 1", "later 2"]


def test_a_hurried_prefetch_runs_before_other_prefetches_and_behind_the_urgent_passes_queued_before() -> None:
    workers = ForwardWorkers(1)
    release, ran = threading.Event(), []
    blocker = workers.now.submit(release.wait, 30)
    first, second = workers.lane(urgent=False), workers.lane(urgent=False)
    queued = [first.submit(ran.append, "first 1"), second.submit(ran.append, "second 1"), workers.now.submit(ran.append, "now 1")]
    workers.hurry(second)
    queued += [second.submit(ran.append, "second 2"), workers.now.submit(ran.append, "now 2")]
    release.set()
    for f in [blocker, *queued]:
        f.result(timeout=30)
    assert ran == ["now 1", "second 1", "second 2", "now 2", "first 1"]


def _within(seconds: float, condition: Callable[[], bool]) -> bool:
    """Whether ``condition()`` holds within ``seconds`` (polled)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_an_embed_waiting_for_a_prefetch_hurries_it(texts: list[str]) -> None:
    embedder = OfflineEmbedder(threads=1, workers=1, batch_size=8, batch_tokens=100_000)  # the prefetch is one pass
    workers = forward_workers(1)
    release, later = threading.Event(), threading.Event()
    blocker = workers.now.submit(release.wait, 30)  # holds the one worker until the embed waits for the prefetch
    behind = workers.lane(urgent=False).submit(later.wait, 30)  # a prefetch queued before, held until the embed is done
    assert _within(30, blocker.running)
    embedder.prefetch(texts[:8])
    key = text_hash(texts[0])
    assert _within(30, lambda: key in embedder._in_flight and any(p.lane is embedder._in_flight[key][1] for p in workers._waiting))
    prefetch = embedder._in_flight[key][1]
    with ThreadPoolExecutor(1) as pool:
        vecs = pool.submit(embedder.embed, texts[:8])
        _within(10, lambda: prefetch.urgent)  # the embed waits for the prefetch (else it fails below)
        release.set()
        try:
            done = vecs.result(timeout=30)  # not hurried, the prefetch's passes would wait behind the held one
        finally:
            later.set()
    behind.result(timeout=30)
    blocker.result(timeout=30)
    assert embedder.encoded == 8 and done.shape == (8, embedder.dim)


def test_forward_workers_run_below_the_threads_that_make_calls() -> None:
    nice = ForwardWorkers(1).now.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result(timeout=30)
    assert nice == min(19, os.getpriority(os.PRIO_PROCESS, 0) + WORKER_NICENESS)


def test_tasks_starting_at_once_load_the_model_once() -> None:
    _load_sentence_model.cache_clear()
    start = threading.Barrier(2)

    def load(_: int):
        start.wait()
        return load_sentence_model(1)

    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(load, range(2))
    assert a is b
