"""The packaged sentence-transformers model (all-MiniLM-L6-v2) run with torch, the ``tokenizers``
library and the model's ``safetensors`` weights alone: its three modules — a BERT encoder, mean
pooling over the attention mask, unit length — as its ``modules.json`` declares them. Neither
sentence-transformers (which also imports scikit-learn and SciPy) nor transformers is imported:
importing transformers' BERT took 2.3 of the ~3.5 CPU seconds a process spent loading the
embedder, for a forward pass of a few dozen lines. The vectors are those of
``SentenceTransformer.encode`` (tests/models/test_offline_embedder.py).

The encoder runs traced (``torch.jit.trace``, once per precision): the same aten operations with
the same results, bit for bit, at any batch and token count, but run by TorchScript's
interpreter, which holds the GIL only to enter and leave a pass. Run eagerly, a pass takes the
GIL back between each of its ~80 operations, and each time waits for whatever Python another
thread runs (a model call's reply, sentence splitting, Prefect): two forward threads beside one
pure-Python thread on two cores made 2.1 passes/s eagerly and 5.6 traced (8.2 and 8.6 alone).
"""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from grace_core.errors import ModelUnavailable

MODULES = ("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling", "sentence_transformers.models.Normalize")
"""The module types, in order, a packaged model must declare: the only ones implemented here."""
ENCODER = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
"""The BERT variant implemented here (``config.json``): post-norm layers, erf GELU, learned absolute positions."""


class SentenceModel:
    """BERT → mean pooling → unit length, loaded from a sentence-transformers model folder."""

    def __init__(self, path: Path) -> None:
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        modules = json.loads((path / "modules.json").read_text())
        pooling = json.loads((path / modules[1]["path"] / "config.json").read_text()) if len(modules) > 1 else {}
        mean_only = {k: v for k, v in pooling.items() if k.startswith("pooling_mode_") and v} == {"pooling_mode_mean_tokens": True}
        if tuple(m["type"] for m in modules) != MODULES or not mean_only:
            raise ModelUnavailable(f"{path}: not a BERT → mean pooling → normalize model ({', '.join(m['type'] for m in modules)})")
        config = json.loads((path / "config.json").read_text())
        if any(config.get(k, v) != v for k, v in ENCODER.items()):
            raise ModelUnavailable(f"{path / 'config.json'}: not a BERT encoder of this kind ({ENCODER})")
        self._torch = torch
        self.max_seq_length = int(json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"])
        self._tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self._tokenizer.enable_truncation(self.max_seq_length)  # [CLS] and [SEP] included, as BertTokenizerFast truncates
        self._tokenizer.no_padding()  # (the file's own settings pad and truncate to 128)
        self._bert = _Bert(config, load_file(str(path / "model.safetensors")))
        self._traced: dict[bool, Callable[[Any], Any]] = {}
        self._tracing = threading.Lock()
        self.dim = int(config["hidden_size"])

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, ``[CLS] … [SEP]``, at most ``max_seq_length`` of them. Each
        text is first cut to ``max_seq_length × 101`` characters: WordPiece makes one token at
        least of every word of at most 100 characters (a longer word is one ``[UNK]``), so the
        tokens kept come from that prefix (but after runs of whitespace), and the tokenizer never
        holds a whole 60 MB text in memory (it asked for 957 MB and aborted the process)."""
        cut = self.max_seq_length * 101
        return [e.ids for e in self._tokenizer.encode_batch([t[:cut] for t in texts])]

    def __call__(self, ids: Sequence[Sequence[int]], *, bfloat16: bool = False) -> Any:
        """Unit vectors (a ``dim``-wide float32 tensor) of texts of one token count (``ids``:
        as many ids each; the embedder batches them so, and nothing is padded). With
        ``bfloat16`` the matrix products run in bfloat16 (``torch.autocast``), the rest in float32."""
        torch = self._torch
        if len({len(seq) for seq in ids}) != 1:
            raise ValueError(f"a forward pass takes texts of one token count, got {sorted({len(seq) for seq in ids})}")
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16):
            hidden = self.encoder(bfloat16)(torch.from_numpy(np.array(ids, dtype=np.int64))).float()  # pooled in float32; numpy converts the id lists ~3x faster than torch.tensor, holding the GIL
        return torch.nn.functional.normalize(hidden.mean(1), p=2, dim=1)

    def encoder(self, bfloat16: bool) -> Callable[[Any], Any]:
        """The BERT encoder (token ids → last hidden states) of one precision, traced on first
        use (see the module docstring): the trace records the operations of a 2 × 8 pass, with
        the batch and token counts as the tensors' own, so it runs any other shape."""
        traced = self._traced.get(bfloat16)
        if traced is not None:
            return traced
        torch = self._torch
        with self._tracing:
            if bfloat16 not in self._traced:
                sample = torch.ones((2, 8), dtype=torch.long)

                def encode(tokens: Any) -> Any:
                    return self._bert(tokens, bfloat16=bfloat16)

                with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16), warnings.catch_warnings():
                    warnings.simplefilter("ignore", torch.jit.TracerWarning)
                    warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 (pinned) deprecates tracing; it still runs
                    self._traced[bfloat16] = torch.jit.trace(encode, (sample,), check_trace=False)
            return self._traced[bfloat16]


