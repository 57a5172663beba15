"""Seeded, truth-keeping rewordings of response sentences, as LLM samples word one fact
differently: the offline responder applies them before it corrupts anything, and records each
one (:class:`~grace_core.models.roles.Paraphrase`).

Every operation only removes words or moves them, so a paraphrase says no more than the
sentence(s) it came from (its content words, numbers, terms and negations are theirs) and
stays true when they are:

- ``parenthetical``: drop a parenthesis that negates nothing (``X (Y) does Z`` → ``X does Z``);
- ``lead``: drop a leading adverbial phrase (``In this section, we …`` → ``We …``);
- ``trailing``: drop a trailing modifier or reason (``…, which …``, ``… because …``, ``…, such as …``);
- ``clause``: keep one of the clauses the sentence splits into (``A; B`` → ``A``);
- ``swap``: move a clause around ``because``/``while``/``whereas`` (``A because B`` →
  ``Because B, a``; ``A, while B`` → ``While B, a``);
- ``merge``: join a sentence with the next one of the context (``We use X. We train Y.`` →
  ``We use X and train Y.``; ``… X. The model …`` → ``… X and the model …``).

Conditions and exceptions (``if``, ``unless``, ``when``, ``only``, ``except``) are never dropped or
moved, nor is any part holding a negation.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from grace_core.models.lexicon import NEGATIONS, STOPWORDS, tokens
from grace_core.models.roles import Paraphrase, ParaphraseKind
from grace_core.models.segment import MIN_CLAUSE_WORDS, clauses, is_fragment, normalise

SINGLE_KINDS: tuple[ParaphraseKind, ...] = ("parenthetical", "lead", "trailing", "clause", "swap")
KINDS: tuple[ParaphraseKind, ...] = (*SINGLE_KINDS, "merge")

_PARENTHESIS = re.compile(r"\s*\([^()]*\)")
_LEAD = re.compile(
    r"^(?:(?:in|on|for|with|as|to|through|by|under|from|at|during|after|before|following|compared to|compared with|"
    r"unlike|similar to|similarly to|using|based on|given|besides|overall|however|moreover|furthermore|thus|"
    r"therefore|also|finally|specifically|in addition|in particular|for example|for instance|as a result|"
    r"in practice|in general|in this work|in this paper|in this section)\b[^,;()]{0,60}),\s+(?P<rest>.+)$",
    re.IGNORECASE,
)
_TRAILING = re.compile(
    r"(?:,\s+(?:which|where|making|resulting in|leading to|such as|including|e\.g\.|i\.e\.|thus|and thus|as|using|"
    r"by using|allowing|giving)|\s+(?:because|since|due to|as well as|so that|in order to))\s+",
    re.IGNORECASE,
)
_SWAP = re.compile(r"(?:\s+because|,\s+(?:while|whereas))\s+", re.IGNORECASE)
_PRONOUNS = frozenset({"We", "They", "It"})
_DETERMINERS = frozenset({"The", "Our", "This", "These", "Their", "Its"})
_SUBJECTS = _PRONOUNS | _DETERMINERS | {"A", "An", "Each", "Such", "Both", "All"}
"""Openings of a second sentence that read on after ``and`` (a subject, not a lead phrase)."""
_GUARDED = frozenset("if unless when whenever only except provided then".split())
"""Words whose clause scopes over the rest of the sentence: never dropped or moved."""


def _words(text: str) -> list[str]:
    return [t.lower() for t in tokens(text)]


def _safe_to_drop(text: str) -> bool:
    """A part that may go: it negates nothing and holds no condition or exception."""
    words = _words(text)
    return not any(w in NEGATIONS or w.endswith("n't") or w in _GUARDED for w in words)


def _sentence(text: str) -> str:
    text = normalise(text).rstrip(" ,;:")
    text = text[:1].upper() + text[1:]
    return text if text[-1:] in ".!?" else text + "."


def _lower_first(text: str) -> str | None:
    """``text`` with its first word lowercased, when that word is a plain function word
    (``The``, ``We``, ``This``); None when lowercasing could change a name or term."""
    first = text.split(" ", 1)[0]
    if first.lower() not in STOPWORDS or not first[:1].isupper() or any(ch.isupper() for ch in first[1:]):
        return None
    return first.lower() + text[len(first):]


def _body(sentence: str) -> str:
    """The sentence without its final full stop."""
    return sentence.rstrip().rstrip(".")


def _standalone(text: str, original: str) -> bool:
    return text != original and not is_fragment(text) and len(text.split()) >= MIN_CLAUSE_WORDS + 1


def drop_parenthetical(sentence: str, rng: random.Random) -> str | None:
    """Drop one parenthesis that negates nothing."""
    found = [m for m in _PARENTHESIS.finditer(sentence) if _safe_to_drop(m.group())]
    if not found:
        return None
    m = rng.choice(found)
    out = _sentence(sentence[: m.start()] + sentence[m.end():])
    return out if _standalone(out, sentence) else None


def drop_lead(sentence: str, rng: random.Random) -> str | None:
    """Drop a leading adverbial phrase up to its comma."""
    m = _LEAD.match(sentence)
    if m is None or not _safe_to_drop(sentence[: m.start("rest")]):
        return None
    out = _sentence(m.group("rest"))
    return out if _standalone(out, sentence) else None


def drop_trailing(sentence: str, rng: random.Random) -> str | None:
    """Cut the sentence before a trailing modifier or reason (one of them, at random)."""
    cuts = [m for m in _TRAILING.finditer(sentence)
            if len(sentence[: m.start()].split()) > MIN_CLAUSE_WORDS and _safe_to_drop(sentence[m.start():])]
    if not cuts:
        return None
    out = _sentence(sentence[: rng.choice(cuts).start()])
    return out if _standalone(out, sentence) and sentence[: len(_body(out))] == _body(out) else None


def keep_clause(sentence: str, rng: random.Random) -> str | None:
    """Keep one of the clauses the decomposer splits the sentence into; the dropped ones must
    negate nothing and hold no condition."""
    parts = clauses(sentence)
    if len(parts) < 2:
        return None
    keep = rng.randrange(len(parts))
    if not all(_safe_to_drop(p) for i, p in enumerate(parts) if i != keep):
        return None
    out = parts[keep]
    return out if _standalone(out, sentence) else None


def swap_clauses(sentence: str, rng: random.Random) -> str | None:
    """``A because B`` → ``Because B, a``; ``A, while B`` → ``While B, a`` (the moved clause must
    open with a function word, lowercased; neither side may hold a condition or negation)."""
    body = _body(sentence)
    found = [m for m in _SWAP.finditer(body)
             if len(body[: m.start()].split()) >= MIN_CLAUSE_WORDS and len(body[m.end():].split()) >= MIN_CLAUSE_WORDS
             and _safe_to_drop(body[: m.start()]) and _safe_to_drop(body[m.end():])]
    if not found:
        return None
    m = rng.choice(found)
    left, right = body[: m.start()], body[m.end():]
    moved = _lower_first(left)
    if moved is None or "," in right:
        return None
    word = m.group().strip(" ,").lower()
    out = _sentence(f"{word.capitalize()} {right}, {moved}")
    return out if out != sentence and not is_fragment(out) else None


def merge(first: str, second: str) -> str | None:
    """Join two sentences: with the subject said once when both open with the same one
    (``We use X. We train Y.`` → ``We use X and train Y.``), else with ``and`` when the second
    opens with a subject (``The``, ``We``, ``This``, …). None otherwise, or when either is a
    question or already joins clauses with a semicolon."""
    if any(s.rstrip()[-1:] in "?!" or ";" in s for s in (first, second)):
        return None
    a, b = first.split(), _body(second).split()
    shared = 0
    while shared < min(3, len(a) - 1, len(b) - 1) and a[shared] == b[shared] and a[shared].isalpha():
        shared += 1
    pronoun = shared == 1 and a[0] in _PRONOUNS
    noun_phrase = shared >= 2 and a[0] in _DETERMINERS
    if (pronoun or noun_phrase) and b[shared].lower() not in STOPWORDS:
        rest: str | None = " ".join(b[shared:])
    elif b[0] in _SUBJECTS:
        rest = _lower_first(" ".join(b))
    else:
        return None
    return None if rest is None else _sentence(f"{_body(first)} and {rest}")


OPERATIONS: dict[ParaphraseKind, Callable[[str, random.Random], str | None]] = {
    "parenthetical": drop_parenthetical, "lead": drop_lead, "trailing": drop_trailing,
    "clause": keep_clause, "swap": swap_clauses,
}


def paraphrase(sentences: list[str], adjacent: list[bool], rate: float, rng: random.Random) -> tuple[list[str], list[Paraphrase]]:
    """Reword ``sentences`` (a response, in order): each one, with probability ``rate``, by the
    first applicable operation tried in a random order (``merge`` only with the next sentence
    when ``adjacent[k]`` says the two follow each other in the context). Returns the new
    sentences and the record of every rewording (indices into the new list)."""
    out: list[str] = []
    done: list[Paraphrase] = []
    k = 0
    while k < len(sentences):
        sent = sentences[k]
        step = 1
        if rate > 0 and rng.random() < rate:
            kinds = list(KINDS if k + 1 < len(sentences) and adjacent[k] else SINGLE_KINDS)
            for kind in rng.sample(kinds, len(kinds)):
                if kind == "merge":
                    new, original = merge(sent, sentences[k + 1]), f"{sent} {sentences[k + 1]}"
                else:
                    new, original = OPERATIONS[kind](sent, rng), sent
                if new is not None:
                    done.append(Paraphrase(len(out), kind, original, new))
                    sent, step = new, 2 if kind == "merge" else 1
                    break
        out.append(sent)
        k += step
    return out, done
