"""Lexical features of English sentences used by the offline roles: content words, numbers,
negation, antonyms and technical terms, and the mismatch between two near-identical texts
that signals a contradiction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

SHORT_TEXT_CACHE = 100_000
"""Cached results per function for short texts (claims, sentences)."""
LONG_TEXT_CACHE = 4_096
"""Cached results per function that is also called on whole sources and documents."""

_TOKEN = re.compile(r"\d+(?:[.,]\d+)*%?|[A-Za-z][A-Za-z0-9]*(?:['\-][A-Za-z0-9]+)*")
NUMBER_RE = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:,\d{3})*(?:\.\d+)?(?![A-Za-z0-9_])")

STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each either etc few for from
    further had has have having he her here hers herself him himself his how i if in into is it its
    itself just let may me might more most must my myself nor of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them themselves then
    there these they this those through to too under until up upon us very via was we were what when
    where which while who whom why will with would you your yours yourself yourselves i.e e.g""".split()
)

NEGATIONS = frozenset(
    "not no never none neither nor without cannot nothing nobody nowhere lack lacks lacking fail fails failed".split()
)

NUMBER_WORDS = {
    "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7", "eight": "8",
    "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "twenty": "20", "hundred": "100", "thousand": "1000",
}

_ANTONYM_PAIRS = (
    ("increase", "decrease"), ("increase", "reduce"), ("improve", "degrade"), ("improve", "worsen"),
    ("improve", "hurt"), ("help", "hurt"), ("gain", "loss"), ("rise", "fall"), ("higher", "lower"),
    ("high", "low"), ("more", "less"), ("more", "fewer"), ("better", "worse"), ("best", "worst"),
    ("larger", "smaller"), ("large", "small"), ("bigger", "smaller"), ("big", "small"), ("longer", "shorter"),
    ("long", "short"), ("faster", "slower"), ("fast", "slow"), ("stronger", "weaker"), ("strong", "weak"),
    ("easier", "harder"), ("easy", "hard"), ("easy", "difficult"), ("simple", "complex"),
    ("outperform", "underperform"), ("positive", "negative"), ("true", "false"), ("correct", "incorrect"),
    ("success", "failure"), ("successful", "unsuccessful"), ("supervised", "unsupervised"),
    ("significant", "insignificant"), ("accept", "reject"), ("include", "exclude"), ("maximum", "minimum"),
    ("maximize", "minimize"), ("above", "below"), ("majority", "minority"), ("similar", "different"),
    ("same", "different"), ("possible", "impossible"), ("able", "unable"), ("consistent", "inconsistent"),
    ("effective", "ineffective"), ("benefit", "harm"), ("always", "never"), ("before", "after"),
    ("first", "last"), ("early", "late"), ("earlier", "later"), ("frequent", "rare"), ("dense", "sparse"),
    ("static", "dynamic"), ("linear", "nonlinear"), ("local", "global"), ("manual", "automatic"),
    ("explicit", "implicit"), ("relevant", "irrelevant"), ("sufficient", "insufficient"),
)


def stem(word: str) -> str:
    """A light suffix stripper that maps common inflections of a word to one form."""
    w = word.lower()
    if len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif len(w) > 4 and w.endswith("ied"):
        w = w[:-3] + "y"
    elif len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif len(w) > 4 and (w.endswith("ed") or w.endswith("es")):
        w = w[:-2]
    elif len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    if len(w) > 4 and w.endswith("e"):
        w = w[:-1]
    return w


ANTONYMS: dict[str, frozenset[str]] = {}
for _a, _b in _ANTONYM_PAIRS:
    _sa, _sb = stem(_a), stem(_b)
    ANTONYMS[_sa] = ANTONYMS.get(_sa, frozenset()) | {_sb}
    ANTONYMS[_sb] = ANTONYMS.get(_sb, frozenset()) | {_sa}


@lru_cache(maxsize=LONG_TEXT_CACHE)
def tokens(text: str) -> tuple[str, ...]:
    """Word and number tokens of ``text``, case kept."""
    return tuple(_TOKEN.findall(text))


@lru_cache(maxsize=LONG_TEXT_CACHE)
def lower_tokens(text: str) -> frozenset[str]:
    """The distinct tokens of ``text``, lowercased."""
    return frozenset(t.lower() for t in tokens(text))


@lru_cache(maxsize=SHORT_TEXT_CACHE)
def content_stems(text: str) -> frozenset[str]:
    """Stems of the words and numbers of ``text`` that are not stopwords or negations."""
    return frozenset(
        stem(t) for t in tokens(text) if (low := t.lower()) not in STOPWORDS and low not in NEGATIONS and len(low) > 1
    )


def _norm_number(raw: str) -> str:
    raw = raw.replace(",", "")
    try:
        return f"{float(raw):g}"
    except ValueError:
        return raw


@lru_cache(maxsize=LONG_TEXT_CACHE)
def numbers(text: str) -> frozenset[str]:
    """The numbers of ``text`` (digits or number words), normalised: ``10,000`` → ``10000``, ``85.0`` → ``85``."""
    found = {_norm_number(m.group()) for m in NUMBER_RE.finditer(text)}
    found.update(NUMBER_WORDS[t.lower()] for t in tokens(text) if t.lower() in NUMBER_WORDS)
    return frozenset(found)


