"""The review state of the lake: every raw vote and the decision per claim, the open
assignments with what a reviewer sees of each claim, and verdicts recorded from any channel
(verifier, file, terminal, Prefect UI) after every row was checked.

Every vote has a proven author (:mod:`flows.reviewers`: a key, or a signed file): a unit
holding a row of anyone else is refused whole. Recording is safe by construction: each unit (a
verdict file by its content hash, a terminal answer, a resumed UI run) is one idempotent lake
commit; rows are checked against the claims, the assignments and the stored votes first
(:func:`grace_core.verdict_files.check_verdicts`), bad rows go to the quarantine with file,
line and reason (when it cannot be written, the good rows are stored all the same and the
report says so), votes that came after their deadline are stored, counted and reported as
such, and stored verdicts are only ever added to, never changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import polars as pl
import pyarrow.dataset as ds

from flows.reviewers import verify_verdict_file
from grace_core.assignment import open_assignments
from grace_core.settings_groups import VERIFIER
from grace_core.errors import LakeError, UnprovenReviewer
from grace_core.limits import InputLimits
from grace_core.models.factory import ModelRoles
from grace_core.review import nearest_priors
from grace_core.round import claim_texts as round_claim_texts
from grace_core.round import prior_units as round_prior_units
from grace_core.reviewer_keys import split_signed
from grace_core.verdict_files import BadRow, VerdictRow, check_verdicts, count_late, parse_verdict_file
from storage.lake import Lake
from storage.review_files import ReviewArea

DEFERRAL_COLUMNS = ["doc_id", "claim_id", "round", "reviewer", "deadline", "rank", "priority", "confidence"]
PACKET_COLUMNS = [
    "round", "doc_id", "claim_id", "reviewer", "deadline", "overdue", "status", "confidence", "claim", "source",
    "source_passage", "nearest_prior", "verdict", "seconds_spent", "note",
]


def latest_decisions(lake: Lake) -> pl.DataFrame:
    """Each claim's decision from its documents' latest settle step (the persisted
    :func:`grace_core.decisions.decide`): ``doc_id, claim_id, …, decision``."""
    return lake.query("SELECT * EXCLUDE (round) FROM latest_decisions")  # the catalog's view: one definition


@dataclass(frozen=True)
class LakeTexts:
    """The lake's claim texts and prior units, read by document (a
    :class:`grace_core.round.DocumentTexts`): a dispatch reads those of the claims it prices
    and shows, never every claim of the lake."""

    lake: Lake

    def claim_texts(self, doc_ids: Sequence[str] | None = None) -> pl.DataFrame:
        """One text per (doc_id, claim_id) of ``doc_ids``: the first decomposition's."""
        return round_claim_texts(self.lake.read("claims", columns=["doc_id", "claim_id", "round", "text"], doc_ids=doc_ids))

    def prior_units(self, doc_ids: Sequence[str] | None = None) -> pl.DataFrame:
        """``doc_id, text`` of what counts as prior knowledge in ``doc_ids`` (:func:`grace_core.round.prior_units`)."""
        return round_prior_units(
            self.lake.read("claims", columns=["doc_id", "source_kind", "text"], filter=ds.field("source_kind") == "prior", doc_ids=doc_ids),
            self.lake.read("sources", columns=["doc_id", "source_kind", "text"], filter=ds.field("source_kind") == "verified", doc_ids=doc_ids),
        )


def document_texts(lake: Lake, doc_ids: Sequence[str]) -> pl.DataFrame:
    """The whole text of each of ``doc_ids``: its passages in order, with their names."""
    passages = lake.read("sources", rounds=[0], columns=["doc_id", "name", "ord", "text"], doc_ids=doc_ids)
    return passages.sort("doc_id", "ord").group_by("doc_id", maintain_order=True).agg(
        text=pl.concat_str([pl.col("name").fill_null(""), pl.col("text")], separator="\n").str.join("\n\n")
    )


def assignments(lake: Lake, now: datetime) -> pl.DataFrame:
    """Open assignments (:func:`grace_core.assignment.open_assignments`) of every reviewer,
    in the order reviewers should take them: oldest round first, then selection rank."""
    deferrals = lake.read("deferrals", columns=DEFERRAL_COLUMNS)
    verdicts = lake.read("verdicts", columns=["doc_id", "claim_id", "round", "reviewer"])
    return open_assignments(deferrals, verdicts, now).sort("round", "rank", "claim_id", "reviewer")


def pending_for(lake: Lake, reviewer: str, now: datetime) -> pl.DataFrame:
    """The open assignments of ``reviewer``, in review order."""
    return assignments(lake, now).filter(pl.col("reviewer") == reviewer)


