"""Declared table schemas: agreement with the domain core, and conform()'s casts and errors."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import pyarrow as pa
import pytest

from grace_core.edges import EDGE_COLUMNS, LABELS, SOURCE_KINDS
from grace_core.errors import InvalidTable
from grace_core.decisions import VERDICTS
from grace_core.scoring import SCORE_COLUMNS
from grace_core.status import STATUSES
from grace_core.review import REVIEW_INPUTS
from grace_core.stored_embeddings import STORED_COLUMNS
from storage.schemas import TABLES, conform

PER_ROUND = {"sources", "claims", "edges", "scores", "scoring_counts", "review_inputs", "audits", "deferrals", "verdicts", "decisions", "reviewer_reliability", "queries", "rounds", "llm_calls"}


def test_the_lake_tables_are_partitioned_by_round_where_per_round() -> None:
    assert set(TABLES) == PER_ROUND | {"documents", "questions", "batches", "evaluations", "reviewers", "embeddings"}
    for spec in TABLES.values():
        assert spec.partitioned == (spec.name in PER_ROUND)
        assert spec.version >= 1
        if spec.partitioned:
            assert not spec.schema.field("round").nullable


def test_tables_agree_with_the_domain_core() -> None:
    assert TABLES["scores"].schema.names == [*SCORE_COLUMNS, "round"]
    assert TABLES["review_inputs"].schema.names == ["doc_id", "claim_id", "round", *REVIEW_INPUTS]
    assert tuple(TABLES["embeddings"].schema.names) == STORED_COLUMNS
    assert set(EDGE_COLUMNS) <= set(TABLES["edges"].schema.names)
    assert TABLES["edges"].allowed == {"source_kind": SOURCE_KINDS, "label": LABELS}
    assert TABLES["scores"].allowed["status"] == STATUSES
    assert TABLES["verdicts"].allowed["verdict"] == VERDICTS


def test_conform_casts_types_and_fills_missing_optional_columns() -> None:
    df = pl.DataFrame({
        "doc_id": ["d"], "claim_id": ["c"], "round": [3], "reviewer": ["r"], "verdict": ["confirm"],
        "seconds_spent": [12], "created_at": [datetime(2026, 1, 1)],
    })
    table = conform("verdicts", df)
    assert table.schema == TABLES["verdicts"].schema
    assert table.column("round").type == pa.int32() and table.column("seconds_spent")[0].as_py() == 12.0
    assert table.column("note").null_count == 1


@pytest.mark.parametrize(
    ("table", "frame", "message"),
    [
        ("claims", {"doc_id": ["d"], "claim_id": ["c"], "round": [1], "source_id": ["s"], "source_kind": ["response"]},
         "table claims: missing required column 'text'"),
        ("edges", {"doc_id": ["d", "d", "d"], "source_id": ["s"] * 3, "source_kind": ["prior", "response", "judge"],
                   "claim_id": ["c"] * 3, "label": ["entails"] * 3, "round": [1] * 3},
         "table edges: row 3: field 'source_kind' has unknown value 'judge' (expected one of prior, verified, response)"),
        ("edges", {"doc_id": ["d", None], "source_id": ["s"] * 2, "source_kind": ["prior"] * 2, "claim_id": ["c"] * 2,
                   "label": ["entails"] * 2, "round": [1] * 2},
         "table edges: row 2: field 'doc_id' is null (required)"),
        ("edges", {"doc_id": ["d"], "source_id": ["s"], "source_kind": ["prior"], "claim_id": ["c"], "label": ["entails"],
                   "round": ["first"]},
         "table edges: field 'round': cannot store large_string as int32"),
        ("edges", {"doc_id": ["d"], "source_id": ["s"], "source_kind": ["prior"], "claim_id": ["c"], "label": ["entails"],
                   "round": [1], "weight": [3.0]},
         "table edges: unknown column(s) weight"),
        ("edge", {"doc_id": ["d"]}, "unknown table 'edge'"),
    ],
)
def test_conform_names_table_row_and_field(table: str, frame: dict, message: str) -> None:
    with pytest.raises(InvalidTable) as err:
        conform(table, pl.DataFrame(frame))
    assert message in str(err.value)
