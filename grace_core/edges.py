"""Edge tables: validation and typing (DESIGN §1).

An edge table has one row per judgement: ``doc_id, source_id, source_kind, claim_id, label``
with ``source_kind ∈ {prior, verified, response}`` and ``label ∈ {entails, contradicts}``.
Only ``entails`` rows become graph edges; ``contradicts`` rows only retype edges and decide
statuses (the graphs and their edge types: :func:`grace_core.graph.build_graphs`).
"""

from __future__ import annotations

import polars as pl

from grace_core.errors import InvalidEdgeTable

EDGE_COLUMNS = ("doc_id", "source_id", "source_kind", "claim_id", "label")
SOURCE_KINDS = ("prior", "verified", "response")
PRIOR_KINDS = ("prior", "verified")
LABELS = ("entails", "contradicts")
EDGE_TYPES = ("anchor", "agree", "neutral", "contra")


def _first_row(df: pl.DataFrame, mask: pl.Expr, rows: pl.Series | None = None) -> tuple[int, dict] | None:
    hit = df.with_row_index("_row").filter(mask).head(1)
    if hit.height == 0:
        return None
    rec = hit.row(0, named=True)
    at = int(rec.pop("_row"))
    return (at + 1 if rows is None else int(rows[at])), rec


def validate_edges(edges: pl.DataFrame, origin: str = "edge table", rows: pl.Series | None = None) -> pl.DataFrame:
    """Check an edge table and return it with string columns, or raise :class:`InvalidEdgeTable`
    naming ``origin``, the 1-based row and the field of the first problem found. ``rows`` gives
    each row's number in ``origin`` when ``edges`` is a part of it (default: its position)."""
    missing = [c for c in EDGE_COLUMNS if c not in edges.columns]
    if missing:
        raise InvalidEdgeTable(f"{origin}: missing column(s) {', '.join(missing)} (need {', '.join(EDGE_COLUMNS)})")
    try:
        df = edges.select(pl.col(c).cast(pl.Utf8) for c in EDGE_COLUMNS)
    except pl.exceptions.PolarsError as exc:
        raise InvalidEdgeTable(f"{origin}: columns must be text: {exc}") from None
    for col in EDGE_COLUMNS:
        hit = _first_row(df, pl.col(col).is_null(), rows)
        if hit:
            raise InvalidEdgeTable(f"{origin}: row {hit[0]}: field '{col}' is null")
    for col, allowed in (("source_kind", SOURCE_KINDS), ("label", LABELS)):
        hit = _first_row(df, ~pl.col(col).is_in(allowed), rows)
        if hit:
            raise InvalidEdgeTable(
                f"{origin}: row {hit[0]}: field '{col}' has unknown value {hit[1][col]!r} (expected one of {', '.join(allowed)})"
            )
    shared = pl.col("claim_id").is_in(pl.col("source_id").unique().implode())  # a claim id that is a source id in some document
    claims = df.filter(shared).select("doc_id", pl.col("claim_id").alias("node_id")).unique()  # usually none: no (document, id) pairs to compare
    sources = df.select("doc_id", pl.col("source_id").alias("node_id")).unique() if claims.height else claims
    both = sources.join(claims, on=["doc_id", "node_id"], how="semi")
    if both.height:
        doc, node = both.sort(["doc_id", "node_id"]).row(0)
        hit = _first_row(df, (pl.col("doc_id") == doc) & (pl.col("claim_id") == node), rows)
        raise InvalidEdgeTable(
            f"{origin}: row {hit[0] if hit else '?'}: field 'claim_id': id {node!r} is used both as a source and as a claim in document {doc!r}"
        )
    return df
