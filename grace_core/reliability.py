"""Reviewer reliability from overlapping votes: a Dawid–Skene estimate of each reviewer's
accuracy, and the vote weights it implies for :func:`grace_core.decisions.decide`.

Model (Dawid & Skene, "Maximum likelihood estimation of observer error-rates using the EM
algorithm", Applied Statistics 28 (1979) 20–28, in its one-coin form): each claim is true or
false (prior share π true); reviewer j's vote equals the truth with probability a_j whatever the
truth. Only confirm/reject votes count (abstentions say nothing about the truth), each
reviewer's latest vote per claim. EM from the majority vote:

- E-step: for each claim, P(true | votes) ∝ π·Π_j a_j^[v_j = confirm]·(1 − a_j)^[v_j = reject],
  against (1 − π)·Π_j a_j^[v_j = reject]·(1 − a_j)^[v_j = confirm];
- M-step: a_j = (s + Σ_i P(v_ij is right)) / (2s + n_j) (a Beta(s, s) prior, s = ``smoothing``,
  keeps a reviewer with few votes near 1/2), π = mean P(true).

Claims with a single vote carry no information about who is right and are left out of the
estimate. A reviewer without overlapping votes gets no estimate (null).

The optimal weight of a vote under this model is its log-odds, w_j = log(a_j / (1 − a_j)): a
reviewer at chance (a = 1/2) weighs nothing, a reviewer worse than chance counts against.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from grace_core.decisions import latest_votes

RELIABILITY_SCHEMA = {"reviewer": pl.Utf8, "n_overlap": pl.Int64, "accuracy": pl.Float64}
MAX_ACCURACY = 0.99  # weights stay finite: a perfect record is log(99) ≈ 4.6, not infinity


def estimate_reliability(votes: pl.DataFrame, *, iterations: int = 50, smoothing: float = 1.0) -> pl.DataFrame:
    """Each reviewer's estimated accuracy (one-coin Dawid–Skene EM, see the module docstring).

    ``votes``: ``doc_id, claim_id, reviewer, verdict`` (plus ``round, created_at`` to order
    them; each reviewer's latest vote counts). Returns ``reviewer, n_overlap`` (their
    confirm/reject votes on claims with ≥ 2 such votes) and ``accuracy`` (null without
    overlap), one row per reviewer who voted, by reviewer."""
    reviewers = sorted(votes["reviewer"].unique().to_list()) if votes.height else []
    counted = latest_votes(votes).filter(pl.col("verdict").is_in(["confirm", "reject"])) if votes.height else votes
    if counted.height:
        counted = counted.filter(pl.len().over("doc_id", "claim_id") >= 2)
    if counted.height == 0:
        return pl.DataFrame({"reviewer": reviewers, "n_overlap": [0] * len(reviewers), "accuracy": [None] * len(reviewers)},
                            schema=RELIABILITY_SCHEMA)
    items = counted.select("doc_id", "claim_id").unique(maintain_order=True).with_row_index("_item")
    rows = counted.join(items, on=["doc_id", "claim_id"])
    who = sorted(rows["reviewer"].unique().to_list())
    index = {r: j for j, r in enumerate(who)}
    item = rows["_item"].to_numpy().astype(int)
    rater = np.array([index[r] for r in rows["reviewer"].to_list()])
    says_true = (rows["verdict"] == "confirm").to_numpy()
    n_items, n_raters = items.height, len(who)

    # start from the majority vote (ties at 1/2)
    yes = np.bincount(item, weights=says_true.astype(float), minlength=n_items)
    total = np.bincount(item, minlength=n_items)
    p_true = np.where(yes * 2 > total, 1.0, np.where(yes * 2 < total, 0.0, 0.5))
    accuracy = np.full(n_raters, 0.5)
    for _ in range(iterations):
        right = np.where(says_true, p_true[item], 1.0 - p_true[item])
        accuracy = (smoothing + np.bincount(rater, weights=right, minlength=n_raters)) / (2 * smoothing + np.bincount(rater, minlength=n_raters))
        accuracy = np.clip(accuracy, 1 - MAX_ACCURACY, MAX_ACCURACY)
        prior = float(np.clip(p_true.mean(), 0.01, 0.99))
        log_a, log_b = np.log(accuracy[rater]), np.log(1.0 - accuracy[rater])
        log_true = np.bincount(item, weights=np.where(says_true, log_a, log_b), minlength=n_items) + math.log(prior)
        log_false = np.bincount(item, weights=np.where(says_true, log_b, log_a), minlength=n_items) + math.log(1 - prior)
        new = 1.0 / (1.0 + np.exp(log_false - log_true))
        if np.max(np.abs(new - p_true)) < 1e-9:
            p_true = new
            break
        p_true = new
    overlap = np.bincount(rater, minlength=n_raters)
    found = {r: (int(overlap[j]), float(accuracy[j])) for r, j in index.items()}
    return pl.DataFrame(
        {"reviewer": reviewers, "n_overlap": [found.get(r, (0, None))[0] for r in reviewers],
         "accuracy": [found.get(r, (0, None))[1] for r in reviewers]},
        schema=RELIABILITY_SCHEMA,
    )


def vote_weights(reliability: pl.DataFrame) -> dict[str, float]:
    """The log-odds weight log(a / (1 − a)) of each reviewer with an estimate (see the module
    docstring); reviewers without one are left out (they weigh 1 in :func:`decide`)."""
    return {r: math.log(a / (1 - a)) for r, a in reliability.filter(pl.col("accuracy").is_not_null()).select("reviewer", "accuracy").iter_rows()}