def _latest_scores(lake: Lake, docs: list[str]) -> pl.DataFrame:
    """``doc_id, claim_id, status, confidence`` of each document's latest scoring."""
    scores = lake.read("scores", columns=["doc_id", "claim_id", "round", "status", "confidence"], doc_ids=docs)
    return scores.filter(pl.col("round") == pl.col("round").max().over("doc_id")).drop("round")


def _claim_sources(lake: Lake, claim_ids: list[str]) -> pl.DataFrame:
    """The source each claim was first decomposed from: ``doc_id, claim_id, source,
    source_passage``."""
    rows = lake.read("claims", columns=["doc_id", "claim_id", "round", "source_id", "source_kind"], filter=ds.field("claim_id").isin(claim_ids))
    first = rows.sort("round", "source_id").unique(["doc_id", "claim_id"], keep="first")
    sources = lake.read("sources", columns=["doc_id", "source_id", "name", "text"], filter=ds.field("source_id").isin(first["source_id"].unique().to_list()))
    return first.join(sources, on=["doc_id", "source_id"], how="left").select(
        "doc_id", "claim_id",
        pl.format("{} {} (round {})", "source_kind", pl.col("name").fill_null(pl.col("source_id")), "round").alias("source"),
        pl.col("text").alias("source_passage"),
    )


def review_context(lake: Lake, roles: ModelRoles, rows: pl.DataFrame) -> pl.DataFrame:
    """Assignments (rows of :func:`assignments`) with what the reviewer sees, as the flat
    :data:`PACKET_COLUMNS` of a review packet: the claim's text, the passage it was decomposed
    from, its nearest prior, its current status and confidence, the deadline, and empty
    ``verdict, seconds_spent, note`` for the reviewer to fill in. Once the lake audits
    (:mod:`grace_core.audit`), review is blind: status and confidence are left empty for every
    claim, so an audited Grounded or Refuted claim looks like any deferred one."""
    docs = rows["doc_id"].unique().sort().to_list()
    lake_texts = LakeTexts(lake)
    texts = lake_texts.claim_texts(docs).join(rows.select("doc_id", "claim_id").unique(), on=["doc_id", "claim_id"], how="semi")
    priors = lake_texts.prior_units(docs)
    return (
        rows.drop("confidence")
        .join(texts.rename({"text": "claim"}), on=["doc_id", "claim_id"], how="left")
        .join(_claim_sources(lake, rows["claim_id"].unique().to_list()), on=["doc_id", "claim_id"], how="left")
        .join(nearest_priors(texts, priors, roles.embedder), on=["doc_id", "claim_id"], how="left")
        .join(_latest_scores(lake, docs), on=["doc_id", "claim_id"], how="left")
        .with_columns(
            deadline=pl.col("deadline").dt.strftime("%Y-%m-%dT%H:%M:%SZ"), confidence=pl.col("confidence").round(3),
            verdict=pl.lit(None, pl.Utf8), seconds_spent=pl.lit(None, pl.Float64), note=pl.lit(None, pl.Utf8),
        )
        .with_columns(_blind(lake))
        .select(PACKET_COLUMNS)
    )


def _blind(lake: Lake) -> list[pl.Expr]:
    """Status and confidence emptied once the lake has audit claims (review is then blind)."""
    if lake.read("audits", columns=["claim_id"]).height == 0:
        return []
    return [pl.lit(None, pl.Utf8).alias("status"), pl.lit(None, pl.Float64).alias("confidence")]


def write_packets(
    lake: Lake, roles: ModelRoles, now: datetime, reviewers: list[str], include_pending: bool = True
) -> dict[str, dict]:
    """Rewrite the outbox packet (CSV and JSONL) of each human reviewer in ``reviewers`` and,
    with ``include_pending``, of every other human with open assignments: the claims waiting
    for them with their context (an empty packet when none). Returns, per reviewer, the number
    of ``claims`` and the ``files`` written."""
    pending = assignments(lake, now).filter(pl.col("reviewer") != VERIFIER)
    names = set(reviewers) | (set(pending["reviewer"].to_list()) if include_pending else set())
    pending = pending.filter(pl.col("reviewer").is_in(list(names)))
    context = review_context(lake, roles, pending) if pending.height else pl.DataFrame(schema=dict.fromkeys(PACKET_COLUMNS, pl.Utf8))
    area = ReviewArea(lake.store)
    written = {}
    for name in sorted(names - {VERIFIER}):
        packet = context.filter(pl.col("reviewer") == name)
        written[name] = {"claims": packet.height, "files": area.write_packet(name, packet)}
    return written