class _Bert:
    """BERT's encoder for inference (Devlin et al., 2019, §3; the layout of transformers'
    ``BertModel``): embeddings of token, position and segment 0, layer-normed; then per layer
    multi-head self-attention over all the tokens (nothing is padded) and a GELU feed-forward
    block, each added to its input and layer-normed. Its pooler is not used. The query, key and
    value projections are one product (their weights stacked at load: the same values, fewer
    calls), and a bfloat16 copy of every projection's weights is made once, which autocast would
    otherwise cast again in every pass (weights that need no gradient are not in its cache)."""

    def __init__(self, config: dict[str, Any], weights: dict[str, Any]) -> None:
        import torch

        self._heads = int(config["num_attention_heads"])
        self._eps = float(config["layer_norm_eps"])
        w = {k.removeprefix("bert."): v for k, v in weights.items()}
        self._layers = int(config["num_hidden_layers"])
        for i in range(self._layers):
            at = f"encoder.layer.{i}.attention.self"
            for part in ("weight", "bias"):
                w[f"{at}.qkv.{part}"] = torch.cat([w.pop(f"{at}.{n}.{part}") for n in ("query", "key", "value")])
        self._w = w

    @cached_property
    def _w16(self) -> dict[str, Any]:
        """bfloat16 copies of the projection weights, made on the first bfloat16 pass (a
        float32 embedder never holds them)."""
        import torch

        return {k: v.to(torch.bfloat16) for k, v in self._w.items() if k.startswith("encoder.") and k.endswith(".weight") and v.dim() == 2}

    def _norm(self, x: Any, name: str) -> Any:
        from torch.nn.functional import layer_norm

        return layer_norm(x, x.shape[-1:], self._w[f"{name}.weight"], self._w[f"{name}.bias"], self._eps)

    def _dense(self, x: Any, name: str, bfloat16: bool) -> Any:
        from torch.nn.functional import linear

        return linear(x, (self._w16 if bfloat16 else self._w)[f"{name}.weight"], self._w[f"{name}.bias"])

    def __call__(self, tokens: Any, *, bfloat16: bool) -> Any:
        """Last hidden states (batch × tokens × hidden) of ``tokens`` (batch × tokens)."""
        from torch.nn.functional import gelu, scaled_dot_product_attention

        w = self._w
        batch, width = tokens.shape
        x = w["embeddings.word_embeddings.weight"][tokens] + w["embeddings.position_embeddings.weight"][:width]
        x = self._norm(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
        for i in range(self._layers):
            at = f"encoder.layer.{i}"
            qkv = self._dense(x, f"{at}.attention.self.qkv", bfloat16).view(batch, width, 3, self._heads, -1).permute(2, 0, 3, 1, 4)
            context = scaled_dot_product_attention(qkv[0], qkv[1], qkv[2]).transpose(1, 2).reshape(batch, width, -1)
            x = self._norm(x + self._dense(context, f"{at}.attention.output.dense", bfloat16), f"{at}.attention.output.LayerNorm")
            inner = gelu(self._dense(x, f"{at}.intermediate.dense", bfloat16))
            x = self._norm(x + self._dense(inner, f"{at}.output.dense", bfloat16), f"{at}.output.LayerNorm")
        return x
