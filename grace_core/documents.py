"""Document batches: JSONL bytes in, validated ``documents``, ``priors`` and ``questions``
tables out. Pure: it takes the batch's bytes and its file name (for messages), never a path.

One document per line (blank lines are skipped). Accepted shapes:

- **generic**: ``{"id", "title", "text"}`` or ``{"id", "title", "sections": [{"name",
  "paragraphs": [str, …]}, …]}``, with optional ``"questions"``;
- **QASPER** (``id, title, abstract, sections, questions``): the abstract becomes a first
  prior section named ``Abstract``; other fields (``split``, ``figures_and_tables``, …) are ignored;
- **QuALITY** (``article_id, title, article, questions``): ``article_id`` stands for ``id`` and
  ``article`` for ``text``; HTML remnants of the article (comments, ``script``/``style``
  blocks, HTML tags, character entities) are removed, block tags becoming paragraph breaks.

Priors are the named sections when a document has sections (sections without any non-blank
paragraph are skipped; a section's paragraphs are joined by a blank line), else chunks of at
most :data:`CHUNK_WORDS` words cut at paragraph boundaries (a longer paragraph is cut between
words), named ``Chunk 1``, ``Chunk 2``, ….

Real files as they come: a section whose name is empty or null is named ``Section <k>`` (its
1-based position); sections with the same name stay separate priors; a null where a list is
expected (``sections``, ``paragraphs``, ``questions``, ``options``) counts as an empty list and
null items of ``sections``, ``paragraphs`` and ``questions`` are left out. A document whose id
(``id``, else ``article_id``) is null, missing or blank gets a derived id, ``d:`` and the
:func:`content_id` of its title and priors (names and texts), so the same content always gets
the same id. The same document id on several lines with the same title and priors (QuALITY
repeats an article once per question set) is one document holding the questions of all its
lines; with another title or other priors it is a conflict.

A question is ``{"question", "id"?, "options"?: [str], …}`` (``question_id`` or
``question_unique_id`` stands for ``id``); every other key (QASPER's ``answers``, QuALITY's
``gold_label``, …) is kept as canonical JSON in ``gold_json`` for evaluation. Without an id (or
with a null or blank one) a question gets a content-hash id.

Ids are content hashes (:func:`content_id`), so the same document always gives the same rows.
``content_hash`` covers everything stored for a document (title, priors, questions); the same
id with another content hash is a conflict. Every problem raises :class:`InvalidLine` naming
the file, the 1-based line and the field (``sections[2].paragraphs[0]``). By default the first
problem stops the parse, so a batch is accepted whole or not at all; with ``skip_invalid``
each unusable line is left out and listed in :attr:`DocumentBatch.skipped`.

Hostile input is refused the same way: document and question ids outside the safe set of
:mod:`grace_core.identifiers` (no ``/``, ``..``, NUL, …), a lone surrogate (``"\\ud800"``)
anywhere in a line, nesting deeper than ``max_json_depth``, and anything over the
:class:`~grace_core.limits.InputLimits` (batch bytes, line bytes, JSON values per line, field
characters, paragraph and prior characters, paragraphs and questions per document), so that no
document a round cannot process in reasonable time and memory gets into the lake; a limit's
message names the setting that raises it.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from dataclasses import asdict, dataclass, field
from collections.abc import Iterator
from typing import Any

import numpy as np
import polars as pl

from grace_core.errors import InvalidBatch, InvalidLine
from grace_core.identifiers import id_problem
from grace_core.limits import InputLimits, over_limit

CHUNK_WORDS = 1000
ABSTRACT_SECTION = "Abstract"
PRIOR_PREFIX = "p:"
QUESTION_PREFIX = "q:"
DOCUMENT_PREFIX = "d:"
ID_KEYS = ("id", "article_id")
QUESTION_ID_KEYS = ("id", "question_id", "question_unique_id")

DOCUMENT_SCHEMA = {
    "doc_id": pl.Utf8, "title": pl.Utf8, "content_hash": pl.Utf8, "batch_id": pl.Utf8, "line": pl.Int32,
    "source_format": pl.Utf8, "n_words": pl.Int64, "n_priors": pl.Int32, "n_questions": pl.Int32,
}
PRIOR_SCHEMA = {"doc_id": pl.Utf8, "source_id": pl.Utf8, "name": pl.Utf8, "ord": pl.Int32, "text": pl.Utf8, "batch_id": pl.Utf8}
QUESTION_SCHEMA = {
    "doc_id": pl.Utf8, "question_id": pl.Utf8, "ord": pl.Int32, "question": pl.Utf8,
    "options": pl.List(pl.Utf8), "gold_json": pl.Utf8, "batch_id": pl.Utf8,
}
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_SURROGATE = re.compile("[\ud800-\udfff]")
_MEMBER_KEY = re.compile(rb'\s*("[^"\\]*(?:\\.[^"\\]*)*")')
_PIECE = 1024 * 1024
_BLOCK_TAGS = ("p", "br", "div", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "li", "ul", "ol", "dl", "dt", "dd", "tr", "table",
               "blockquote", "pre", "html", "head", "body", "title", "center", "section", "article", "header", "footer")
_INLINE_TAGS = ("i", "b", "em", "strong", "u", "a", "span", "font", "small", "big", "sup", "sub", "tt", "td", "th", "img",
                "meta", "link", "cite", "code", "s", "strike", "abbr", "q", "!doctype")
_HTML_TAG = re.compile(r"<\s*/?\s*(" + "|".join(_BLOCK_TAGS + _INLINE_TAGS) + r")\b[^<>]{0,2000}>", re.IGNORECASE)
_HTML_ENTITY = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});")


def content_id(*parts: str) -> str:
    """A stable 128-bit hex id of the given text parts (SHA-256, parts separated by U+001F)."""
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]


def source_kinds(names: list[str], prior_sections: tuple[str, ...] = ()) -> list[str]:
    """``prior`` or ``passage`` for each section name of one document. With no
    ``prior_sections`` every section is a prior; otherwise the sections whose name equals one of
    them (case-insensitive) are, and the rest are passages — but a document with no such section
    keeps its first one as a prior, so every graph has an anchor."""
    if not prior_sections:
        return ["prior"] * len(names)
    wanted = {s.strip().lower() for s in prior_sections}
    kinds = ["prior" if n.strip().lower() in wanted else "passage" for n in names]
    if kinds and "prior" not in kinds:
        kinds[0] = "prior"
    return kinds


def batch_id(data: bytes) -> str:
    """The id of a batch: SHA-256 of its exact bytes, so the same file is recognised again."""
    return hashlib.sha256(data).hexdigest()


def chunk_text(text: str, chunk_words: int = CHUNK_WORDS) -> list[str]:
    """Cut ``text`` into chunks of at most ``chunk_words`` words, at paragraph boundaries
    (blank lines) where possible. Paragraphs keep their text; a paragraph longer than a chunk
    is cut between words (joined by single spaces). Every word appears once, in order.

    Linear in the length of ``text``: a long paragraph is cut by index, never re-sliced."""
    chunks: list[str] = []
    current: list[str] = []
    count = 0
    for paragraph in (p.strip() for p in _PARAGRAPH_BREAK.split(text)):
        words = paragraph.split()
        if not words:
            continue
        if len(words) > chunk_words:
            if current:
                chunks.append("\n\n".join(current))
                current, count = [], 0
            start = 0
            while len(words) - start > chunk_words:
                chunks.append(" ".join(words[start:start + chunk_words]))
                start += chunk_words
            words = words[start:]
            paragraph = " ".join(words)
        if current and count + len(words) > chunk_words:
            chunks.append("\n\n".join(current))
            current, count = [], 0
        current.append(paragraph)
        count += len(words)
    if current:
        chunks.append("\n\n".join(current))
    return chunks


def _cut_between(text: str, opener: str, closer: str, *, case_blind: bool = False) -> str:
    """``text`` without every span from ``opener`` to the next ``closer`` (to the end when
    there is none), in one pass."""
    hay = text.lower() if case_blind else text
    kept: list[str] = []
    at = 0
    while (start := hay.find(opener, at)) >= 0:
        stop = hay.find(closer, start + len(opener))
        kept.append(text[at:start])
        at = len(text) if stop < 0 else stop + len(closer)
    return "".join(kept) + text[at:]


def strip_html(text: str) -> str:
    """``text`` without HTML remnants: comments and ``script``/``style`` blocks removed, the
    tags of :data:`_BLOCK_TAGS` replaced by a paragraph break and those of :data:`_INLINE_TAGS`
    by nothing (other ``<…>`` text, e.g. ``<unk>``, stays), character entities (``&amp;``,
    ``&#8212;``) decoded. Linear in the length of ``text``."""
    if "<" not in text and "&" not in text:
        return text
    text = _cut_between(text, "<!--", "-->")
    for tag in ("script", "style"):
        text = _cut_between(text, f"<{tag}", f"</{tag}>", case_blind=True)
    text = _HTML_TAG.sub(lambda m: "\n\n" if m.group(1).lower() in _BLOCK_TAGS else "", text)
    return _HTML_ENTITY.sub(lambda m: html.unescape(m.group()), text)


@dataclass(frozen=True)
class SkippedLine:
    """A batch line left out by a parse with ``skip_invalid``: its 1-based ``line``, its
    document id when one could be read (else None), the ``field`` at fault (None: the whole
    line), the ``reason`` and the full one-line ``message`` (file, line, field, reason)."""

    line: int
    doc_id: str | None
    field: str | None
    reason: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DocumentBatch:
    """A parsed batch. Frames follow :data:`DOCUMENT_SCHEMA`, :data:`PRIOR_SCHEMA` and
    :data:`QUESTION_SCHEMA`; a document repeated with identical content appears once."""

    name: str
    batch_id: str
    n_lines: int
    documents: pl.DataFrame
    priors: pl.DataFrame
    questions: pl.DataFrame
    skipped: tuple[SkippedLine, ...] = ()


class _Line:
    """Error reporting for one line: every message names the file, the line and the field."""

    def __init__(self, file: str, number: int) -> None:
        self.file, self.number = file, number

    def fail(self, field: str | None, message: str) -> InvalidLine:
        where = f"{self.file}: line {self.number}"
        text = f"{where}: field '{field}': {message}" if field else f"{where}: {message}"
        return InvalidLine(text, line=self.number, field=field, reason=message)

    def text(self, obj: dict, key: str, field: str, *, required: bool = True, allow_blank: bool = False) -> str | None:
        value = obj.get(key)
        if value is None:
            if required:
                raise self.fail(field, "missing")
            return None
        if not isinstance(value, str):
            raise self.fail(field, f"expected a string, got {type(value).__name__}")
        if not allow_blank and not value.strip():
            raise self.fail(field, "is empty")
        return value

    def optional_id(self, obj: dict, keys: tuple[str, ...], field_prefix: str = "") -> tuple[str | None, str]:
        """The first of ``keys`` with a non-null, non-blank value, stripped and checked
        (:func:`grace_core.identifiers.id_problem`), and its key; ``(None, keys[0])`` when none has one."""
        for key in keys:
            value = obj.get(key)
            if value is None or (isinstance(value, str) and not value.strip()):
                continue
            if not isinstance(value, str):
                raise self.fail(field_prefix + key, f"expected a string, got {type(value).__name__}")
            problem = id_problem(value.strip())
            if problem:
                raise self.fail(field_prefix + key, f"id {problem}")
            return value.strip(), key
        return None, keys[0]

    def items(self, obj: dict, key: str, field: str) -> list[tuple[int, Any]]:
        """``(index, item)`` of the list ``obj[key]`` without its null items; a null or missing list is empty."""
        value = obj.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(field, f"expected a list, got {type(value).__name__}")
        return [(i, item) for i, item in enumerate(value) if item is not None]


def _shown_path(keys: list[str | int]) -> str:
    """``["sections", 2, "paragraphs", 0]`` → ``sections[2].paragraphs[0]`` (unprintable or
    long keys shown as the repr of their first 40 characters)."""
    path = ""
    for key in keys:
        if isinstance(key, int):
            path += f"[{key}]"
        else:
            shown = key if key.isprintable() and len(key) <= 40 else repr(key[:40])
            path += f".{shown}" if path else shown
    return path


def _children(value: dict | list) -> Iterator[tuple[str | int, Any]]:
    return iter(value.items()) if isinstance(value, dict) else enumerate(value)


def _check_values(obj: dict, line: _Line, limits: InputLimits) -> None:
    """Walk the parsed line (without recursion) and refuse nesting deeper than
    ``max_json_depth``, strings (values and keys) over ``max_field_chars`` and lone surrogates,
    naming the field of the first one in line order.

    The walk holds one iterator per open container and builds a field's name only to report
    it, so it costs memory in the depth, not in the number of values (naming every element of
    a 30-million-element array up front took 4.8 GB)."""
    iterators = [_children(obj)]
    keys: list[str | int] = [""]  # keys[d]: the key or index, in its container, of the value looked at on level d
    while iterators:
        item = next(iterators[-1], None)
        if item is None:
            iterators.pop()
            keys.pop()
            continue
        key, value = item
        keys[-1] = key
        if isinstance(key, str) and _SURROGATE.search(key):
            raise line.fail(_shown_path(keys[:-1]) or None, f"a key holds a lone surrogate ({key!r}), which is not text")
        if isinstance(value, (dict, list)):
            if len(iterators) + 1 > limits.max_json_depth:
                path = _shown_path(keys)
                raise line.fail(path[:80] + "…" if len(path) > 80 else path,
                                f"JSON nested more than {limits.max_json_depth} levels deep (GRACE_MAX_JSON_DEPTH)")
            iterators.append(_children(value))
            keys.append("")
        elif isinstance(value, str):
            if len(value) > limits.max_field_chars:
                raise line.fail(_shown_path(keys), over_limit(len(value), "characters", "max_field_chars", limits.max_field_chars))
            bad = _SURROGATE.search(value)
            if bad:
                raise line.fail(_shown_path(keys),
                                f"holds a lone surrogate ({bad.group()!r} at character {bad.start() + 1}), which is not text")


def _values_over(raw: bytes, limit: int) -> tuple[bool, int | None]:
    """Whether ``raw`` (one JSON line) holds more than ``limit`` JSON values, and where the
    top-level member starts (its object's ``{`` or the comma before it) in whose value the
    count passes the limit (None when the line is not an object).

    Values are counted on the bytes, outside strings: the top value, one after each comma and
    one for the first element of each non-empty array or object. Strings are found by their
    quotes, a quote after an odd run of backslashes being escaped. The line is scanned with
    numpy in pieces of :data:`_PIECE` bytes, carrying the string state, the trailing
    backslashes, the depth and the count from piece to piece, so memory stays ~40 bytes per
    byte of a piece (40 MiB) whatever the line's length."""
    codes = np.frombuffer(raw, dtype=np.uint8)
    in_string, run, depth, seen, member = 0, 0, 0, 1, None
    for start in range(0, len(codes), _PIECE):
        head = codes[start:start + _PIECE]
        n = len(head)
        quotes = np.flatnonzero(head == 34)
        if quotes.size and (run or (head[np.maximum(quotes - 1, 0)] == 92).any()):  # some quote may be escaped
            last_other = np.maximum.accumulate(np.where(head == 92, -1, np.arange(n)))  # last non-backslash up to i
            before = last_other[np.maximum(quotes - 1, 0)]
            runs = np.where((quotes > 0) & (before >= 0), quotes - 1 - before, quotes + run)  # backslashes before each quote
            quotes = quotes[runs % 2 == 0]
        if quotes.size:
            toggles = np.zeros(n, dtype=np.uint8)
            toggles[quotes] = 1
            outside = ((in_string + np.cumsum(toggles, dtype=np.uint8)) & 1) == 0  # the string state after each byte
        else:
            outside = np.full(n, not in_string)
        if head[-1] == 92:
            others = np.flatnonzero(head != 92)
            run = n - 1 - int(others[-1]) if others.size else n + run
        else:
            run = 0
        in_string = int(not outside[-1])
        opens = ((head == 91) | (head == 123)) & outside
        closes = ((head == 93) | (head == 125)) & outside
        commas = (head == 44) & outside
        if not (opens.any() or closes.any() or commas.any()):
            continue
        closed = np.zeros(n, dtype=bool)  # followed by a closing bracket: an empty array or object when opening
        closed[:-1] = closes[1:]
        closed[-1] = start + n < len(codes) and codes[start + n] in (93, 125)
        firsts = opens & ~closed  # opening brackets with a first element
        levels = depth + np.cumsum(opens.astype(np.int32) - closes, dtype=np.int32)  # the depth after each byte
        separators = np.flatnonzero((commas | opens) & (levels == 1))  # the top object's `{` and its commas
        steps = commas | firsts
        if seen + np.count_nonzero(steps) > limit:
            crossed = int(np.argmax(seen + np.cumsum(steps, dtype=np.int64) > limit))
            separators = separators[separators <= crossed]
            return True, start + int(separators[-1]) if separators.size else member
        if separators.size:
            member = start + int(separators[-1])
        depth, seen = int(levels[-1]), seen + int(np.count_nonzero(steps))
    return False, None


def _count_values(raw: bytes, line: _Line, limits: InputLimits) -> None:
    """Refuse a line holding more than ``max_json_values`` JSON values before it is parsed,
    naming the top-level field whose value passes the limit. Parsing makes a Python object of
    every value (a 60 MB line ``[{},{},…]`` in an unknown field took 107 s and 4.6 GB to
    accept), so the values are counted on the bytes: first an upper bound (commas and opening
    brackets, those in strings too: ~0.1 s for 60 MB), and only when that is over the limit
    the exact count outside strings (:func:`_values_over`)."""
    limit = limits.max_json_values
    if 1 + raw.count(b",") + raw.count(b"[") + raw.count(b"{") <= limit:
        return
    over, member = _values_over(raw, limit)
    if not over:
        return
    key = _MEMBER_KEY.match(raw, member + 1) if member is not None else None
    try:
        name = json.loads(key.group(1)) if key else None
    except ValueError:
        name = None
    field = _shown_path([name]) if isinstance(name, str) else None
    raise line.fail(field, "the line holds " + over_limit(limit, "JSON values", "max_json_values", limit, at_least=True))


def _decode(raw: bytes, line: _Line, limits: InputLimits) -> dict | None:
    if len(raw) > limits.max_line_bytes:
        raise line.fail(None, "the line is " + over_limit(len(raw), "bytes", "max_line_bytes", limits.max_line_bytes))
    _count_values(raw, line, limits)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise line.fail(None, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})") from None
    if not text.strip():
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise line.fail(None, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise line.fail(None, f"JSON nested more than {limits.max_json_depth} levels deep (GRACE_MAX_JSON_DEPTH)") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise line.fail(None, f"not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise line.fail(None, f"expected a JSON object, got {type(obj).__name__}")
    _check_values(obj, line, limits)
    return obj


def _too_many_paragraphs(field: str, n: int, line: _Line, limits: InputLimits) -> None:
    if n > limits.max_paragraphs:
        raise line.fail(field, "the document has " + over_limit(n, "paragraphs", "max_paragraphs", limits.max_paragraphs))


def _paragraphs_fit(text: str, field: str, line: _Line, limits: InputLimits) -> None:
    """Refuse ``text`` when one of its paragraphs (blank-line separated) is longer than
    ``max_paragraph_chars``: a round cuts each into sentences in time quadratic in its length."""
    if len(text) <= limits.max_paragraph_chars:
        return
    longest = max(len(p.strip()) for p in _PARAGRAPH_BREAK.split(text))
    if longest > limits.max_paragraph_chars:
        raise line.fail(field, "a paragraph of " + over_limit(longest, "characters", "max_paragraph_chars", limits.max_paragraph_chars))


def _prior_fits(text: str, field: str, line: _Line, limits: InputLimits) -> None:
    """Refuse a prior (or passage) longer than ``max_prior_chars``: a round embeds it whole."""
    if len(text) > limits.max_prior_chars:
        raise line.fail(field, "a prior of " + over_limit(len(text), "characters", "max_prior_chars", limits.max_prior_chars))


def _sections(obj: dict, line: _Line, limits: InputLimits) -> list[tuple[str, str]]:
    named: list[tuple[str, str]] = []
    n_paragraphs = 0
    for i, section in line.items(obj, "sections", "sections"):
        where = f"sections[{i}]"
        if not isinstance(section, dict):
            raise line.fail(where, f"expected an object with name and paragraphs, got {type(section).__name__}")
        name = line.text(section, "name", f"{where}.name", required=False, allow_blank=True)
        name = name.strip() if name and name.strip() else f"Section {i + 1}"
        paragraphs = line.items(section, "paragraphs", f"{where}.paragraphs")
        n_paragraphs += len(paragraphs)
        _too_many_paragraphs(f"{where}.paragraphs", n_paragraphs, line, limits)
        for j, p in paragraphs:
            if not isinstance(p, str):
                raise line.fail(f"{where}.paragraphs[{j}]", f"expected a string, got {type(p).__name__}")
            _paragraphs_fit(p, f"{where}.paragraphs[{j}]", line, limits)
        body = "\n\n".join(p.strip() for _, p in paragraphs if p.strip())
        if body:
            _prior_fits(body, where, line, limits)
            named.append((name, body))
    return named


def _priors(obj: dict, line: _Line, chunk_words: int, limits: InputLimits) -> tuple[str, list[tuple[str, str]]]:
    """The document's shape and its ``(name, text)`` priors, in order."""
    text_key = "text" if "text" in obj else "article" if "article" in obj else None
    if "text" in obj and "article" in obj:
        raise line.fail("article", "give either 'text' or 'article', not both")
    if text_key and "sections" in obj:
        raise line.fail(text_key, "give either 'text' or 'sections', not both")
    priors: list[tuple[str, str]] = []
    abstract = line.text(obj, "abstract", "abstract", required=False, allow_blank=True)
    if abstract and abstract.strip():
        _paragraphs_fit(abstract, "abstract", line, limits)
        _prior_fits(abstract.strip(), "abstract", line, limits)
        priors.append((ABSTRACT_SECTION, abstract.strip()))
    if text_key:
        body = line.text(obj, text_key, text_key)
        if text_key == "article":
            body = strip_html(body)
        _too_many_paragraphs(text_key, len(_PARAGRAPH_BREAK.findall(body)) + 1, line, limits)
        chunks = chunk_text(body, chunk_words)
        for chunk in chunks:  # paragraphs of over chunk_words words are cut between words already
            _paragraphs_fit(chunk, text_key, line, limits)
            _prior_fits(chunk, text_key, line, limits)
        priors += [(f"Chunk {k}", chunk) for k, chunk in enumerate(chunks, start=1)]
        shape = "quality" if text_key == "article" else "text"
    else:
        priors += _sections(obj, line, limits)
        shape = "qasper" if "abstract" in obj else "sections"
    if not priors:
        field_name = text_key or ("sections" if "sections" in obj else "text")
        raise line.fail(field_name, "the document has no text (give 'text', or 'sections' with non-empty paragraphs)")
    return shape, priors


def _too_many_questions(n: int, line: _Line, limits: InputLimits) -> None:
    if n > limits.max_questions:
        raise line.fail("questions", "the document has " + over_limit(n, "questions", "max_questions", limits.max_questions))


def _questions(obj: dict, doc_id: str, line: _Line, limits: InputLimits) -> list[dict[str, Any]]:
    """The line's questions (``question_id, question, options, gold_json`` and ``field``, the
    question's place in the line for messages), in order."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    items = line.items(obj, "questions", "questions")
    _too_many_questions(len(items), line, limits)
    for i, q in items:
        where = f"questions[{i}]"
        if not isinstance(q, dict):
            raise line.fail(where, f"expected an object with a question, got {type(q).__name__}")
        question = line.text(q, "question", f"{where}.question").strip()
        _paragraphs_fit(question, f"{where}.question", line, limits)
        qid, id_key = line.optional_id(q, QUESTION_ID_KEYS, f"{where}.")
        qid = qid if qid is not None else QUESTION_PREFIX + content_id(doc_id, question)
        if qid in seen:
            raise line.fail(f"{where}.{id_key}", f"question id {qid!r} appears twice in this document")
        seen.add(qid)
        options = q.get("options")
        if options is not None and not (isinstance(options, list) and all(isinstance(o, str) for o in options)):
            raise line.fail(f"{where}.options", "expected a list of strings")
        for k, option in enumerate(options or ()):
            _paragraphs_fit(option, f"{where}.options[{k}]", line, limits)
        gold = {k: v for k, v in q.items() if k not in ("question", "options", *QUESTION_ID_KEYS)}
        rows.append({
            "question_id": qid, "question": question, "options": options,
            "gold_json": json.dumps(gold, sort_keys=True, ensure_ascii=False) if gold else None, "field": f"{where}.{id_key}",
        })
    return rows


@dataclass
class _Document:
    """One document as its lines give it: its questions are those of every line that holds it."""

    doc_id: str
    id_field: str
    title: str
    shape: str
    priors: list[tuple[str, str]]
    line: int
    questions: dict[str, dict[str, Any]] = field(default_factory=dict)
    question_lines: dict[str, int] = field(default_factory=dict)

    def merge(self, other: _Document, line: _Line, limits: InputLimits) -> None:
        """Add ``other``'s questions (the same document on a later line); :class:`InvalidLine`
        when its title or priors differ, one of its question ids names another question, or
        the document then has more than ``max_questions``."""
        if (other.title, other.priors) != (self.title, self.priors):
            raise line.fail(other.id_field, f"document {self.doc_id!r} already appears on line {self.line} with different content")
        for qid, q in other.questions.items():
            known = self.questions.get(qid)
            if known is not None and _stored(known) != _stored(q):
                raise line.fail(q["field"], f"question id {qid!r} already appears on line {self.question_lines[qid]} "
                                            "with a different question")
        _too_many_questions(len(self.questions.keys() | other.questions.keys()), line, limits)
        for qid, q in other.questions.items():
            if qid not in self.questions:
                self.questions[qid] = q
                self.question_lines[qid] = other.line


def _stored(question: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in question.items() if k != "field"}


def _document(obj: dict, line: _Line, chunk_words: int, limits: InputLimits) -> _Document:
    given_id, id_key = line.optional_id(obj, ID_KEYS)
    title = line.text(obj, "title", "title").strip()
    _paragraphs_fit(title, "title", line, limits)
    shape, named = _priors(obj, line, chunk_words, limits)
    doc_id = given_id
    if doc_id is None:
        doc_id = DOCUMENT_PREFIX + content_id(title, json.dumps(named, ensure_ascii=False))
        problem = id_problem(doc_id)
        if problem:  # never for a content hash; checked as every id is
            raise line.fail(id_key, f"derived id {problem}")
    if id_key == "id" and "id" not in obj and "article_id" in obj:
        id_key = "article_id"
    questions = _questions(obj, doc_id, line, limits)
    return _Document(doc_id, id_key, title, shape, named, line.number,
                     {q["question_id"]: q for q in questions}, {q["question_id"]: line.number for q in questions})


def _readable_id(obj: dict | None) -> str | None:
    """The line's document id for a report when it is a valid one, else None."""
    for key in ID_KEYS:
        value = obj.get(key) if obj else None
        if isinstance(value, str) and value.strip() and id_problem(value.strip()) is None:
            return value.strip()
    return None


def _frames(documents: list[_Document], bid: str) -> tuple[list[dict], list[dict], list[dict]]:
    docs: list[dict[str, Any]] = []
    priors: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    for d in documents:
        qrows = [{**_stored(q), "ord": k} for k, q in enumerate(d.questions.values())]
        canonical = json.dumps({"title": d.title, "priors": d.priors, "questions": qrows}, sort_keys=True, ensure_ascii=False)
        ids: set[str] = set()
        doc_priors = []
        for ord_, (section, body) in enumerate(d.priors):
            sid = PRIOR_PREFIX + content_id(d.doc_id, section, body)
            if sid not in ids:
                ids.add(sid)
                doc_priors.append({"doc_id": d.doc_id, "source_id": sid, "name": section, "ord": ord_, "text": body, "batch_id": bid})
        priors += doc_priors
        questions += [{"doc_id": d.doc_id, **q, "batch_id": bid} for q in qrows]
        docs.append({
            "doc_id": d.doc_id, "title": d.title, "content_hash": hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
            "batch_id": bid, "line": d.line, "source_format": d.shape,
            "n_words": sum(len(p["text"].split()) for p in doc_priors), "n_priors": len(doc_priors), "n_questions": len(qrows),
        })
    return docs, priors, questions


def parse_batch(data: bytes, name: str, *, chunk_words: int = CHUNK_WORDS, limits: InputLimits = InputLimits(),
                skip_invalid: bool = False) -> DocumentBatch:
    """Parse and validate a JSONL document batch (see the module docstring for the format).

    ``name`` is only used in messages and reports. A line is unusable when its bytes are not
    UTF-8, it is not a JSON object, a field is mistyped or a required one (``title``, a
    question's ``question``) missing, an id is outside the safe set, it holds a lone surrogate,
    too deep nesting or a size over ``limits``, the document has no text, a question id repeats
    within it, or its document id appeared on an earlier line with other content. Without
    ``skip_invalid`` the first unusable line raises :class:`InvalidLine`; with it, unusable
    lines are left out and listed in ``skipped`` (a batch of them only has no documents).
    :class:`InvalidBatch` for a batch over ``max_batch_bytes`` and, without ``skip_invalid``,
    for a batch without documents.
    """
    if len(data) > limits.max_batch_bytes:
        raise InvalidBatch(f"{name}: " + over_limit(len(data), "bytes", "max_batch_bytes", limits.max_batch_bytes))
    bid = batch_id(data)
    documents: dict[str, _Document] = {}
    skipped: list[SkippedLine] = []
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        line = _Line(name, number)
        obj = None
        try:
            obj = _decode(raw, line, limits)
            if obj is None:
                continue
            doc = _document(obj, line, chunk_words, limits)
            if doc.doc_id in documents:
                documents[doc.doc_id].merge(doc, line, limits)
            else:
                documents[doc.doc_id] = doc
        except InvalidLine as exc:
            if not skip_invalid:
                raise
            skipped.append(SkippedLine(number, _readable_id(obj), exc.field, exc.reason, str(exc)))
    if not documents and not skipped:
        raise InvalidBatch(f"{name}: no documents (every line is blank)")
    docs, priors, questions = _frames(list(documents.values()), bid)
    return DocumentBatch(
        name=name,
        batch_id=bid,
        n_lines=len(lines) - (1 if data.endswith(b"\n") else 0),
        documents=pl.DataFrame(docs, schema=DOCUMENT_SCHEMA),
        priors=pl.DataFrame(priors, schema=PRIOR_SCHEMA),
        questions=pl.DataFrame(questions, schema=QUESTION_SCHEMA),
        skipped=tuple(skipped),
    )
