"""Every lake table: its declared pyarrow schema, schema version, partitioning, key and allowed values.

Rows handed to the lake are conformed to these schemas (:func:`conform`) before anything is
written. Each table is a Delta table whose description carries its name and schema version;
a reader refuses a table of another version. Required fields are non-nullable. Per-round
tables are partitioned by ``round`` (``round=N/`` folders).

A table's ``key`` (required columns) names one row: a commit inserts a row only when no row
with its key is stored (insert-if-absent), so a re-run or a concurrent writer of the same rows
never duplicates them. A table without a key is appended to: ``llm_calls`` (every model call
is a ledger row), ``rounds`` (every stage run) and ``evaluations`` (every evaluation run); a
re-run of their unit of work is recognised by the commit itself (:mod:`storage.commit`).
``conflict`` columns must agree with the stored row of the same key: a
commit bringing the same key with other values is refused (``documents``: the same id with
other content). :data:`WRITE_ORDER` is the order in which one commit writes its tables.

Tables and column choices:

``documents`` (not partitioned): one row per ingested document. ``doc_id``; ``title``;
``content_hash`` (SHA-256 of everything stored for it: same id with another hash is a
conflict); ``batch_id`` and ``line`` (where it came from); ``source_format``
(text | sections | qasper | quality); ``n_words``, ``n_priors``, ``n_questions``.

``sources`` (by round): the nodes that make claims. ``source_kind`` prior (a trusted document
section or chunk, round 0, ``name`` = section name or ``Chunk k``), passage (a section or chunk
outside ``prior_sections``: document text the responder may read and the verifier checks
against, but not trusted and not a graph node), verified (a confirmed
claim promoted to a prior, ``claim_id`` = that claim) or response (a sampled LLM answer,
``name`` = a sample label, ``model`` and ``call_key`` = its ``llm_calls`` row). ``ord`` orders
a document's sources; ``batch_id`` is set for priors.

``questions`` (not partitioned): ``doc_id, question_id, ord, question``; ``options`` for
multiple choice; ``gold_json`` keeps the gold answers for evaluation; ``batch_id``.

``claims`` (by round): one row per decomposition: claim ``claim_id`` (a hash of doc id and
normalised text, DESIGN §1) with ``text`` was decomposed from source ``source_id`` of kind
``source_kind`` in ``round``, at position ``ord``; ``call_key`` names the decomposition call.
Unique claims are the distinct ``(doc_id, claim_id)``; response claims (for PCR) are those
with a ``source_kind = 'response'`` row.

``edges`` (by round): judge results, the edge table of :mod:`grace_core.edges`:
``doc_id, source_id, source_kind, claim_id, label`` (entails | contradicts) plus ``round``
and the judge's ``call_key``.

``scores`` (by round): the columns of :data:`grace_core.scoring.SCORE_COLUMNS` plus ``round``.
Scoring is per document, so a document scored in a round has rows for all its claims there.

``review_inputs`` (by round, written with the ``scores`` of the same scoring): for each
Boundary claim, what the selection needs besides its scores and what stays fixed until its
document is rescored (:data:`grace_core.review.REVIEW_INPUTS`): ``reach`` (the Boundary claims
a confirmation would ground) and ``prior_distance`` (embedding distance to the nearest prior
unit, the variable part of the review cost). ``claim_status`` shows them beside the scores.
A later scoring of the document keeps a stored ``prior_distance`` while its prior units are
no newer and the embedder is the one the scoring's ``rounds`` rows record
(``detail_json``'s ``embedder``).

``scoring_counts`` (by round, written with the ``scores`` of the same scoring, just before
them): per document scored, what the scoring holds (:func:`grace_core.metrics.scoring_counts`:
claims per status, response claims and the Grounded ones, cascade), so ``round_metrics`` sums
one row per document and scoring. The score flow back-fills the counts of scorings written
before the table existed.

``deferrals`` (by round): claims sent to review. One row per claim and assigned reviewer
(overlap > 1 gives several rows): ``priority, confidence, cost, gain, rank`` from the
selection, ``deadline`` (null: none) and ``created_at``.

``audits`` (by round, the round that drew them): the claims of the round's deferrals that
are audit samples (:mod:`grace_core.audit`), not chosen for their value: ``status`` grounded |
refuted (the pool each was drawn from) and ``cost`` (paid from the audit budget). Their
deferral rows look like any other, so reviewers cannot tell; ``round_metrics`` leaves them out
of the deferral figures and estimates the Grounded precision and the Refuted-false share from
their decisions.

``verdicts`` (by round, the round of the deferral answered): every raw vote.
``verdict`` confirm | reject | abstain, ``reviewer``, ``seconds_spent``, ``note``,
``channel`` (ui, file, terminal, verifier, …) and ``created_at``.

``decisions`` (by round, the round whose settle step computed them): the one decision model
of DESIGN §5 (:func:`grace_core.decisions.decide`), persisted: for every claim with at least
one vote, the vote counts over each reviewer's latest vote, the ``quorum`` in force and the
``decision`` confirm | reject | abstain | pending (votes below quorum). Promotion, scoring's
rejections, ``round_metrics``, ``review_queue``, ``reviewer_stats``, ``verdict_outcomes`` and
``claim_status`` all read it.

``reviewer_reliability`` (by round, the round whose dispatch estimated it): each reviewer's
Dawid–Skene accuracy (:func:`grace_core.reliability.estimate_reliability`, one-coin, over every
vote of the lake up to then) with ``n_overlap``, their confirm/reject votes on claims that have
another such vote (null accuracy without overlap). ``reviewer_stats`` shows it beside the
round's counts.

``reviewers`` (not partitioned): who may vote. One row per event of a reviewer key: ``event``
added | revoked, ``reviewer``, ``key_id`` (names one key of the reviewer: a reviewer added again
after a revocation gets a new one), ``salt`` and ``key_hash`` (the salted hash of the key,
:mod:`grace_core.reviewer_keys`; the key itself is never stored) and ``at``. A reviewer is
registered while their latest added key has no revoked row. ``salt`` and ``key_hash`` are
private: the catalog's view leaves them out.

``queries`` (by round): user questions the knowledge base could not answer
(:mod:`grace_core.queries`), one row per asking: ``query_id`` (a hash of document and
question), ``doc_id``, ``question``, ``origin`` ask (``grace ask`` recorded it, ``round`` = the
last scored round then) or recheck (asked again after round ``round``'s dispatch),
``answerable``, ``best_score`` (best retrieval score of its context) and ``asked_at``. A
question is open while its latest row is not answerable; the next round's build samples
responses to it for its document.

``embeddings`` (not partitioned): stored vectors of the texts ``grace ask`` retrieves from
(priors, verified and Grounded claims), so a question is the only text it embeds
(:mod:`grace_core.stored_embeddings`): ``doc_id``, ``text_hash`` (the embedder cache's hash of
the text), ``embedder`` (:func:`grace_core.models.factory.embedder_identity`: a vector is reused
only by the embedder that made it) and ``vector`` (unit length; float64, which the catalog's
views type).

``rounds`` (by round): one row per stage run of a round: ``stage`` (ingest, build, score,
dispatch, verdicts, …), ``started_at``, ``finished_at``, ``n_documents`` and ``detail_json``
(a score row's: ``scoring``, the fingerprint of the settings scores depend on, and ``embedder``,
the one that measured its review inputs).

``batches`` (not partitioned): the ingestion manifest, one row per ingested batch file:
``batch_id`` (SHA-256 of its bytes), ``name``, ``n_lines``, ``n_documents`` (in the file),
``n_new_documents`` (stored by this batch), ``n_priors``, ``n_questions``, ``ingested_at``.

``llm_calls`` (by round): model-call cache and cost ledger. ``key`` (content hash of the
request), ``role`` (responder, decomposer, judge, verifier, answerer, …), ``model``,
``attempt`` (0 for the first try of a request), ``request`` and ``response`` (JSON text), ``prompt_tokens``, ``completion_tokens``,
``cost_usd``, ``latency_s``, ``outcome`` (ok, malformed, rate_limited, timeout, error), ``error``
and ``created_at``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from grace_core.errors import InvalidTable, first_line
from grace_core.metrics import SCORING_COUNTS

SOURCE_KINDS = ("prior", "verified", "response")
STORED_SOURCE_KINDS = (*SOURCE_KINDS, "passage")  # passages are document text outside the graph
LABELS = ("entails", "contradicts")
STATUSES = ("grounded", "boundary", "refuted")
AUDITED_STATUSES = ("grounded", "refuted")
VERDICTS = ("confirm", "reject", "abstain")
DECISIONS = (*VERDICTS, "pending")
ROUND = "round"
_TS = pa.timestamp("us", tz="UTC")


def _req(name: str, type_: pa.DataType) -> pa.Field:
    return pa.field(name, type_, nullable=False)


def _opt(name: str, type_: pa.DataType) -> pa.Field:
    return pa.field(name, type_, nullable=True)


@dataclass(frozen=True)
class TableSpec:
    """A lake table: ``schema`` (non-nullable fields are required), ``version`` (bumped on any
    incompatible change), whether it is ``partitioned`` by round, its ``key`` and ``conflict``
    columns (see the module docstring) and ``allowed`` values of enumerated columns."""

    name: str
    schema: pa.Schema
    version: int
    partitioned: bool
    allowed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    key: tuple[str, ...] = ()
    conflict: tuple[str, ...] = ()


def _spec(
    name: str, fields: list[pa.Field], *, partitioned: bool, key: tuple[str, ...], conflict: tuple[str, ...] = (),
    version: int = 1, **allowed: tuple[str, ...],
) -> TableSpec:
    return TableSpec(name, pa.schema(fields), version, partitioned, allowed, key, conflict)


TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        _spec("documents", [
            _req("doc_id", pa.string()), _req("title", pa.string()), _req("content_hash", pa.string()),
            _req("batch_id", pa.string()), _req("line", pa.int32()), _req("source_format", pa.string()),
            _req("n_words", pa.int64()), _req("n_priors", pa.int32()), _req("n_questions", pa.int32()),
        ], partitioned=False, key=("doc_id",), conflict=("content_hash",)),
        _spec("sources", [
            _req("doc_id", pa.string()), _req("source_id", pa.string()), _req("source_kind", pa.string()),
            _req(ROUND, pa.int32()), _opt("name", pa.string()), _opt("ord", pa.int32()), _req("text", pa.string()),
            _opt("claim_id", pa.string()), _opt("model", pa.string()), _opt("call_key", pa.string()), _opt("batch_id", pa.string()),
        ], partitioned=True, key=("doc_id", "source_id", ROUND), source_kind=STORED_SOURCE_KINDS),
        _spec("questions", [
            _req("doc_id", pa.string()), _req("question_id", pa.string()), _req("ord", pa.int32()),
            _req("question", pa.string()), _opt("options", pa.list_(pa.string())), _opt("gold_json", pa.string()),
            _req("batch_id", pa.string()),
        ], partitioned=False, key=("doc_id", "question_id")),
        _spec("claims", [
            _req("doc_id", pa.string()), _req("claim_id", pa.string()), _req(ROUND, pa.int32()),
            _req("source_id", pa.string()), _req("source_kind", pa.string()), _opt("ord", pa.int32()),
            _req("text", pa.string()), _opt("call_key", pa.string()),
        ], partitioned=True, key=("doc_id", ROUND, "source_id", "claim_id"), source_kind=SOURCE_KINDS),
        _spec("edges", [
            _req("doc_id", pa.string()), _req("source_id", pa.string()), _req("source_kind", pa.string()),
            _req("claim_id", pa.string()), _req("label", pa.string()), _req(ROUND, pa.int32()), _opt("call_key", pa.string()),
        ], partitioned=True, key=("doc_id", ROUND, "source_id", "claim_id", "label"), source_kind=SOURCE_KINDS, label=LABELS),
        _spec("scores", [
            _req("doc_id", pa.string()), _req("claim_id", pa.string()),
            _req("in_prior", pa.bool_()), _req("contradicted", pa.bool_()), _req("rejected", pa.bool_()),
            _req("closeness", pa.float64()), _req("closeness_norm", pa.float64()), _req("status", pa.string()),
            _opt("betweenness", pa.float64()), _opt("betweenness_norm", pa.float64()),
            _req("novelty", pa.float64()), _opt("novelty_norm", pa.float64()),
            _opt("priority", pa.float64()), _req("confidence", pa.float64()), _req(ROUND, pa.int32()),
        ], partitioned=True, key=("doc_id", "claim_id", ROUND), status=STATUSES),
        _spec("scoring_counts", [
            _req("doc_id", pa.string()), _req(ROUND, pa.int32()),
            *(_req(c, pa.int64()) for c in SCORING_COUNTS),
        ], partitioned=True, key=("doc_id", ROUND)),
        _spec("review_inputs", [
            _req("doc_id", pa.string()), _req("claim_id", pa.string()), _req(ROUND, pa.int32()),
            _req("reach", pa.int64()), _req("prior_distance", pa.float64()),
        ], partitioned=True, key=("doc_id", "claim_id", ROUND)),
        _spec("deferrals", [
            _req("doc_id", pa.string()), _req("claim_id", pa.string()), _req(ROUND, pa.int32()), _req("reviewer", pa.string()),
            _req("priority", pa.float64()), _req("confidence", pa.float64()), _req("cost", pa.float64()),
            _req("gain", pa.float64()), _opt("rank", pa.int32()), _opt("deadline", _TS), _req("created_at", _TS),
        ], partitioned=True, key=("doc_id", "claim_id", ROUND, "reviewer")),
        _spec("audits", [
            _req("doc_id", pa.string()), _req("claim_id", pa.string()), _req(ROUND, pa.int32()), _req("status", pa.string()),
            _opt("cost", pa.float64()), _req("created_at", _TS),
        ], partitioned=True, key=("doc_id", "claim_id", ROUND), status=AUDITED_STATUSES),
        _spec("verdicts", [
            _req("doc_id", pa.string()), _req("claim_id", pa.string()), _req(ROUND, pa.int32()), _req("reviewer", pa.string()),
            _req("verdict", pa.string()), _opt("seconds_spent", pa.float64()), _opt("note", pa.string()),
            _opt("channel", pa.string()), _req("created_at", _TS),
        ], partitioned=True, key=("doc_id", "claim_id", ROUND, "reviewer", "created_at"), verdict=VERDICTS),
        _spec("decisions", [
            _req("doc_id", pa.string()), _req("claim_id", pa.string()), _req(ROUND, pa.int32()),
            _req("n_votes", pa.int32()), _req("n_confirm", pa.int32()), _req("n_reject", pa.int32()),
            _req("n_abstain", pa.int32()), _req("quorum", pa.int32()), _req("decision", pa.string()),
        ], partitioned=True, key=("doc_id", "claim_id", ROUND), decision=DECISIONS),
        _spec("reviewer_reliability", [
            _req(ROUND, pa.int32()), _req("reviewer", pa.string()), _req("n_overlap", pa.int64()), _opt("accuracy", pa.float64()),
        ], partitioned=True, key=(ROUND, "reviewer")),
        _spec("reviewers", [
            _req("reviewer", pa.string()), _req("key_id", pa.string()), _req("event", pa.string()),
            _opt("salt", pa.string()), _opt("key_hash", pa.string()), _req("at", _TS),
        ], partitioned=False, key=("reviewer", "key_id", "event"), event=("added", "revoked")),
        _spec("queries", [
            _req("query_id", pa.string()), _req(ROUND, pa.int32()), _req("doc_id", pa.string()), _req("question", pa.string()),
            _req("origin", pa.string()), _req("answerable", pa.bool_()), _opt("best_score", pa.float64()), _req("asked_at", _TS),
        ], partitioned=True, key=("query_id", ROUND, "origin"), origin=("ask", "recheck")),
        _spec("embeddings", [
            _req("doc_id", pa.string()), _req("text_hash", pa.string()), _req("embedder", pa.string()),
            _req("vector", pa.list_(pa.float64())),
        ], partitioned=False, key=("doc_id", "text_hash", "embedder")),
        _spec("rounds", [
            _req(ROUND, pa.int32()), _req("stage", pa.string()), _req("started_at", _TS), _opt("finished_at", _TS),
            _opt("n_documents", pa.int64()), _opt("detail_json", pa.string()),
        ], partitioned=True, key=()),
        _spec("batches", [
            _req("batch_id", pa.string()), _req("name", pa.string()), _req("n_lines", pa.int64()),
            _req("n_documents", pa.int64()), _req("n_new_documents", pa.int64()), _req("n_priors", pa.int64()),
            _req("n_questions", pa.int64()), _req("ingested_at", _TS),
        ], partitioned=False, key=("batch_id",)),
        _spec("llm_calls", [
            _req("key", pa.string()), _req("role", pa.string()), _req(ROUND, pa.int32()), _req("model", pa.string()),
            _opt("attempt", pa.int32()), _req("request", pa.string()), _opt("response", pa.string()), _opt("prompt_tokens", pa.int64()),
            _opt("completion_tokens", pa.int64()), _opt("cost_usd", pa.float64()), _opt("latency_s", pa.float64()),
            _req("outcome", pa.string()), _opt("error", pa.string()), _req("created_at", _TS),
        ], partitioned=True, key=()),
        _spec("evaluations", [
            _req("eval_id", pa.string()), _req("command", pa.string()), _req("dataset", pa.string()), _req("data", pa.string()),
            _req("backend", pa.string()), _opt("settings_json", pa.string()), _opt(ROUND, pa.int32()), _req("name", pa.string()),
            _req("metric", pa.string()), _opt("value", pa.float64()), _req("created_at", _TS),
        ], partitioned=False, key=()),
    )
}


WRITE_ORDER: tuple[str, ...] = (
    "documents", "llm_calls", "questions", "edges", "sources", "claims", "review_inputs", "scoring_counts", "scores", "audits", "deferrals", "verdicts",
    "decisions", "reviewer_reliability", "reviewers", "embeddings", "queries", "evaluations", "rounds", "batches",
)
"""The order in which one commit writes its tables, each in its own Delta transaction. A
reader may see a commit's first tables before its last, so the tables that later steps read to
decide what is done come last: ``claims`` after the ``sources`` and ``edges`` of a build (new
documents are those without claims), ``sources`` after the ``edges`` of a promotion, the stage's
``rounds`` row after everything it records (the next round starts after a ``dispatch`` row),
``batches`` last of an ingestion; ``audits`` before the ``deferrals`` they mark (no reader
counts an audit claim as a deferral, nor shows it to a reviewer unblinded); ``documents`` first, so that a document id stored with other
content stops the commit before anything is written."""


def table_spec(name: str) -> TableSpec:
    """The spec of table ``name``, or :class:`InvalidTable` listing the known tables."""
    try:
        return TABLES[name]
    except KeyError:
        raise InvalidTable(f"unknown table {name!r} (tables: {', '.join(TABLES)})") from None


def _first_row(mask: pa.ChunkedArray | pa.Array) -> int:
    """1-based index of the first true value of ``mask``."""
    return int(pc.index(mask, True).as_py()) + 1


def conform(name: str, data: pl.DataFrame | pa.Table) -> pa.Table:
    """Return ``data`` as an Arrow table with exactly table ``name``'s schema.

    Extra columns are an error (they would be silently lost); missing optional columns become
    nulls; types are cast safely. Raises :class:`InvalidTable` naming the table, the field and,
    for values, the 1-based row: a missing required column, a value that cannot be cast, a
    null in a required field, or a value outside an enumerated column's allowed set.
    """
    spec = table_spec(name)
    table = data.to_arrow() if isinstance(data, pl.DataFrame) else data
    extra = [c for c in table.column_names if c not in spec.schema.names]
    if extra:
        raise InvalidTable(f"table {name}: unknown column(s) {', '.join(extra)} (columns: {', '.join(spec.schema.names)})")
    columns = []
    for f in spec.schema:
        if f.name not in table.column_names:
            if not f.nullable:
                raise InvalidTable(f"table {name}: missing required column '{f.name}'")
            columns.append(pa.chunked_array([pa.nulls(table.num_rows, f.type)]))
            continue
        col = table.column(f.name)
        try:
            col = col.cast(f.type) if col.type != f.type else col
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InvalidTable(f"table {name}: field '{f.name}': cannot store {col.type} as {f.type}: {first_line(exc)}") from None
        if not f.nullable and col.null_count:
            raise InvalidTable(f"table {name}: row {_first_row(col.is_null())}: field '{f.name}' is null (required)")
        allowed = spec.allowed.get(f.name)
        if allowed:
            bad = pc.invert(pc.is_in(col, value_set=pa.array(allowed, f.type)))
            bad = pc.and_(bad, col.is_valid())
            if pc.any(bad).as_py():
                row = _first_row(bad)
                raise InvalidTable(
                    f"table {name}: row {row}: field '{f.name}' has unknown value {col[row - 1].as_py()!r} (expected one of {', '.join(allowed)})"
                )
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=spec.schema)
