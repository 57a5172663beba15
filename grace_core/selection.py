"""Choosing what experts review (DESIGN §4): review cost, the deferral rule, budgeted
greedy selection and what the rule and the budget left out."""

from __future__ import annotations

import json

from dataclasses import asdict, dataclass

import numpy as np
import polars as pl

from grace_core.params import ScoringParams


def prior_distance(claim_emb: np.ndarray, prior_emb: np.ndarray) -> np.ndarray:
    r"""Embedding distance of each claim of one document to its nearest prior:

    .. math:: d(c) = \min_{p \in P} \bigl(1 - \cos(e_c, e_p)\bigr)

    ``claim_emb`` (m × d) and ``prior_emb`` (p × d) are embeddings of the document's claims and
    priors. A document without priors has distance 1 (as for orthogonal texts).
    """
    claim_emb = np.asarray(claim_emb, dtype=float)
    if len(prior_emb) == 0:
        return np.ones(len(claim_emb))
    a = claim_emb / np.maximum(np.linalg.norm(claim_emb, axis=1, keepdims=True), 1e-12)
    p = np.asarray(prior_emb, dtype=float)
    p = p / np.maximum(np.linalg.norm(p, axis=1, keepdims=True), 1e-12)
    return (1.0 - a @ p.T).min(axis=1)


def review_cost(distance: np.ndarray, params: ScoringParams, review_seconds: float) -> np.ndarray:
    r"""Cost of sending each claim to review (DESIGN §4), from its :func:`prior_distance` d(c):

    .. math:: Cost(c) = \max\bigl(\varepsilon,\ d(c)\bigr) + \mu\, t(c)

    ``review_seconds`` is t(c), the expected seconds per claim of the reviewer pool (0 for an
    automatic verifier).
    """
    return np.maximum(params.epsilon, np.asarray(distance, dtype=float)) + params.mu * review_seconds


def deferral_gain() -> pl.Expr:
    r"""Gain of deferring a claim, from ``priority``, ``confidence`` (σ) and ``cost`` columns:

    .. math:: gain(c) = \frac{(1 - \sigma(c))\,Pri(c) - Cost(c)}{Cost(c)}

    Deferring beats auto-resolving (:math:`U_{defer} = Pri - Cost > U_{auto} = \sigma Pri`)
    exactly when :math:`(1-\sigma) Pri > Cost`, i.e. when the gain is positive.
    """
    return ((1.0 - pl.col("confidence")) * pl.col("priority") - pl.col("cost")) / pl.col("cost")


def select_for_review(candidates: pl.DataFrame, budget: float) -> pl.DataFrame:
    """Budgeted greedy selection of boundary claims to defer.

    ``candidates`` has ``doc_id, claim_id, priority, confidence, cost`` (boundary claims; rows
    with null priority are ignored). Claims whose deferral rule holds are ranked by
    :func:`deferral_gain` (highest first; ties by claim id, then doc id, so a round is
    deterministic) and each is taken when its cost still fits in what is left of ``budget``: a
    candidate that does not fit is skipped and later, cheaper ones may still fit.

    Returns the selected rows in selection order with ``gain`` and ``rank`` (1-based) added.
    """
    ranked = (  # lazy: only the rows with a positive gain are materialised (a round's pool has millions)
        candidates.lazy().filter(pl.col("priority").is_not_null())
        .with_columns(gain=deferral_gain())
        .filter(pl.col("gain") > 0)
        .sort(["gain", "claim_id", "doc_id"], descending=[True, False, False])
        .collect()
    )
    costs = ranked["cost"].to_numpy()
    take = np.zeros(len(costs), dtype=bool)
    left = float(budget)
    for i, c in enumerate(costs):
        if c <= left:
            take[i] = True
            left -= c
    return ranked.filter(pl.Series(take)).with_columns(rank=pl.int_range(1, pl.len() + 1, dtype=pl.Int64))


@dataclass(frozen=True)
class CostReport:
    r"""What the deferral rule and the budget did to one selection's candidates (DESIGN §4):
    ``candidates`` priced; ``deferred`` taken at a total cost of ``spent`` out of ``budget``;
    ``blocked_by_cost`` failing the rule :math:`(1-\sigma)Pri > Cost`, with the smallest and
    largest shortfall :math:`Cost - (1-\sigma)Pri` among them (``None`` when none is blocked);
    ``over_budget`` meeting the rule but not fitting in what was left of the budget."""

    candidates: int
    deferred: int
    spent: float
    budget: float
    blocked_by_cost: int
    shortfall_min: float | None
    shortfall_max: float | None
    over_budget: int

    @property
    def all_blocked(self) -> bool:
        """Every candidate failed the rule: nothing could be deferred, whatever the budget."""
        return self.candidates > 0 and self.blocked_by_cost == self.candidates

    def as_dict(self) -> dict:
        """The report as plain values (a JSON object)."""
        return asdict(self)

    @classmethod
    def recorded(cls, detail_json: str | None) -> CostReport | None:
        """The report a dispatch recorded in its ``rounds`` row (``detail_json``'s ``cost``, as
        :meth:`as_dict` wrote it); None for a row that recorded none."""
        detail = json.loads(detail_json or "{}")
        found = detail.get("cost") if isinstance(detail, dict) else None
        return cls(**found) if found else None


def cost_report(candidates: pl.DataFrame, chosen: pl.DataFrame, budget: float) -> CostReport:
    r"""The :class:`CostReport` of :func:`select_for_review` over ``candidates`` (``priority,
    confidence, cost``; rows with null priority are not candidates) that chose ``chosen``. A
    candidate is blocked by cost when its gain is not positive, i.e. its shortfall

    .. math:: shortfall(c) = Cost(c) - (1 - \sigma(c))\,Pri(c) \ge 0

    (the rule needs :math:`(1-\sigma) Pri > Cost`); one that meets the rule and was not chosen
    did not fit in the budget left."""
    priced = candidates.lazy().filter(pl.col("priority").is_not_null()).with_columns(
        shortfall=pl.col("cost") - (1.0 - pl.col("confidence")) * pl.col("priority"), gain=deferral_gain())
    figures = priced.select(
        n=pl.len(), blocked=(pl.col("gain") <= 0).sum(), passing=(pl.col("gain") > 0).sum(),
        low=pl.col("shortfall").filter(pl.col("gain") <= 0).min(), high=pl.col("shortfall").filter(pl.col("gain") <= 0).max(),
    ).collect().row(0, named=True)
    spent = float(chosen["cost"].sum()) if chosen.height else 0.0
    return CostReport(
        candidates=int(figures["n"]), deferred=chosen.height, spent=spent, budget=float(budget),
        blocked_by_cost=int(figures["blocked"] or 0),
        shortfall_min=None if figures["low"] is None else float(figures["low"]),
        shortfall_max=None if figures["high"] is None else float(figures["high"]),
        over_budget=int(figures["passing"] or 0) - chosen.height,
    )