@dataclass(frozen=True)
class VerdictReport:
    """What recording one unit of verdicts did."""

    source: str
    recorded: int = 0
    unanswered: int = 0
    bad: list[BadRow] = field(default_factory=list)
    already_recorded: bool = False
    quarantine: str | None = None
    late: int = 0
    quarantine_error: str | None = None

    def summary(self) -> str:
        """One line: the counts, how many votes came after their deadline, and where the bad
        rows went (or why they could not be kept)."""
        if self.already_recorded:
            return f"{self.source}: already ingested, nothing changed"
        text = f"{self.source}: {self.recorded} verdict{'s' if self.recorded != 1 else ''} recorded"
        if self.unanswered:
            text += f", {self.unanswered} unanswered row{'s' if self.unanswered != 1 else ''} skipped"
        rows = f"{len(self.bad)} bad row{'s' if len(self.bad) != 1 else ''}"
        if self.quarantine_error:
            text += f", {rows} not quarantined ({self.quarantine_error})"
        elif self.bad:
            text += f", {rows} quarantined in {self.quarantine}"
        if self.late:
            one = self.late == 1
            text += f"; {self.late} late vote{'' if one else 's'} (after {'its deadline' if one else 'their deadlines'}, counted)"
        return text


def record_verdicts(
    lake: Lake, key: str, source: str, rows: list[VerdictRow], bad: list[BadRow], channel: str, now: datetime,
    unanswered: int = 0, *, author: str,
) -> VerdictReport:
    """Check ``rows`` against the lake's review state and commit the good ones to ``verdicts``
    as the unit of work ``key`` (with ``channel`` and ``created_at`` = ``now``); the bad ones,
    with ``bad`` rows found while reading, go to the quarantine. A ``key`` committed before
    changes nothing. The report counts the good rows that came after their assignment's
    deadline (:func:`~grace_core.verdict_files.count_late`; they are recorded and count).

    The quarantine is written before the commit, so that a crash in between leaves ``key`` open
    and a re-run writes both. A quarantine that cannot be written (:class:`LakeError`) does not
    cost the good rows: they are committed all the same and the report says why the bad ones
    were not kept (the channel still shows every bad row).

    ``author`` is the reviewer the channel proved (:func:`flows.reviewers.prove`, the signer of a
    file; :data:`~grace_core.assignment.VERIFIER` for the verifier): a row of anyone else makes
    the whole unit :class:`UnprovenReviewer`, and nothing is stored or quarantined."""
    stranger = next((r for r in rows if r.reviewer != author), None)
    if stranger is not None:
        raise UnprovenReviewer(f"{source}: refused, nothing recorded: line {stranger.line} is a vote of {stranger.reviewer!r}, "
                               f"but only {author!r} was proven (one reviewer per file or session)")
    if lake.is_committed(key):
        return VerdictReport(source, unanswered=unanswered, already_recorded=True)
    claims = lake.read("claims", columns=["doc_id", "claim_id"]).unique()
    deferrals = lake.read("deferrals", columns=["doc_id", "claim_id", "round", "reviewer", "deadline"])
    stored = lake.read("verdicts", columns=["doc_id", "claim_id", "round", "reviewer"])
    good, rejected = check_verdicts(rows, claims, deferrals, stored)
    all_bad = sorted([*bad, *rejected], key=lambda b: b.line)
    quarantine = problem = None
    if all_bad:
        digest = hashlib.sha256(key.encode()).hexdigest()
        try:
            quarantine = ReviewArea(lake.store).quarantine_rows(
                source, digest, [{"file": b.file, "line": b.line, "reason": b.reason, "row": b.raw} for b in all_bad]
            )
        except LakeError as exc:
            problem = str(exc)
    lake.commit(key, {"verdicts": good.with_columns(channel=pl.lit(channel), created_at=pl.lit(now))})
    return VerdictReport(source, good.height, unanswered, all_bad, quarantine=quarantine, late=count_late(good, deferrals, now),
                         quarantine_error=problem)


def ingest_verdict_file(lake: Lake, name: str, data: bytes, now: datetime, limits: InputLimits = InputLimits()) -> VerdictReport:
    """A returned verdict file (CSV or JSONL) into ``verdicts`` (channel ``file``); the same
    content twice changes nothing (the commit key is its SHA-256). Raises
    :class:`~grace_core.verdict_files.InvalidVerdictFile` when it is not a verdict file, and
    :class:`UnprovenReviewer` (nothing stored) unless it carries a valid signature line of a
    registered reviewer (:func:`flows.reviewers.verify_verdict_file`) and every row is theirs."""
    parsed = parse_verdict_file(name, split_signed(name, data)[0], limits)  # not a verdict file at all: said first
    signer, _ = verify_verdict_file(lake, name, data)
    key = f"review/file/{hashlib.sha256(data).hexdigest()}"
    return record_verdicts(lake, key, name, parsed.rows, parsed.bad, "file", now, parsed.unanswered, author=signer)
