"""Verdict rows returned by reviewers, checked before anything is stored.

A verdict file is CSV (with a header) or JSONL (one object per line) with the columns
``claim_id, verdict, reviewer`` and optionally ``doc_id, round, seconds_spent, note``; other
columns (the context columns of a review packet) are ignored, so a reviewer can return the
packet itself with the verdicts filled in. A row whose verdict is empty is an unanswered claim:
it is skipped, not an error.

A file means one thing or is refused: a JSON object naming a key twice (at any depth) is a bad
row naming the key, and a CSV header naming a column twice (after strip and lower case; unnamed
empty columns aside) refuses the whole file, instead of the last value silently winning.
``seconds_spent`` is at most :data:`MAX_SECONDS_SPENT` (24 h): a larger value would be stored
and move the reviewer's mean review time, hence every later review cost.

:func:`parse_verdict_file` turns bytes into rows and reports malformed lines;
:func:`check_verdicts` checks rows of any channel against the review state (claims, deferrals,
stored verdicts). Every bad row is a :class:`BadRow` with its file, line and reason;
:func:`count_late` says how many good rows arrived after their assignment's deadline (they
count: a vote is refused only once its round is closed by a later deferral). Pure.

Hostile rows are bad rows too: ids (``claim_id``, ``doc_id``, ``reviewer``) outside the safe
set of :mod:`grace_core.identifiers`, a lone surrogate (``"\\ud800"``) in a text value, JSON
nested too deeply to parse. A whole file is refused (:class:`InvalidVerdictFile`) when it is
empty (no header), over ``max_verdict_bytes`` or holds more than ``max_verdict_rows`` rows
(:class:`~grace_core.limits.InputLimits`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from grace_core.decisions import VERDICTS
from grace_core.errors import InvalidVerdicts
from grace_core.identifiers import id_problem, shown
from grace_core.limits import InputLimits, over_limit

REQUIRED = ("claim_id", "verdict", "reviewer")
GOOD_SCHEMA = {
    "doc_id": pl.Utf8, "claim_id": pl.Utf8, "round": pl.Int32, "reviewer": pl.Utf8, "verdict": pl.Utf8,
    "seconds_spent": pl.Float64, "note": pl.Utf8,
}
CSV_SUFFIXES = (".csv",)
JSONL_SUFFIXES = (".jsonl", ".ndjson")
MAX_ROUND = 2**31 - 1
MAX_SECONDS_SPENT = 86_400  # 24 h: no one spends longer on one claim; more poisons the mean review time
_SURROGATE = re.compile("[\ud800-\udfff]")


class InvalidVerdictFile(InvalidVerdicts):
    """A whole verdict file cannot be read as verdict rows: not CSV or JSONL by its name, empty
    (no header), a header naming a column twice, or over a size limit."""


class RepeatedKey(ValueError):
    """A JSON object names ``key`` twice (raised from inside :func:`json.loads`)."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


@dataclass(frozen=True)
class BadRow:
    """A row that was not applied: where it came from, why, and its text as received."""

    file: str
    line: int
    reason: str
    raw: str

    def __str__(self) -> str:
        return f"{self.file}: line {self.line}: {self.reason}"


@dataclass(frozen=True)
class VerdictRow:
    """One reviewer's answer on one claim, as received (``round`` and ``doc_id`` may be absent)."""

    file: str
    line: int
    claim_id: str
    reviewer: str
    verdict: str
    doc_id: str | None = None
    round: int | None = None
    seconds_spent: float | None = None
    note: str | None = None
    raw: str = ""


@dataclass(frozen=True)
class ParsedFile:
    """What a verdict file holds: answered rows, bad rows and how many rows had no verdict."""

    rows: list[VerdictRow]
    bad: list[BadRow]
    unanswered: int


def _text(value: object, field: str) -> str | None:
    """A stripped text value (None when absent or empty); other JSON types are refused."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{field} must be text, got {json.dumps(value)[:60]}")
    bad = _SURROGATE.search(value)
    if bad:
        raise ValueError(f"{field} holds a lone surrogate ({bad.group()!r}), which is not text")
    return value.strip() or None


def _id(value: object, field: str) -> str | None:
    """A stripped id (None when absent or empty), refused outside the safe set."""
    text = _text(value, field)
    problem = id_problem(text) if text is not None else None
    if problem:
        raise ValueError(f"{field} {shown(text)} {problem}")
    return text


def _seconds(value: object) -> float | None:
    """``seconds_spent`` as a number from 0 to :data:`MAX_SECONDS_SPENT` (None when absent or empty)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        if isinstance(value, bool):
            raise ValueError
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"seconds_spent must be a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds_spent must be a non-negative number of seconds, got {value!r}")
    if seconds > MAX_SECONDS_SPENT:
        raise ValueError(f"seconds_spent must be at most {MAX_SECONDS_SPENT} (24 h), got {value!r}")
    return seconds


