"""Edge tables: validation and typing (DESIGN §1).

An edge table has one row per judgement: ``doc_id, source_id, source_kind, claim_id, label``
with ``source_kind ∈ {prior, verified, response}`` and ``label ∈ {entails, contradicts}``.
Only ``entails`` rows become graph edges; ``contradicts`` rows from priors only retype edges.
"""

from __future__ import annotations

import polars as pl

from grace_core.errors import InvalidEdgeTable
from grace_core.graph import pair_key
from grace_core.params import ScoringParams

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


def claim_flags(edges: pl.DataFrame, rejected: pl.DataFrame | None = None, claims: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per (doc_id, claim_id) of ``edges`` and ``claims`` with the facts the status rule needs:

    - ``in_prior``: some prior (document passage or verified claim) entails the claim (c ∈ C_P);
    - ``contradicted``: some prior contradicts it;
    - ``response_contradicted``: some sampled response contradicts it (the low-closeness
      refutation of DESIGN §3 needs it);
    - ``rejected``: reviewers rejected it (``rejected`` lists ``doc_id, claim_id``).
    """
    key = {c: edges.schema[c] for c in ("doc_id", "claim_id")}  # text, or categorical for faster joins (score_edges)
    is_prior = pl.col("source_kind").is_in(PRIOR_KINDS)
    flags = edges.group_by("doc_id", "claim_id").agg(
        in_prior=(is_prior & (pl.col("label") == "entails")).any(),
        contradicted=(is_prior & (pl.col("label") == "contradicts")).any(),
        response_contradicted=((pl.col("source_kind") == "response") & (pl.col("label") == "contradicts")).any(),
    )
    if claims is not None:
        keys = claims.select(pl.col("doc_id").cast(key["doc_id"]), pl.col("claim_id").cast(key["claim_id"])).unique()
        flags = flags.join(keys, on=["doc_id", "claim_id"], how="full", coalesce=True)
    rej = pl.DataFrame(schema=key)
    if rejected is not None:
        rej = rejected.select(pl.col("doc_id").cast(key["doc_id"]), pl.col("claim_id").cast(key["claim_id"])).unique()
    return flags.join(rej.with_columns(rejected=pl.lit(True)), on=["doc_id", "claim_id"], how="left").with_columns(
        pl.col("in_prior", "contradicted", "response_contradicted", "rejected").fill_null(False)
    )


def type_edges(edges: pl.DataFrame, flags: pl.DataFrame, params: ScoringParams) -> pl.DataFrame:
    """The graph edges: the ``entails`` rows, each with ``edge_type`` and ``weight``.

    First rule that holds (DESIGN §1): a prior source → ``anchor``; a response to a claim that a
    prior contradicts and none entails, or that reviewers rejected → ``contra``; a response to a
    claim some prior entails → ``agree``; otherwise ``neutral``. Traversal cost is ``1 / weight``.
    A pair judged twice keeps both rows here; the graph has one edge per pair
    (:func:`grace_core.graph.index_documents`).
    """
    key = pair_key("doc_id", "claim_id")  # one integer join key, not two columns
    ent = (edges.filter(pl.col("label") == "entails").with_columns(_key=key)
           .join(flags.select(key.alias("_key"), "in_prior", "contradicted", "rejected"), on="_key", how="left"))
    etype = (
        pl.when(pl.col("source_kind").is_in(PRIOR_KINDS))
        .then(pl.lit("anchor"))
        .when(pl.col("rejected") | (pl.col("contradicted") & ~pl.col("in_prior")))
        .then(pl.lit("contra"))
        .when(pl.col("in_prior"))
        .then(pl.lit("agree"))
        .otherwise(pl.lit("neutral"))
    )
    weights = {"anchor": params.w_anchor, "agree": params.w_agree, "neutral": params.w_neutral, "contra": params.w_contra}
    return ent.select("doc_id", "source_id", "source_kind", "claim_id", etype.alias("edge_type")).with_columns(
        weight=pl.col("edge_type").replace_strict(weights, return_dtype=pl.Float64)
    )
