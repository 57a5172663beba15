"""Audited precision: each round a small random sample of Grounded claims (and of Refuted ones)
goes to the reviewers with the round's deferrals, so that the precision of the Grounded pool
and the share of Refuted claims that are really false can be estimated with an interval
(:func:`grace_core.intervals.wilson_interval`; the lake's ``round_metrics`` view reports both).

- The pool: claims of the audited status in the round's settled scores, decomposed from a
  sampled response (a claim decomposed from a document passage is true by construction),
  not decided for good, not waiting on a reviewer and never audited before.
- The sample: stratified by document with proportional allocation, drawn systematically
  (:func:`stratified_sample`), so every pool claim has the same chance and the plain share is
  the estimate (a self-weighting design).
- Its cost: each sampled claim costs what a deferral costs (DESIGN §4) and is paid from the
  audit budget, apart from the deferral budget; in sample order, a claim that no longer fits
  is skipped.
- Audit claims are assigned and answered like deferrals; their verdicts are decided by the
  one decision model (:mod:`grace_core.decisions`) and promote or refute like any verdict
  (a rejected Grounded claim becomes Refuted for good). Reviewers cannot tell them apart
  (their ranks are interleaved with the deferrals', :func:`interleave`).
"""

from __future__ import annotations

import hashlib

import numpy as np
import polars as pl

from grace_core.models.factory import ModelRoles
from grace_core.params import ScoringParams
from grace_core.review import candidate_costs
from grace_core.round import DocumentTexts
from grace_core.settings_groups import AuditConfig
from grace_core.status import GROUNDED, REFUTED

AUDITED_STATUSES = (GROUNDED, REFUTED)
KEYS = ["doc_id", "claim_id"]





def _key(*parts: object) -> int:
    """A stable pseudo-random 64-bit number of ``parts`` (the same in every run and process)."""
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "big")


def audit_pool(
    scores: pl.DataFrame, status: str, decisions: pl.DataFrame, busy: pl.DataFrame, audited: pl.DataFrame,
    response_claims: pl.DataFrame,
) -> pl.DataFrame:
    """``doc_id, claim_id`` of the claims that may be audited for ``status``: of that status in
    ``scores``, in ``response_claims``, and not in ``decisions`` decided for good (confirm or
    reject), ``busy`` or ``audited`` (each ``doc_id, claim_id``)."""
    decided = decisions.filter(pl.col("decision").is_in(["confirm", "reject"])).select(KEYS)
    out = scores.filter(pl.col("status") == status).select(KEYS).join(response_claims.select(KEYS).unique(), on=KEYS, how="semi")
    for other in (decided, busy.select(KEYS), audited.select(KEYS)):
        out = out.join(other, on=KEYS, how="anti")
    return out.unique(maintain_order=True)


def stratified_sample(pool: pl.DataFrame, n: int, seed: str) -> pl.DataFrame:
    """``n`` rows of ``pool`` (``doc_id, claim_id``, …) drawn at random, stratified by document.

    The pool is ordered by document, documents in a random order and claims in a random order
    within each, then taken systematically: every (N/n)-th row from a random start. So each
    document gets ⌊n·N_d/N⌋ or ⌈n·N_d/N⌉ claims (proportional allocation) and every claim the
    same chance n/N. Deterministic for a given ``seed`` (e.g. the round). All rows when
    ``n`` ≥ N. Rows come back in a random order (not grouped by document)."""
    if n <= 0 or pool.height == 0:
        return pool.head(0)
    ordered = pool.with_columns(
        _doc=pl.col("doc_id").map_elements(lambda d: _key(seed, d), return_dtype=pl.UInt64),
        _claim=pl.struct(KEYS).map_elements(lambda r: _key(seed, r["doc_id"], r["claim_id"]), return_dtype=pl.UInt64),
    ).sort("_doc", "_claim")
    size = ordered.height
    if n >= size:
        picked = ordered
    else:
        step = size / n
        start = (_key(seed, "start") / 2**64) * step
        picked = ordered[np.floor(start + step * np.arange(n)).astype(int).tolist()]
    return picked.sort("_claim").drop("_doc", "_claim")


