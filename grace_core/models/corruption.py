"""Deliberate, recorded hallucinations: change a number, flip a negation, or swap a term for
another term of the same text. The offline responder uses them so that every response claim
has a known truth; the judge calibration uses them as known contradictions.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable

from grace_core.models.lexicon import NUMBER_RE, is_term, tokens
from grace_core.models.roles import Corruption, CorruptionKind
from grace_core.models.segment import sentences

_AUX = r"(?:is|are|was|were|can|could|will|would|should|may|might|must|does|do|did|has|have|had)"
_NEGATED_AUX = re.compile(rf"\b({_AUX})\s+not\b", re.IGNORECASE)
_CONTRACTED = re.compile(rf"\b({_AUX})n't\b", re.IGNORECASE)
_CANNOT = re.compile(r"\b([Cc])annot\b")
_PLAIN_AUX = re.compile(rf"\b{_AUX}\b", re.IGNORECASE)

KINDS: tuple[CorruptionKind, ...] = ("number", "negation", "term")


def flip_negation(sentence: str) -> tuple[str, str, str] | None:
    """Remove the first negation of an auxiliary verb, or negate the first auxiliary:
    ``(before, after, corrupted sentence)``, or None if the sentence has no auxiliary."""
    for pattern, repl in ((_NEGATED_AUX, r"\1"), (_CONTRACTED, r"\1"), (_CANNOT, r"\1an")):
        m = pattern.search(sentence)
        if m:
            after = m.expand(repl)
            return m.group(), after, sentence[: m.start()] + after + sentence[m.end():]
    m = _PLAIN_AUX.search(sentence)
    if m is None:
        return None
    after = m.group() + " not"
    return m.group(), after, sentence[: m.start()] + after + sentence[m.end():]


def _other_number(raw: str, rng: random.Random) -> str:
    plain = raw.replace(",", "")
    if "." in plain:
        decimals = len(plain.split(".")[1])
        value = float(plain)
        step = max(abs(value) * rng.uniform(0.05, 0.3), 10 ** -decimals)
        new = value + step if rng.random() < 0.5 or value - step < 0 else value - step
        text = f"{new:.{decimals}f}"
        return text if text != plain else f"{value + 10 ** -decimals:.{decimals}f}"
    value = int(plain)
    delta = rng.randint(1, max(3, value // 5))
    return str(value + delta if rng.random() < 0.5 or value - delta < 0 else value - delta)


def change_number(sentence: str, rng: random.Random) -> tuple[str, str, str] | None:
    """Replace one number of the sentence by a different one, or None if it has no number."""
    found = list(NUMBER_RE.finditer(sentence))
    if not found:
        return None
    m = rng.choice(found)
    after = _other_number(m.group(), rng)
    return m.group(), after, sentence[: m.start()] + after + sentence[m.end():]


def swap_term(sentence: str, pool: Iterable[str], rng: random.Random) -> tuple[str, str, str] | None:
    """Replace one technical term of the sentence by another term from ``pool`` that the sentence
    does not use, or None if either side has none."""
    toks = tokens(sentence)
    own = sorted({t for i, t in enumerate(toks) if is_term(t, i == 0)})
    others = sorted(set(pool) - set(toks))
    if not own or not others:
        return None
    before, after = rng.choice(own), rng.choice(others)
    m = re.search(rf"(?<![\w-]){re.escape(before)}(?![\w-])", sentence)
    if m is None:
        return None
    return before, after, sentence[: m.start()] + after + sentence[m.end():]


def corrupt(sentence: str, index: int, rng: random.Random, term_pool: Iterable[str]) -> Corruption | None:
    """Corrupt ``sentence`` (sentence ``index`` of its response) with the first applicable kind,
    tried in a random order; None if no kind applies."""
    pool = tuple(term_pool)
    for kind in rng.sample(KINDS, len(KINDS)):
        if kind == "number":
            change = change_number(sentence, rng)
        elif kind == "negation":
            change = flip_negation(sentence)
        else:
            change = swap_term(sentence, pool, rng)
        if change is not None:
            before, after, corrupted = change
            return Corruption(index, kind, sentence, corrupted, before, after)
    return None


def term_pool(text: str) -> tuple[str, ...]:
    """The technical terms of ``text`` (sorted), candidates for :func:`swap_term`: the
    acronym-like ones (inner capital or digit) when there are any, else all capitalised names."""
    found = {t for sent in sentences(text) for i, t in enumerate(tokens(sent)) if is_term(t, i == 0)}
    strong = {t for t in found if any(ch.isupper() or ch.isdigit() for ch in t[1:])}
    return tuple(sorted(strong or found))
