"""Small synthetic rows for lake tests (real values of the declared schemas)."""

from __future__ import annotations

import polars as pl


def claims(docs: int, per_doc: int, round_: int, *, prefix: str = "c", kind: str = "response") -> pl.DataFrame:
    """``docs × per_doc`` claim rows of one round, decomposed from one source per document."""
    n = docs * per_doc
    return pl.DataFrame({"i": range(n)}).select(
        doc_id=pl.format("doc{}", pl.col("i") // per_doc),
        claim_id=pl.format("{}{}", pl.lit(prefix), pl.col("i")),
        round=pl.lit(round_, pl.Int32),
        source_id=pl.format("r:{}", pl.col("i") // per_doc),
        source_kind=pl.lit(kind),
        ord=(pl.col("i") % per_doc).cast(pl.Int32),
        text=pl.format("claim {} of round {}", pl.col("i"), pl.lit(round_)),
    )


def edges(claims_df: pl.DataFrame) -> pl.DataFrame:
    """One ``entails`` edge from each claim's source."""
    return claims_df.select("doc_id", "source_id", "source_kind", "claim_id", pl.lit("entails").alias("label"), "round")
