"""Document batch ingestion: one JSONL batch (see :mod:`grace_core.documents`) into the
``documents``, ``sources`` (priors, round 0), ``questions`` and ``batches`` tables, as one
commit keyed by the SHA-256 of the batch's bytes.

Whole or nothing: the batch is parsed and checked completely before anything is written, and
all its rows are published by a single commit. Exactly once per content: a batch whose bytes
were ingested before is skipped; a document already stored with the same content (same id,
same content hash) is skipped, one stored with *different* content is a conflict naming the
file, line and field, and nothing is stored. Batches ingested at the same moment are checked
against each other by the commit (:class:`storage.commit.KeyConflict`): of two that bring the
same id with different content, the second fails the same way; shared documents with the same
content are stored once. A document stored by a batch whose commit did not finish (a killed
run) counts as new, so re-running that batch completes its priors and questions.

With ``skip_invalid`` the lines that cannot be used (:func:`grace_core.documents.parse_batch`)
and the documents already stored with different content are left out, the rest is ingested
as above, and the report lists what was left out; :func:`write_invalid_report` writes that list
beside the batch file as ``<batch>.invalid.ndjson`` (not ``*.jsonl``, so an inbox never takes
it for a batch), or into the system's temporary folder when the batch's folder is not writable.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pyarrow.dataset as ds

from grace_core.documents import SkippedLine, batch_id, parse_batch, source_kinds
from grace_core.errors import InvalidBatch, LakeError
from grace_core.limits import InputLimits
from storage.commit import KeyConflict
from storage.config import LakeConfig
from storage.inbox import batch_location
from storage.lake import Lake

PRIOR_ROUND = 0


def batch_key(bid: str) -> str:
    """The commit key of the batch with id ``bid``."""
    return f"batch/{bid}"


@dataclass(frozen=True)
class IngestReport:
    """What ingesting one batch did. ``created`` is False when the same bytes were ingested
    before (then the counts are those of that first ingestion)."""

    name: str
    batch_id: str
    created: bool
    n_documents: int
    n_new_documents: int
    n_priors: int
    n_questions: int
    skipped: tuple[SkippedLine, ...] = ()
    n_passages: int = 0

    def summary(self) -> str:
        """One line for people."""
        head = f"{self.name}: batch {self.batch_id[:12]}"
        invalid = f"; {len(self.skipped)} invalid line{'s' if len(self.skipped) != 1 else ''} skipped" if self.skipped else ""
        if self.n_documents == 0:
            return f"{head}: nothing ingested{invalid}"
        if not self.created:
            return f"{head} was already ingested ({self.n_new_documents} documents); nothing changed{invalid}"
        skipped = self.n_documents - self.n_new_documents
        return (
            f"{head}: ingested {self.n_new_documents} new documents"
            + (f" ({skipped} already stored)" if skipped else "")
            + f", {self.n_priors} priors" + (f", {self.n_passages} passages" if self.n_passages else "")
            + f", {self.n_questions} questions{invalid}"
        )


def _previous(lake: Lake, bid: str, name: str, skipped: tuple[SkippedLine, ...] = ()) -> IngestReport:
    row = lake.read("batches", filter=ds.field("batch_id") == bid).row(0, named=True)
    return IngestReport(
        name, bid, False, row["n_documents"], row["n_new_documents"], row["n_priors"], row["n_questions"], skipped
    )


def _clashes(lake: Lake, documents: pl.DataFrame, name: str) -> tuple[pl.DataFrame, list[SkippedLine]]:
    """The stored rows of ``documents``' ids, and one :class:`SkippedLine` per document stored
    with other content, in line order."""
    ids = documents["doc_id"].to_list()
    stored = lake.read("documents", columns=["doc_id", "content_hash", "batch_id"], doc_ids=ids)
    clash = documents.join(stored, on="doc_id", suffix="_stored").filter(pl.col("content_hash") != pl.col("content_hash_stored"))
    found = []
    for row in clash.sort("line").iter_rows(named=True):
        reason = (f"document {row['doc_id']!r} is already stored with different content "
                  f"(from batch {row['batch_id_stored'][:12]}); give it a new id")
        found.append(SkippedLine(row["line"], row["doc_id"], "id", reason, f"{name}: line {row['line']}: field 'id': {reason}"))
    return stored, found


def _refuse_clash(lake: Lake, documents: pl.DataFrame, name: str) -> pl.DataFrame:
    """The stored rows of ``documents``' ids; :class:`InvalidBatch` if one has other content."""
    stored, clashes = _clashes(lake, documents, name)
    if clashes:
        raise InvalidBatch(clashes[0].message)
    return stored