def within_budget(sample: pl.DataFrame, budget: float) -> pl.DataFrame:
    """The rows of ``sample`` (with ``cost``, in sample order) whose cost still fits in what is
    left of ``budget``, taken in order; a row that does not fit is skipped."""
    left, take = float(budget), []
    for cost in sample["cost"].to_list():
        take.append(cost <= left)
        left -= cost if cost <= left else 0.0
    return sample.filter(pl.Series(take, dtype=pl.Boolean)) if take else sample


def audit_claims(
    scores: pl.DataFrame, decisions: pl.DataFrame, busy: pl.DataFrame, audited: pl.DataFrame, response_claims: pl.DataFrame,
    texts: DocumentTexts, roles: ModelRoles, params: ScoringParams, config: AuditConfig, *,
    round_id: int, review_seconds: float,
) -> pl.DataFrame:
    """The round's audit claims: for each audited status its :func:`stratified_sample` of
    :func:`audit_pool` (``config.audit_size(status)`` claims, seeded by the round), priced like
    a deferral (:func:`grace_core.review.candidate_costs`), the statuses alternating, then
    :func:`within_budget` of ``config.audit_budget``. Returns ``doc_id, claim_id, status,
    priority`` (0: not chosen for value), ``confidence, text, cost, gain`` (0) in sample order.
    ``scores``: the round's settled scores; ``texts``: the claim texts and prior units, asked
    for the sampled claims' documents only; the other tables as :func:`audit_pool` takes them."""
    parts = []
    for status in AUDITED_STATUSES:
        n = config.audit_size(status)
        pool = audit_pool(scores, status, decisions, busy, audited, response_claims) if n > 0 else scores.select(KEYS).head(0)
        sample = stratified_sample(pool, n, f"audit:{round_id}:{status}")
        # the confidences of the sampled documents only (a round's scores have millions of rows)
        confidence = scores.filter(pl.col("doc_id").is_in(sample["doc_id"].unique().implode())).select(*KEYS, "confidence")
        parts.append(
            sample.join(confidence, on=KEYS, how="left")
            .with_columns(status=pl.lit(status), priority=pl.lit(0.0), _turn=pl.int_range(0, pl.len()), _status=pl.lit(len(parts)))
        )
    sample = pl.concat(parts).sort("_turn", "_status").drop("_turn", "_status")
    docs = sample["doc_id"].unique().sort().to_list()
    sample = sample.join(texts.claim_texts(docs).select(*KEYS, "text"), on=KEYS, how="left", maintain_order="left")
    if sample.height == 0:
        return sample.with_columns(cost=pl.lit(None, pl.Float64), gain=pl.lit(None, pl.Float64))
    costed = candidate_costs(sample, texts.prior_units(docs), roles, params, review_seconds=review_seconds)
    order = sample.select(KEYS).with_row_index("_order")
    costed = costed.join(order, on=KEYS).sort("_order").drop("_order")  # candidate_costs groups by document
    return within_budget(costed, config.audit_budget).with_columns(gain=pl.lit(0.0)).select(
        *KEYS, "status", "priority", "confidence", "text", "cost", "gain"
    )


def interleave(deferred: pl.DataFrame, audits: pl.DataFrame, seed: str) -> pl.DataFrame:
    """The round's deferrals and audit claims as one review list: the deferrals keep their
    order, each audit claim goes to a pseudo-random place among them, and ``rank`` is
    renumbered 1… over the whole list (so a reviewer's order gives nothing away). The result
    has the deferrals' columns (``rank`` replaced); those the audit rows lack are null there."""
    cols = [c for c in deferred.columns if c != "rank"]
    slots = deferred.height + 1
    place = [_key(seed, "slot", d, c) % slots - 0.5 for d, c in audits.select(KEYS).iter_rows()]
    merged = pl.concat([
        deferred.select(cols).with_columns(_place=pl.int_range(0, pl.len()).cast(pl.Float64)),
        audits.select([c for c in cols if c in audits.columns]).with_columns(_place=pl.Series(place, dtype=pl.Float64)),
    ], how="diagonal_relaxed").select(*cols, "_place")
    return merged.sort("_place", maintain_order=True).drop("_place").with_columns(rank=pl.int_range(1, pl.len() + 1, dtype=pl.Int64))
