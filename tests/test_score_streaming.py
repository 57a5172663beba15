"""``grace score`` reads its input by chunks of whole documents: the output equals scoring the
whole table at once, errors name the row of the file, and a failure leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from benchmarks.synthetic import synthetic_edges
from flows.cli.scoring import score_file
from flows.settings import build_settings
from grace_core.edges import validate_edges
from grace_core.errors import InvalidEdgeTable
from grace_core.scoring import score_edges
from storage.table_files import document_chunks


def mixed_table() -> pl.DataFrame:
    """Documents of very different sizes, rows shuffled so a document's rows are scattered."""
    parts = [synthetic_edges(6, seed=1, n_claims=30), synthetic_edges(1, seed=2, n_claims=200, max_sources=8),
             synthetic_edges(4, seed=3, n_claims=5, n_priors=0, p_response_contradict=0.3)]
    parts = [p.with_columns(doc_id=pl.lit(f"set{i}-") + pl.col("doc_id")) for i, p in enumerate(parts)]
    return pl.concat(parts).sample(fraction=1.0, shuffle=True, seed=3)


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_chunked_output_equals_the_whole_table_scored_at_once(tmp_path: Path, suffix: str) -> None:
    table = mixed_table()
    path = tmp_path / f"edges{suffix}"
    table.write_parquet(path) if suffix == ".parquet" else table.write_csv(path)
    settings = build_settings()
    whole = score_edges(validate_edges(table), settings)
    chunks = list(document_chunks(path, rows_per_chunk=150))
    assert len(chunks) > 5  # the 200-claim document alone is larger than a chunk
    seen = [set(rows["doc_id"].unique()) for rows, _ in chunks]
    assert sum(len(s) for s in seen) == table["doc_id"].n_unique() == len(set().union(*seen))
    counts, n_docs = score_file(path, tmp_path / "chunked.parquet", settings, rows_per_chunk=150)
    counts_once, _ = score_file(path, tmp_path / "once.parquet", settings, rows_per_chunk=10**9)
    chunked = pl.read_parquet(tmp_path / "chunked.parquet")
    assert chunked.equals(whole)
    assert pl.read_parquet(tmp_path / "once.parquet").equals(whole)
    assert n_docs == table["doc_id"].n_unique() and counts.equals(counts_once)
    assert counts["claims"].sum() == whole.height
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary chunk folder left


def test_an_error_in_a_later_chunk_names_its_row_in_the_file_and_writes_nothing(tmp_path: Path) -> None:
    table = mixed_table().with_row_index("i")
    victim = table.filter(pl.col("doc_id") == table["doc_id"].max()).row(-1, named=True)["i"]
    table = table.with_columns(label=pl.when(pl.col("i") == victim).then(pl.lit("maybe")).otherwise(pl.col("label"))).drop("i")
    path = tmp_path / "edges.parquet"
    table.write_parquet(path)
    out = tmp_path / "scores.parquet"
    with pytest.raises(InvalidEdgeTable) as err:
        score_file(path, out, build_settings(), rows_per_chunk=150)
    assert f"row {victim + 1}: field 'label' has unknown value 'maybe'" in str(err.value)
    with pytest.raises(InvalidEdgeTable) as whole:
        validate_edges(table, origin=str(path))
    assert str(whole.value) == str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edges.parquet"]