def _round(value: object) -> int | None:
    """``round`` as a whole number ≥ 1 (None when absent or empty)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    digits = isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() and len(value.strip()) <= 10
    if isinstance(value, bool) or not (isinstance(value, int) or digits):
        raise ValueError(f"round must be a positive whole number, got {value!r}")
    number = int(value)
    if not 1 <= number <= MAX_ROUND:
        raise ValueError(f"round must be a positive whole number, got {value!r}")
    return number


def row_from_fields(fields: dict, file: str, line: int, raw: str) -> VerdictRow | BadRow | None:
    """One received row (column → value) as a :class:`VerdictRow`, a :class:`BadRow` saying what
    is wrong, or None when its verdict is empty (the claim was not answered)."""
    try:
        verdict = _text(fields.get("verdict"), "verdict")
        if verdict is None:
            return None
        claim_id = _id(fields.get("claim_id"), "claim_id")
        reviewer = _id(fields.get("reviewer"), "reviewer")
        if claim_id is None:
            raise ValueError("no claim_id")
        if reviewer is None:
            raise ValueError("no reviewer")
        if verdict.lower() not in VERDICTS:
            raise ValueError(f"invalid verdict {verdict!r} (expected {', '.join(VERDICTS)})")
        return VerdictRow(
            file=file, line=line, claim_id=claim_id, reviewer=reviewer, verdict=verdict.lower(),
            doc_id=_id(fields.get("doc_id"), "doc_id"), round=_round(fields.get("round")),
            seconds_spent=_seconds(fields.get("seconds_spent")), note=_text(fields.get("note"), "note"), raw=raw,
        )
    except ValueError as exc:
        return BadRow(file, line, str(exc), raw)


def _not_utf8(text: str) -> bool:
    """Whether ``text`` (decoded with ``surrogateescape``) held bytes that are not UTF-8."""
    return any("\udc80" <= ch <= "\udcff" for ch in text)


def _printable(text: str) -> str:
    """``text`` with undecodable bytes shown as U+FFFD, for reports and the quarantine."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _collect(parsed: VerdictRow | BadRow | None, rows: list, bad: list) -> int:
    """File ``parsed`` into ``rows`` or ``bad``; 1 when it was an unanswered row, else 0."""
    if isinstance(parsed, VerdictRow):
        rows.append(parsed)
    elif isinstance(parsed, BadRow):
        bad.append(parsed)
    return int(parsed is None)


