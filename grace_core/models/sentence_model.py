"""The packaged sentence-transformers model (all-MiniLM-L6-v2) run with transformers' BERT and
tokenizer alone: the model's three modules — BERT, mean pooling over the attention mask, unit
length — as its ``modules.json`` declares them, without importing sentence-transformers (which
also imports scikit-learn and SciPy: ~2.5 of the ~7.5 CPU seconds a process spent loading the
embedder). The vectors are those of ``SentenceTransformer.encode`` (tests/models/test_offline_embedder.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grace_core.errors import ModelUnavailable

MODULES = ("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling", "sentence_transformers.models.Normalize")
"""The module types, in order, a packaged model must declare: the only ones implemented here."""


class SentenceModel:
    """BERT → mean pooling → unit length, loaded from a sentence-transformers model folder."""

    def __init__(self, path: Path) -> None:
        import torch
        from transformers import BertModel, BertTokenizerFast

        modules = json.loads((path / "modules.json").read_text())
        pooling = json.loads((path / modules[1]["path"] / "config.json").read_text()) if len(modules) > 1 else {}
        mean_only = {k: v for k, v in pooling.items() if k.startswith("pooling_mode_") and v} == {"pooling_mode_mean_tokens": True}
        if tuple(m["type"] for m in modules) != MODULES or not mean_only:
            raise ModelUnavailable(f"{path}: not a BERT → mean pooling → normalize model ({', '.join(m['type'] for m in modules)})")
        self._torch = torch
        self.tokenizer = BertTokenizerFast.from_pretrained(str(path))
        self.max_seq_length = int(json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"])
        self.bert = BertModel.from_pretrained(str(path)).eval()  # (its pooler layer is loaded, not used)
        self.dim = int(self.bert.config.hidden_size)

    def __call__(self, features: dict[str, Any]) -> Any:
        """Unit vectors (a ``dim``-wide float32 tensor) of a padded batch of ``tokenizer`` features."""
        torch = self._torch
        tokens = self.bert(**features).last_hidden_state
        mask = features["attention_mask"].unsqueeze(-1).to(tokens.dtype)
        mean = (tokens * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)
        return torch.nn.functional.normalize(mean, p=2, dim=1)
