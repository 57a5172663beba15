"""Batch ingestion into the lake: whole or nothing, exactly once per content, local and S3."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from grace_core.errors import InvalidBatch
from storage.lake import Lake
from storage.ingest import ingest_batch
from storage.schemas import conform


def jsonl(*docs: dict) -> bytes:
    return "".join(json.dumps(d) + "\n" for d in docs).encode()


DOC_A = {"id": "a", "title": "A", "text": "Alpha is first.\n\nIt has two paragraphs.", "questions": [{"question": "What is first?"}]}
DOC_B = {"id": "b", "title": "B", "sections": [{"name": "Intro", "paragraphs": ["Beta."]}, {"name": "End", "paragraphs": ["Done."]}]}


def test_ingest_stores_documents_priors_questions_and_the_batch(lake: Lake) -> None:
    report = ingest_batch(lake, jsonl(DOC_A, DOC_B), "inbox/one.jsonl")
    assert report.created and (report.n_documents, report.n_new_documents, report.n_priors, report.n_questions) == (2, 2, 3, 1)
    docs = lake.read("documents").sort("doc_id")
    assert docs.select("doc_id", "title", "line", "n_priors").rows() == [("a", "A", 1, 1), ("b", "B", 2, 2)]
    priors = lake.query("SELECT doc_id, name, source_kind, round, text FROM sources ORDER BY doc_id, ord").rows()
    assert priors == [
        ("a", "Chunk 1", "prior", 0, "Alpha is first.\n\nIt has two paragraphs."),
        ("b", "Intro", "prior", 0, "Beta."), ("b", "End", "prior", 0, "Done."),
    ]
    assert lake.read("questions")["question"].to_list() == ["What is first?"]
    batch = lake.read("batches").row(0, named=True)
    assert (batch["name"], batch["batch_id"], batch["n_lines"]) == ("inbox/one.jsonl", report.batch_id, 2)
    assert "ingested 2 new documents, 3 priors, 1 questions" in report.summary()


def test_priors_count_only_the_prior_sections_the_rest_are_passages(lake: Lake) -> None:
    report = ingest_batch(lake, jsonl(DOC_A, DOC_B), "one.jsonl", prior_sections=("Intro",))
    kinds = lake.query("SELECT source_kind, count(*) AS n FROM sources GROUP BY source_kind ORDER BY source_kind").rows()
    assert kinds == [("passage", 1), ("prior", 2)]  # b's End is a passage; a has no Intro, so its first chunk anchors it
    assert (report.n_priors, report.n_passages) == (2, 1) and lake.read("batches")["n_priors"].to_list() == [2]
    assert "2 priors, 1 passages, 1 questions" in report.summary()


def test_the_same_batch_twice_changes_nothing(lake: Lake) -> None:
    data = jsonl(DOC_A, DOC_B)
    first = ingest_batch(lake, data, "one.jsonl")
    state = lake.state()
    again = ingest_batch(lake, data, "renamed.jsonl")
    assert not again.created and again.batch_id == first.batch_id and again.n_new_documents == 2
    assert lake.state() == state
    assert lake.read("documents").height == 2 and lake.read("sources").height == 3
    assert "already ingested" in again.summary()


def test_a_known_document_with_the_same_content_is_skipped(lake: Lake) -> None:
    ingest_batch(lake, jsonl(DOC_A), "one.jsonl")
    doc_c = {"id": "c", "title": "C", "text": "Gamma."}
    report = ingest_batch(lake, jsonl(DOC_A, doc_c), "two.jsonl")
    assert report.created and (report.n_documents, report.n_new_documents, report.n_priors) == (2, 1, 1)
    assert sorted(lake.read("documents")["doc_id"]) == ["a", "c"]
    assert lake.read("sources").height == 2 and lake.read("batches").height == 2


def test_a_stored_id_with_different_content_rejects_the_whole_batch(lake: Lake) -> None:
    ingest_batch(lake, jsonl(DOC_A), "one.jsonl")
    state = lake.state()
    changed = {**DOC_A, "text": "Alpha was edited."}
    with pytest.raises(InvalidBatch) as err:
        ingest_batch(lake, jsonl({"id": "new", "title": "N", "text": "New."}, changed), "two.jsonl")
    assert str(err.value).startswith("two.jsonl: line 2: field 'id': document 'a' is already stored with different content")
    assert lake.state() == state
    assert lake.read("documents")["doc_id"].to_list() == ["a"]


def test_a_malformed_batch_stores_nothing(lake: Lake) -> None:
    data = jsonl(DOC_A) + b'{"id": "b", "title": "B"}\n'
    with pytest.raises(InvalidBatch, match=r"^bad\.jsonl: line 2: field 'text'"):
        ingest_batch(lake, data, "bad.jsonl")
    assert lake.log.records() == {} and lake.read("documents").height == 0


def test_parsed_frames_fit_the_lake_schemas(quality_sample: Path) -> None:
    from grace_core.documents import parse_batch

    batch = parse_batch(quality_sample.read_bytes(), "quality.jsonl")
    assert conform("documents", batch.documents).num_rows == 3
    assert conform("questions", batch.questions).num_rows == 16 + 18 + 19
    priors = batch.priors.with_columns(source_kind=pl.lit("prior"), round=pl.lit(0))
    assert conform("sources", priors).num_rows == batch.priors.height


def test_real_qasper_papers_ingest_and_query(local_config, qasper_sample: Path) -> None:
    lake = Lake.open(local_config)
    report = ingest_batch(lake, qasper_sample.read_bytes(), qasper_sample.name)
    assert (report.n_new_documents, report.n_questions) == (6, 4 + 6 + 7 + 1 + 5 + 3)
    counts = lake.query(
        "SELECT count(DISTINCT doc_id) AS docs, count(*) FILTER (WHERE name = 'Abstract') AS abstracts FROM sources"
    ).row(0)
    assert counts == (6, 6)
    # the round-0 priors of one commit are one file, not one per document
    assert lake.query("SELECT count(*) AS n FROM lake_files WHERE table_name = 'sources'")["n"][0] == 1
