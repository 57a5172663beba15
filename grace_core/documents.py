"""Document batches: JSONL bytes in, validated ``documents``, ``priors`` and ``questions``
tables out. Pure: it takes the batch's bytes and its file name (for messages), never a path.

One document per line (blank lines are skipped). Accepted shapes:

- **generic**: ``{"id", "title", "text"}`` or ``{"id", "title", "sections": [{"name",
  "paragraphs": [str, …]}, …]}``, with optional ``"questions"``;
- **QASPER** (``id, title, abstract, sections, questions``): the abstract becomes a first
  prior section named ``Abstract``; other fields (``split``, ``figures_and_tables``, …) are ignored;
- **QuALITY** (``article_id, title, article, questions``): ``article_id`` stands for ``id`` and
  ``article`` for ``text``.

Priors are the named sections when a document has sections (sections without any non-blank
paragraph are skipped; a section's paragraphs are joined by a blank line), else chunks of at
most :data:`CHUNK_WORDS` words cut at paragraph boundaries (a longer paragraph is cut between
words), named ``Chunk 1``, ``Chunk 2``, ….

A question is ``{"question", "id"?, "options"?: [str], …}``; every other key (QASPER's
``answers``, QuALITY's ``gold_label``, …) is kept as canonical JSON in ``gold_json`` for
evaluation. Without an ``id`` a question gets a content-hash id.

Ids are content hashes (:func:`content_id`), so the same document always gives the same rows.
``content_hash`` covers everything stored for a document (title, priors, questions); the same
id with another content hash is a conflict. Every problem raises :class:`InvalidBatch` naming
the file, the 1-based line and the field (``sections[2].paragraphs[0]``); the first problem
stops the parse, so a batch is accepted whole or not at all.

Hostile input is refused the same way: document and question ids outside the safe set of
:mod:`grace_core.identifiers` (no ``/``, ``..``, NUL, …), a lone surrogate (``"\\ud800"``)
anywhere in a line, nesting deeper than ``max_json_depth``, and anything over the
:class:`~grace_core.limits.InputLimits` (batch bytes, line bytes, field characters, paragraphs
per document); a limit's message names the setting that raises it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

import polars as pl

from grace_core.errors import InvalidBatch
from grace_core.identifiers import id_problem
from grace_core.limits import InputLimits, over_limit

CHUNK_WORDS = 1000
ABSTRACT_SECTION = "Abstract"
PRIOR_PREFIX = "p:"
QUESTION_PREFIX = "q:"

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


class _Line:
    """Error reporting for one line: every message names the file, the line and the field."""

    def __init__(self, file: str, number: int) -> None:
        self.file, self.number = file, number

    def fail(self, field: str | None, message: str) -> InvalidBatch:
        where = f"{self.file}: line {self.number}"
        return InvalidBatch(f"{where}: field '{field}': {message}" if field else f"{where}: {message}")

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

    def identifier(self, obj: dict, key: str, field: str, *, required: bool = True) -> str | None:
        """A stripped id (:func:`grace_core.identifiers.id_problem`)."""
        value = self.text(obj, key, field, required=required)
        if value is None:
            return None
        problem = id_problem(value.strip())
        if problem:
            raise self.fail(field, f"id {problem}")
        return value.strip()

    def items(self, obj: dict, key: str, field: str) -> list:
        value = obj.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(field, f"expected a list, got {type(value).__name__}")
        return value


def _check_values(obj: dict, line: _Line, limits: InputLimits) -> None:
    """Walk the parsed line (without recursion) and refuse nesting deeper than
    ``max_json_depth``, strings (values and keys) over ``max_field_chars`` and lone surrogates,
    naming the field of the first one in line order."""
    stack: list[tuple[object, str, int]] = [(obj, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > limits.max_json_depth:
                raise line.fail((path[:80] + "…" if len(path) > 80 else path) or None, f"JSON nested more than {limits.max_json_depth} levels deep (GRACE_MAX_JSON_DEPTH)")
            if isinstance(value, dict):
                children = []
                for key, child in value.items():
                    if _SURROGATE.search(key):
                        raise line.fail(path or None, f"a key holds a lone surrogate ({key!r}), which is not text")
                    shown_key = key if key.isprintable() and len(key) <= 40 else repr(key[:40])
                    children.append((child, f"{path}.{shown_key}" if path else shown_key, depth + 1))
            else:
                children = [(child, f"{path}[{i}]", depth + 1) for i, child in enumerate(value)]
            stack += reversed(children)
        elif isinstance(value, str):
            if len(value) > limits.max_field_chars:
                raise line.fail(path, over_limit(len(value), "characters", "max_field_chars", limits.max_field_chars))
            bad = _SURROGATE.search(value)
            if bad:
                raise line.fail(path, f"holds a lone surrogate ({bad.group()!r} at character {bad.start() + 1}), which is not text")


def _decode(raw: bytes, line: _Line, limits: InputLimits) -> dict | None:
    if len(raw) > limits.max_line_bytes:
        raise line.fail(None, "the line is " + over_limit(len(raw), "bytes", "max_line_bytes", limits.max_line_bytes))
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


def _sections(obj: dict, line: _Line, limits: InputLimits) -> list[tuple[str, str]]:
    named: list[tuple[str, str]] = []
    n_paragraphs = 0
    for i, section in enumerate(line.items(obj, "sections", "sections")):
        where = f"sections[{i}]"
        if not isinstance(section, dict):
            raise line.fail(where, f"expected an object with name and paragraphs, got {type(section).__name__}")
        name = line.text(section, "name", f"{where}.name")
        paragraphs = section.get("paragraphs")
        if not isinstance(paragraphs, list):
            raise line.fail(f"{where}.paragraphs", "missing" if paragraphs is None else f"expected a list, got {type(paragraphs).__name__}")
        n_paragraphs += len(paragraphs)
        _too_many_paragraphs(f"{where}.paragraphs", n_paragraphs, line, limits)
        for j, p in enumerate(paragraphs):
            if not isinstance(p, str):
                raise line.fail(f"{where}.paragraphs[{j}]", f"expected a string, got {type(p).__name__}")
        body = "\n\n".join(p.strip() for p in paragraphs if p.strip())
        if body:
            named.append((name.strip(), body))
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
        priors.append((ABSTRACT_SECTION, abstract.strip()))
    if text_key:
        body = line.text(obj, text_key, text_key)
        _too_many_paragraphs(text_key, len(_PARAGRAPH_BREAK.findall(body)) + 1, line, limits)
        priors += [(f"Chunk {k}", chunk) for k, chunk in enumerate(chunk_text(body, chunk_words), start=1)]
        shape = "quality" if text_key == "article" else "text"
    else:
        priors += _sections(obj, line, limits)
        shape = "qasper" if "abstract" in obj else "sections"
    if not priors:
        field = text_key or ("sections" if "sections" in obj else "text")
        raise line.fail(field, "the document has no text (give 'text', or 'sections' with non-empty paragraphs)")
    return shape, priors


def _questions(obj: dict, doc_id: str, line: _Line) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, q in enumerate(line.items(obj, "questions", "questions")):
        where = f"questions[{i}]"
        if not isinstance(q, dict):
            raise line.fail(where, f"expected an object with a question, got {type(q).__name__}")
        question = line.text(q, "question", f"{where}.question").strip()
        qid = line.identifier(q, "id", f"{where}.id", required=False)
        qid = qid if qid is not None else QUESTION_PREFIX + content_id(doc_id, question)
        if qid in seen:
            raise line.fail(f"{where}.id", f"question id {qid!r} appears twice in this document")
        seen.add(qid)
        options = q.get("options")
        if options is not None and not (isinstance(options, list) and all(isinstance(o, str) for o in options)):
            raise line.fail(f"{where}.options", "expected a list of strings")
        gold = {k: v for k, v in q.items() if k not in ("id", "question", "options")}
        rows.append({
            "question_id": qid, "ord": i, "question": question, "options": options,
            "gold_json": json.dumps(gold, sort_keys=True, ensure_ascii=False) if gold else None,
        })
    return rows


def parse_batch(data: bytes, name: str, *, chunk_words: int = CHUNK_WORDS, limits: InputLimits = InputLimits()) -> DocumentBatch:
    """Parse and validate a JSONL document batch (see the module docstring for the format).

    ``name`` is only used in messages and reports. Raises :class:`InvalidBatch` on the first
    problem: bytes that are not UTF-8, a line that is not a JSON object, a missing or mistyped
    field, an id outside the safe set, a lone surrogate, too deep nesting, a size over
    ``limits``, a document without text, a repeated question id, a document id repeated with
    different content, or a batch without documents.
    """
    if len(data) > limits.max_batch_bytes:
        raise InvalidBatch(f"{name}: " + over_limit(len(data), "bytes", "max_batch_bytes", limits.max_batch_bytes))
    bid = batch_id(data)
    docs: list[dict[str, Any]] = []
    priors: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    seen: dict[str, tuple[str, int]] = {}
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        line = _Line(name, number)
        obj = _decode(raw, line, limits)
        if obj is None:
            continue
        id_key = "id" if "id" in obj or "article_id" not in obj else "article_id"
        doc_id = line.identifier(obj, id_key, id_key)
        title = line.text(obj, "title", "title").strip()
        shape, named = _priors(obj, line, chunk_words, limits)
        qrows = _questions(obj, doc_id, line)
        canonical = json.dumps({"title": title, "priors": named, "questions": qrows}, sort_keys=True, ensure_ascii=False)
        digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        if doc_id in seen:
            if seen[doc_id][0] != digest:
                raise line.fail(id_key, f"document {doc_id!r} already appears on line {seen[doc_id][1]} with different content")
            continue
        seen[doc_id] = (digest, number)
        ids: set[str] = set()
        doc_priors = []
        for ord_, (section, body) in enumerate(named):
            sid = PRIOR_PREFIX + content_id(doc_id, section, body)
            if sid not in ids:
                ids.add(sid)
                doc_priors.append({"doc_id": doc_id, "source_id": sid, "name": section, "ord": ord_, "text": body, "batch_id": bid})
        priors += doc_priors
        questions += [{"doc_id": doc_id, **q, "batch_id": bid} for q in qrows]
        docs.append({
            "doc_id": doc_id, "title": title, "content_hash": digest, "batch_id": bid, "line": number,
            "source_format": shape, "n_words": sum(len(p["text"].split()) for p in doc_priors),
            "n_priors": len(doc_priors), "n_questions": len(qrows),
        })
    if not docs:
        raise InvalidBatch(f"{name}: no documents (every line is blank)")
    return DocumentBatch(
        name=name,
        batch_id=bid,
        n_lines=len(lines) - (1 if data.endswith(b"\n") else 0),
        documents=pl.DataFrame(docs, schema=DOCUMENT_SCHEMA),
        priors=pl.DataFrame(priors, schema=PRIOR_SCHEMA),
        questions=pl.DataFrame(questions, schema=QUESTION_SCHEMA),
    )
