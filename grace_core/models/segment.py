"""Sentence segmentation (pysbd) and clause splitting into atomic, self-contained claims.

A sentence is split at semicolons and at a comma followed by a contrastive conjunction
(``but``, ``whereas``, ``while``, ``although``, ``though``, ``yet``), or by ``and``/``so`` when an
explicit subject follows, as long as both parts stay long enough to stand alone. Leading
discourse markers ("However,", "Moreover,") are dropped, and fragments (headings, citations,
formulas, pieces shorter than :data:`MIN_CLAIM_WORDS` words) are left out.
"""

from __future__ import annotations

import re
from functools import lru_cache

import pysbd

MIN_CLAIM_WORDS = 4
"""Fewest words of a claim; shorter pieces are fragments."""

MIN_CLAUSE_WORDS = 5
"""Fewest words on each side of a clause split."""

MAX_MARKUP_SHARE = 0.02
"""Most formula-markup characters (``$ \\ _ ^ { }``) per character of a claim."""

_MARKUP = "$\\_^{}"
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n|\n(?=[A-Z0-9•\-*])")
_SPACE = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?%)\]])")
_SPACE_AFTER_OPEN = re.compile(r"([(\[])\s+")
_SEMICOLON = re.compile(r"\s*;\s+")
_CONTRAST = re.compile(r",\s+(?:but|whereas|while|although|though|yet)\s+", re.IGNORECASE)
_AND_SUBJECT = re.compile(
    r",\s+(?:and|so)\s+(?=(?:we|it|they|this|these|those|that|our|the|its|their|he|she|i|there)\b)", re.IGNORECASE
)
_MARKER = re.compile(
    r"^(?:however|moreover|furthermore|in addition|additionally|also|thus|therefore|hence|finally|first|second|"
    r"third|firstly|secondly|lastly|then|besides|consequently|in contrast|in particular|specifically|"
    r"for example|for instance|in summary|overall|and|but|so|yet)\s*,?\s+",
    re.IGNORECASE,
)
_WORD = re.compile(r"[A-Za-z][A-Za-z\-']+")


def normalise(text: str) -> str:
    """Collapse whitespace and remove spaces before closing punctuation."""
    text = _SPACE.sub(" ", text).strip()
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    return _SPACE_AFTER_OPEN.sub(r"\1", text)


@lru_cache(maxsize=4_096)
def sentences(text: str) -> tuple[str, ...]:
    """The sentences of ``text`` (paragraph breaks always end a sentence), normalised."""
    out: list[str] = []
    for para in _PARAGRAPH_BREAK.split(text):
        para = normalise(para)
        if not para:
            continue
        for sent in pysbd.Segmenter(language="en", clean=False).segment(para):
            sent = normalise(sent)
            if sent:
                out.append(sent)
    return tuple(out)


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:] if text[:1].islower() else text


def _strip_marker(text: str) -> str:
    stripped = _MARKER.sub("", text, count=1)
    return _capitalise(stripped) if stripped != text else text


def _end(text: str) -> str:
    text = text.rstrip(" ,;:")
    return text if text[-1:] in ".!?" else text + "."


def _split_at(pattern: re.Pattern[str], text: str) -> list[str]:
    parts: list[str] = []
    start = 0
    for m in pattern.finditer(text):
        left, right = text[start:m.start()], text[m.end():]
        if len(left.split()) >= MIN_CLAUSE_WORDS and len(right.split()) >= MIN_CLAUSE_WORDS:
            parts.append(left)
            start = m.end()
    parts.append(text[start:])
    return parts


def clauses(sentence: str) -> tuple[str, ...]:
    """Split one sentence into clauses that can stand alone (the sentence itself when none)."""
    pieces = [sentence]
    for pattern in (_SEMICOLON, _CONTRAST, _AND_SUBJECT):
        pieces = [p for piece in pieces for p in _split_at(pattern, piece)]
    if len(pieces) == 1:
        return (_strip_marker(sentence),)
    return tuple(_end(_capitalise(_strip_marker(p.strip()))) for p in pieces)


def is_fragment(text: str) -> bool:
    """True for pieces that cannot be a claim: too short, mostly symbols or numbers, formula
    markup, a continuation (opens in lower case), a heading or a question."""
    words = text.split()
    if text[:1].islower() or sum(text.count(ch) for ch in _MARKUP) > MAX_MARKUP_SHARE * len(text):
        return True
    if len(words) < MIN_CLAIM_WORDS:
        return True
    alpha = _WORD.findall(text)
    if len(alpha) < MIN_CLAIM_WORDS - 1 or len(alpha) < 0.5 * len(words):
        return True
    if not any(w.islower() for w in alpha):
        return True
    return text.rstrip()[-1:] in (":", "?")


@lru_cache(maxsize=4_096)
def claim_units(text: str) -> tuple[str, ...]:
    """The atomic claims of ``text``: its sentences split into clauses, fragments dropped,
    duplicates removed (first occurrence kept)."""
    seen: dict[str, None] = {}
    for sent in sentences(text):
        for clause in clauses(sent):
            if not is_fragment(clause):
                seen.setdefault(clause, None)
    return tuple(seen)