def _is_negation(token: str) -> bool:
    low = token.lower()
    return low in NEGATIONS or low.endswith("n't")


@lru_cache(maxsize=LONG_TEXT_CACHE)
def negated_heads(text: str) -> frozenset[str]:
    """Stems of the words a negation applies to: the first content word after each negation
    cue (``not``, ``no``, ``never``, ``-n't``, ``without``, …), e.g. ``{"use"}`` for "does not use"."""
    toks = tokens(text)
    heads = set()
    for i, t in enumerate(toks):
        if _is_negation(t):
            nxt = next((w for w in toks[i + 1:] if w.lower() not in STOPWORDS and not _is_negation(w)), None)
            if nxt is not None:
                heads.add(stem(nxt))
    return frozenset(heads)


def is_term(token: str, first: bool) -> bool:
    """True for technical terms and names: an inner capital (BERT, GloVe), letters mixed with
    digits (GPT2, F1), or a capitalised word that does not open the sentence."""
    if not token[:1].isalpha():
        return False
    inner_upper = any(ch.isupper() for ch in token[1:])
    mixed = any(ch.isdigit() for ch in token)
    return inner_upper or mixed or (not first and token[0].isupper() and token.lower() not in STOPWORDS)


@lru_cache(maxsize=SHORT_TEXT_CACHE)
def terms(text: str) -> frozenset[str]:
    """The technical terms and names of ``text`` (see :func:`is_term`)."""
    toks = tokens(text)
    return frozenset(t for i, t in enumerate(toks) if is_term(t, i == 0))


MISMATCH_MIN_COVERAGE = 0.6
"""A mismatch counts only when the unit holds at least this share of the claim's content words:
the two must say nearly the same thing for a difference to be a contradiction."""


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Why two near-identical texts disagree: ``kind`` and the differing pieces on each side."""

    kind: str
    claim_side: str
    source_side: str


def mismatch(claim: str, unit: str, source: str | None = None) -> Mismatch | None:
    """The first contradiction signal between ``claim`` and a very similar ``unit`` (the closest
    unit of ``source``), provided the unit covers :data:`MISMATCH_MIN_COVERAGE` of the claim's
    content words:

    - ``negation``: a word negated on one side appears un-negated on the other;
    - ``number``: each has a number the other lacks;
    - ``antonym``: a word of the claim faces its antonym in the unit;
    - ``term``: each has a term the other lacks (at most two on the claim's side).

    When ``source`` is given, a number or term of the claim found anywhere in it is no mismatch
    (the claim may mix two true statements); pass None when the unit is a near copy of the claim.
    """
    cs, us = content_stems(claim), content_stems(unit)
    if not cs or len(cs & us) < MISMATCH_MIN_COVERAGE * len(cs):
        return None
    hc, hu = negated_heads(claim), negated_heads(unit)
    flipped = ((hc - hu) & us) | ((hu - hc) & cs)
    if flipped:
        word = sorted(flipped)[0]
        return Mismatch("negation", f"{'not ' if word in hc else ''}{word}", f"{'not ' if word in hu else ''}{word}")
    cn, un = numbers(claim), numbers(unit)
    extra_c, extra_u = cn - un, un - cn
    if extra_c and extra_u and not (source is not None and extra_c & numbers(source)):
        return Mismatch("number", ", ".join(sorted(extra_c)), ", ".join(sorted(extra_u)))
    only_u = us - cs
    for w in sorted(cs - us):
        opposite = ANTONYMS.get(w, frozenset()) & only_u
        if opposite:
            return Mismatch("antonym", w, sorted(opposite)[0])
    ct, ut = terms(claim), terms(unit)
    tc, tu = ct - ut, ut - ct
    if tc and tu and len(tc) <= 2 and not (source is not None and {t.lower() for t in tc} & lower_tokens(source)):
        return Mismatch("term", ", ".join(sorted(tc)), ", ".join(sorted(tu)))
    return None


def unsupported(claim: str, unit: str, source: str) -> str | None:
    """A specific of ``claim`` that ``source`` cannot back, so it cannot entail the claim: one of
    :func:`unbacked`, or a word the claim affirms that the best ``unit`` negates. None when
    there is none."""
    found = unbacked(claim, source)
    if found is not None:
        return found
    negated_by_unit = sorted((negated_heads(unit) - negated_heads(claim)) & content_stems(claim))
    if negated_by_unit:
        return f"the source negates {negated_by_unit[0]!r}"
    return None


def unbacked(claim: str, source: str) -> str | None:
    """A specific of ``claim`` that no unit of ``source`` can back: a number or a term the
    source never mentions, or a negation the source never makes. None when there is none."""
    extra_numbers = numbers(claim) - numbers(source)
    if extra_numbers:
        return f"number {sorted(extra_numbers)[0]} is not in the source"
    source_tokens = lower_tokens(source)
    extra_terms = sorted(t for t in terms(claim) if t.lower() not in source_tokens)
    if extra_terms:
        return f"term {extra_terms[0]} is not in the source"
    extra_negations = sorted(negated_heads(claim) - negated_heads(source))
    if extra_negations:
        return f"the source never negates {extra_negations[0]!r}"
    return None
