"""QuALITY's metric: exact match on the chosen option (Pang et al., NAACL 2022)."""

from __future__ import annotations


def option_exact_match(predicted_index: int | None, gold_index: int) -> float:
    """1 when the predicted 0-based option index is the gold one; an abstention (``None``) scores 0."""
    return 1.0 if predicted_index is not None and predicted_index == gold_index else 0.0
