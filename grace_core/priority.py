"""Per-document normalisations, review priority and confidence (DESIGN §2, §4), as Polars
expressions evaluated over a scores table with one row per (doc_id, claim_id)."""

from __future__ import annotations

import polars as pl

from grace_core.params import ScoringParams


def minmax_over_doc(col: str, among: pl.Expr | None = None) -> pl.Expr:
    r"""Min–max normalisation of ``col`` within each document:

    .. math:: \hat{x} = \frac{x - \min_D x}{\max_D x - \min_D x}

    taken over the document's rows where ``among`` holds (all rows when ``None``); 0.5 when all
    those values are equal; null on rows outside ``among``.
    """
    mask = among if among is not None else pl.lit(True)
    x = pl.when(mask).then(pl.col(col))
    lo, hi = x.min().over("doc_id"), x.max().over("doc_id")
    return pl.when(~mask).then(None).when(hi > lo).then((pl.col(col) - lo) / (hi - lo)).otherwise(0.5)


def max_scaled_over_doc(col: str, among: pl.Expr) -> pl.Expr:
    r""":math:`\hat{B}(c) = B(c) / \max_D B` over the rows where ``among`` holds; 0 when that
    maximum is 0; null outside ``among``."""
    hi = pl.when(among).then(pl.col(col)).max().over("doc_id")
    return pl.when(~among).then(None).when(hi > 0).then(pl.col(col) / hi).otherwise(0.0)


def priority(params: ScoringParams) -> pl.Expr:
    r"""Review priority of a boundary claim (DESIGN §4):

    .. math:: Pri(c) = \lambda_c \hat{B}(c) + \lambda_n \hat{N}(c)

    with ``betweenness_norm`` = :math:`\hat{B}` and ``novelty_norm`` = :math:`\hat{N}`; null for
    claims that are not boundary (their normalised inputs are null).
    """
    return params.lambda_c * pl.col("betweenness_norm") + params.lambda_n * pl.col("novelty_norm")


def confidence(params: ScoringParams) -> pl.Expr:
    r"""Confidence of every claim (DESIGN §4), a logistic function of normalised closeness:

    .. math:: \sigma(c) = \frac{1}{1 + e^{-k(\hat{CC}(c) - \delta)}}
    """
    return 1.0 / (1.0 + (-params.k * (pl.col("closeness_norm") - params.delta)).exp())