def _count_row(name: str, counted: int, limits: InputLimits) -> int:
    """``counted`` + 1, or :class:`InvalidVerdictFile` when that passes ``max_verdict_rows``."""
    if counted >= limits.max_verdict_rows:
        raise InvalidVerdictFile(f"{name}: " + over_limit(0, "rows", "max_verdict_rows", limits.max_verdict_rows, at_least=True))
    return counted + 1


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object's pairs as a dict; :class:`RepeatedKey` when a key comes twice (json's
    default keeps the last value silently)."""
    obj: dict = {}
    for key, value in pairs:
        if key in obj:
            raise RepeatedKey(key)
        obj[key] = value
    return obj


def _parse_jsonl(name: str, text: str, limits: InputLimits) -> ParsedFile:
    """One JSON object per line; blank lines are ignored. An object naming a key twice is a bad row."""
    rows: list[VerdictRow] = []
    bad: list[BadRow] = []
    unanswered = counted = 0
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        counted = _count_row(name, counted, limits)
        raw = _printable(line)
        if _not_utf8(line):
            bad.append(BadRow(name, number, "malformed line: not UTF-8 text", raw))
            continue
        try:
            obj = json.loads(line, object_pairs_hook=unique_keys)
        except RepeatedKey as exc:
            bad.append(BadRow(name, number, f"ambiguous line: the key {shown(exc.key)} appears more than once in one object", raw))
            continue
        except json.JSONDecodeError as exc:
            bad.append(BadRow(name, number, f"malformed line: not valid JSON ({exc.msg} at column {exc.colno})", raw))
            continue
        except RecursionError:
            bad.append(BadRow(name, number, "malformed line: JSON nested too deeply to read", raw[:1000]))
            continue
        except ValueError as exc:  # e.g. an integer of more than 4,300 digits
            bad.append(BadRow(name, number, f"malformed line: not valid JSON ({exc})", raw[:1000]))
            continue
        if not isinstance(obj, dict):
            bad.append(BadRow(name, number, "malformed line: not a JSON object", raw))
            continue
        unanswered += _collect(row_from_fields(obj, name, number, raw), rows, bad)
    return ParsedFile(rows, bad, unanswered)


def _parse_csv(name: str, text: str, limits: InputLimits) -> ParsedFile:
    """A header line, then one row per record (quoted fields may span lines); blank rows are
    ignored. A file without a header, or whose header names a column twice, is refused
    (:class:`InvalidVerdictFile`)."""
    rows: list[VerdictRow] = []
    bad: list[BadRow] = []
    unanswered = counted = 0
    lines = io.StringIO(text, newline="").readlines()  # split as the csv reader splits them
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    missing: list[str] = []
    consumed = 0
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:  # e.g. a field over the csv module's size limit
            start, consumed = consumed + 1, reader.line_num
            bad.append(BadRow(name, start, f"malformed line: {exc}", _printable("".join(lines[start - 1:consumed]))[:1000]))
            continue
        start, consumed = consumed + 1, reader.line_num
        text_of_row = "".join(lines[start - 1:consumed]).rstrip("\r\n")
        raw = _printable(text_of_row)
        if not any(f.strip() for f in fields):
            continue
        counted = _count_row(name, counted, limits)
        if header is None:
            header = [f.strip().lower() for f in fields]
            repeated = sorted(c for c, n in Counter(header).items() if c and n > 1)
            if repeated:
                listed = ", ".join(map(shown, repeated[:3])) + (f" and {len(repeated) - 3} more" if len(repeated) > 3 else "")
                raise InvalidVerdictFile(f"{name}: line {start}: the header names column {listed} more than once "
                                         "(which one holds the value would be a guess)")
            missing = [c for c in REQUIRED if c not in header]
            continue
        if _not_utf8(text_of_row):
            bad.append(BadRow(name, start, "malformed line: not UTF-8 text", raw))
        elif missing:
            bad.append(BadRow(name, start, f"the header has no column {', '.join(missing)} (needs {', '.join(REQUIRED)})", raw))
        elif len(fields) != len(header):
            bad.append(BadRow(name, start, f"malformed line: {len(fields)} fields where the header has {len(header)}", raw))
        else:
            unanswered += _collect(row_from_fields(dict(zip(header, fields)), name, start, raw), rows, bad)
    if header is None and not bad:
        raise InvalidVerdictFile(f"{name}: empty file (no header; expected a header line with {', '.join(REQUIRED)})")
    return ParsedFile(rows, bad, unanswered)


def verdict_file_kind(name: str) -> str:
    """``csv`` or ``jsonl``: the format of verdict file ``name`` by its suffix (``.csv``, or
    ``.jsonl``/``.ndjson``); :class:`InvalidVerdictFile` for any other name."""
    lower = name.lower()
    if lower.endswith(CSV_SUFFIXES):
        return "csv"
    if lower.endswith(JSONL_SUFFIXES):
        return "jsonl"
    raise InvalidVerdictFile(f"{name}: not a verdict file (expected .csv, .jsonl or .ndjson)")


def parse_verdict_file(name: str, data: bytes, limits: InputLimits = InputLimits()) -> ParsedFile:
    """Parse a verdict file by its name's suffix (``.csv``, or ``.jsonl``/``.ndjson``).
    Line numbers are those of the file (a CSV row spanning lines is reported at its first).
    Raises :class:`InvalidVerdictFile` for any other suffix, an empty file (a CSV without a
    header, a JSONL file without a line), more than ``limits.max_verdict_bytes`` bytes or more
    than ``limits.max_verdict_rows`` rows. A CSV file with only its header holds no rows."""
    kind = verdict_file_kind(name)
    if len(data) > limits.max_verdict_bytes:
        raise InvalidVerdictFile(f"{name}: " + over_limit(len(data), "bytes", "max_verdict_bytes", limits.max_verdict_bytes))
    text = data.decode("utf-8", "surrogateescape").removeprefix("\ufeff")
    if kind == "csv":
        return _parse_csv(name, text, limits)
    if not text.strip():
        raise InvalidVerdictFile(f"{name}: empty file (no verdict rows)")
    return _parse_jsonl(name, text, limits)


def check_verdicts(
    rows: list[VerdictRow], claims: pl.DataFrame, deferrals: pl.DataFrame, verdicts: pl.DataFrame
) -> tuple[pl.DataFrame, list[BadRow]]:
    """Split received rows into the ones to store and bad ones, against the review state:
    ``claims`` (``doc_id, claim_id``), ``deferrals`` (``doc_id, claim_id, round, reviewer``) and
    the stored ``verdicts`` (same columns).

    A row is bad when its claim id is unknown (or not in the ``doc_id`` it names); the claim was
    never assigned to its reviewer; it names a round in which the claim was not assigned to
    that reviewer, or a round that is closed because the claim was deferred again later (it
    returned to the pool after its deadline); that reviewer already answered the claim in that
    round (stored verdicts never change); or it repeats an earlier row for the same claim,
    reviewer and round. A row without a round answers its reviewer's latest assignment of the
    claim. Good rows come back with ``doc_id`` and ``round`` resolved (:data:`GOOD_SCHEMA`).
    """
    doc_of = dict(claims.select("claim_id", "doc_id").iter_rows())
    assigned: dict[tuple[str, str, str], list[int]] = {}
    for doc, claim, rnd, reviewer in deferrals.select("doc_id", "claim_id", "round", "reviewer").unique().sort("round").iter_rows():
        assigned.setdefault((doc, claim, reviewer), []).append(rnd)
    latest = {(d, c): r for d, c, r in deferrals.group_by("doc_id", "claim_id").agg(pl.col("round").max()).iter_rows()}
    stored = set(verdicts.select("doc_id", "claim_id", "round", "reviewer").iter_rows())
    seen: dict[tuple[str, str, int, str], int] = {}
    good, bad = [], []
    for row in rows:
        doc = doc_of.get(row.claim_id)
        if doc is None:
            reason = f"unknown claim id {row.claim_id!r}"
        elif row.doc_id is not None and row.doc_id != doc:
            reason = f"unknown claim id {row.claim_id!r} in document {row.doc_id!r} (it belongs to {doc!r})"
        elif (doc, row.claim_id, row.reviewer) not in assigned:
            reason = f"claim {row.claim_id!r} is not assigned to reviewer {row.reviewer!r}"
        else:
            rounds = assigned[(doc, row.claim_id, row.reviewer)]
            rnd = row.round if row.round is not None else rounds[-1]
            key = (doc, row.claim_id, rnd, row.reviewer)
            if rnd not in rounds:
                reason = f"wrong round {rnd}: claim {row.claim_id!r} was assigned to {row.reviewer!r} in round {', '.join(map(str, rounds))}"
            elif latest[(doc, row.claim_id)] > rnd:
                reason = (f"wrong round {rnd}: claim {row.claim_id!r} returned to the pool after its deadline and was "
                          f"deferred again in round {latest[(doc, row.claim_id)]}")
            elif key in stored:
                reason = f"claim {row.claim_id!r} was already answered by {row.reviewer!r} in round {rnd} (stored verdicts never change)"
            elif key in seen:
                reason = f"duplicate of line {seen[key]} (same claim, reviewer and round)"
            else:
                seen[key] = row.line
                good.append({"doc_id": doc, "claim_id": row.claim_id, "round": rnd, "reviewer": row.reviewer,
                             "verdict": row.verdict, "seconds_spent": row.seconds_spent, "note": row.note})
                continue
        bad.append(BadRow(row.file, row.line, reason, row.raw))
    return pl.DataFrame(good, schema=GOOD_SCHEMA), bad


def count_late(good: pl.DataFrame, deferrals: pl.DataFrame, now: datetime) -> int:
    """How many ``good`` rows (of :func:`check_verdicts`) answer an assignment of ``deferrals``
    (``doc_id, claim_id, round, reviewer, deadline``) that was overdue at ``now``: its deadline
    set and not after ``now``, as :func:`grace_core.assignment.open_assignments` counts it.
    Such a vote is stored and counts like any other (its round is still open, or
    :func:`check_verdicts` would have refused it); this count is what says it was late."""
    keys = ["doc_id", "claim_id", "round", "reviewer"]
    overdue = deferrals.filter(pl.col("deadline").is_not_null() & (pl.col("deadline") <= now)).select(keys)
    return good.join(overdue.with_columns(pl.col("round").cast(GOOD_SCHEMA["round"])), on=keys, how="semi").height