def ingest_batch(
    lake: Lake, data: bytes, name: str, prior_sections: tuple[str, ...] = (), limits: InputLimits = InputLimits(),
    *, skip_invalid: bool = False,
) -> IngestReport:
    """Ingest the JSONL batch ``data`` (``name`` names it in messages and in ``batches``).
    Sections named in ``prior_sections`` become priors and the others passages (all are
    priors when it is empty; see :func:`grace_core.documents.source_kinds`).

    Raises :class:`InvalidBatch` (nothing stored) for a malformed batch, one over ``limits``,
    or a document id already stored with different content. With ``skip_invalid`` such lines
    and documents are left out and listed in the report's ``skipped``; a batch with nothing
    usable stores nothing.
    """
    bid = batch_id(data)
    if not skip_invalid and lake.is_committed(batch_key(bid)):
        return _previous(lake, bid, name)
    batch = parse_batch(data, name, limits=limits, skip_invalid=skip_invalid)
    skipped = batch.skipped
    documents = batch.documents
    if skip_invalid:
        stored, clashes = _clashes(lake, documents, name)
        documents = documents.filter(~pl.col("doc_id").is_in([c.doc_id for c in clashes]))
        skipped = tuple(sorted((*skipped, *clashes), key=lambda s: s.line))
        if lake.is_committed(batch_key(bid)):
            return _previous(lake, bid, name, skipped)
        if documents.height == 0:
            return IngestReport(name, bid, False, 0, 0, 0, 0, skipped)
    else:
        stored = _refuse_clash(lake, documents, name)
    done = stored.join(lake.read("batches", columns=["batch_id"]), on="batch_id", how="semi")
    new_docs = documents.join(done.select("doc_id"), on="doc_id", how="anti")
    new_ids = new_docs.select("doc_id")
    priors = batch.priors.join(new_ids, on="doc_id", how="semi").sort("doc_id", "ord")
    kinds = [k for _, names in priors.group_by("doc_id", maintain_order=True).agg("name").iter_rows()
             for k in source_kinds(names, tuple(prior_sections))]
    priors = priors.with_columns(source_kind=pl.Series(kinds, dtype=pl.Utf8), round=pl.lit(PRIOR_ROUND, pl.Int32))
    questions = batch.questions.join(new_ids, on="doc_id", how="semi")
    n_priors = priors.filter(pl.col("source_kind") == "prior").height
    report = IngestReport(name, bid, True, documents.height, new_docs.height, n_priors, questions.height, skipped,
                          n_passages=priors.height - n_priors)
    batches = pl.DataFrame([{
        "batch_id": bid, "name": name, "n_lines": batch.n_lines, "n_documents": report.n_documents,
        "n_new_documents": report.n_new_documents, "n_priors": report.n_priors, "n_questions": report.n_questions,
        "ingested_at": datetime.now(timezone.utc),
    }])
    try:
        result = lake.commit(batch_key(bid), {"documents": new_docs, "sources": priors, "questions": questions, "batches": batches})
    except KeyConflict as exc:  # a concurrent batch stored one of these ids with other content first
        _refuse_clash(lake, documents, name)
        raise InvalidBatch(f"{name}: {exc}") from None
    return report if result.created else _previous(lake, bid, name, skipped)


def invalid_report_name(name: str) -> str:
    """``batch.jsonl`` → ``batch.invalid.ndjson``: beside the batch, never taken for one."""
    return (name[:-len(".jsonl")] if name.endswith(".jsonl") else name) + ".invalid.ndjson"


def write_invalid_report(uri: str, skipped: tuple[SkippedLine, ...], config: LakeConfig) -> str:
    """Write one JSON object per skipped line (``file, line, doc_id, field, reason, message``)
    beside the batch file ``uri`` (a local path or ``s3://…``); when that folder cannot be
    written, into the system's temporary folder. Returns where it went, saying why when it is
    not beside the batch."""
    data = "".join(json.dumps({"file": uri, **s.as_dict()}, ensure_ascii=False) + "\n" for s in skipped).encode("utf-8")
    store, name = batch_location(uri, config)
    report = invalid_report_name(name)
    try:
        store.write_bytes(report, data)
        return store.file_uri(report)
    except LakeError as exc:
        fallback = Path(tempfile.gettempdir()) / report
        fallback.write_bytes(data)
        return f"{fallback} (not beside the batch: {str(exc).removeprefix(f'lake {store.uri}: ')})"
