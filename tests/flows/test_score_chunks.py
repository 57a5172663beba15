"""How a round's documents are split into scoring tasks (flows.score.score_chunks)."""

from __future__ import annotations

from flows.score import score_chunks


def test_a_large_round_is_cut_at_the_chunk_size() -> None:
    docs = [f"d{i:05d}" for i in range(10_000)]
    chunks = score_chunks(docs, per_task=2000, at_once=2)
    assert [len(c) for c in chunks] == [2000] * 5
    assert [d for c in chunks for d in c] == docs  # every document once, in order


def test_a_few_changed_documents_are_spread_over_the_tasks_that_run_at_once() -> None:
    docs = [f"d{i}" for i in range(107)]
    assert [len(c) for c in score_chunks(docs, per_task=2000, at_once=2)] == [54, 53]
    assert [len(c) for c in score_chunks(docs, per_task=2000, at_once=4)] == [27, 27, 27, 26]
    assert [len(c) for c in score_chunks(docs[:5], per_task=2, at_once=2)] == [2, 2, 1]  # the size limit still holds


def test_fewer_documents_than_tasks_give_one_document_per_task() -> None:
    assert score_chunks(["d1"], per_task=2000, at_once=2) == [["d1"]]
    assert score_chunks([], per_task=2000, at_once=2) == []
