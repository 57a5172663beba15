"""Promotion and cascade (DESIGN §5): pure state changes on tables, from the decisions of
:func:`grace_core.decisions.decide`."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from grace_core.errors import InvalidVerdicts

VERIFIED_PREFIX = "v:"


def verified_source_id(claim_id: str) -> str:
    """Source id of the prior a confirmed claim becomes (never equal to a claim id)."""
    return VERIFIED_PREFIX + claim_id


@dataclass(frozen=True)
class Promotion:
    """What a round's decisions change: new verified priors with their self-anchor edges, and
    the claims rejected for good."""

    sources: pl.DataFrame  # doc_id, source_id, source_kind="verified", text, claim_id
    edges: pl.DataFrame  # doc_id, source_id, source_kind, claim_id, label="entails"
    rejected: pl.DataFrame  # doc_id, claim_id


def promote(decisions: pl.DataFrame, claims: pl.DataFrame) -> Promotion:
    """Apply decisions (``doc_id, claim_id, decision``, from :func:`grace_core.decisions.decide`)
    to claims (``doc_id, claim_id, text``).

    confirm → the claim becomes a prior (source kind ``verified``, its own text as passage)
    with an anchor edge to itself; reject → listed in ``rejected`` (Refuted for good, its
    response edges become contra at the next scoring); abstain or pending → no change.
    """
    confirmed = decisions.filter(pl.col("decision") == "confirm").select("doc_id", "claim_id").join(
        claims.select("doc_id", "claim_id", "text"), on=["doc_id", "claim_id"], how="left"
    )
    missing = confirmed.filter(pl.col("text").is_null())
    if missing.height:
        raise InvalidVerdicts(f"confirmed claim {missing['claim_id'][0]!r} of document {missing['doc_id'][0]!r} is not in the claims table")
    sources = confirmed.select(
        "doc_id",
        (pl.lit(VERIFIED_PREFIX) + pl.col("claim_id")).alias("source_id"),
        pl.lit("verified").alias("source_kind"),
        "text",
        "claim_id",
    )
    edges = sources.select("doc_id", "source_id", "source_kind", "claim_id", pl.lit("entails").alias("label"))
    rejected = decisions.filter(pl.col("decision") == "reject").select("doc_id", "claim_id")
    return Promotion(sources=sources, edges=edges, rejected=rejected)


def cascade_candidates(new_sources: pl.DataFrame, scores: pl.DataFrame) -> pl.DataFrame:
    """Pairs for the judge: each newly verified prior × the Boundary claims of its document,
    leaving out every claim verified in the same promotion (reviewers decided those; a
    contradiction between two of them must not undo a confirm). ``scores`` has ``doc_id,
    claim_id, status``."""
    boundary = (
        scores.filter(pl.col("status") == "boundary").select("doc_id", "claim_id")
        .join(new_sources.select("doc_id", "claim_id"), on=["doc_id", "claim_id"], how="anti")
        .rename({"claim_id": "target_id"})
    )
    return (
        new_sources.select("doc_id", "source_id")
        .join(boundary, on="doc_id")
        .select("doc_id", "source_id", pl.col("target_id").alias("claim_id"))
    )


def cascade_edges(judged: pl.DataFrame) -> pl.DataFrame:
    """Edges of the cascade from the judged candidate pairs (``doc_id, source_id, claim_id,
    label``) of newly verified claims, as ``verified`` → claim rows: ``entails`` (an anchor
    edge: after rescoring the claim turns Grounded unreviewed) and ``contradicts`` (a verified
    claim is a prior, so the claim is contradicted by a prior: Refuted unless another prior
    entails it, DESIGN §3). Neutral pairs make no edge."""
    return judged.filter(pl.col("label").is_in(["entails", "contradicts"])).select(
        "doc_id", "source_id", pl.lit("verified").alias("source_kind"), "claim_id", "label"
    ).unique(maintain_order=True)
