"""Ids that come from outside (document, question and claim ids of batches and verdict files,
reviewer names): a safe character set, so that an id can name a file, a commit key or a
packet without escaping its folder.

An id is 1–128 characters of ASCII letters, digits and ``. _ : @ + -``, starts with a letter,
a digit or ``_``, and holds no ``..``. So no ``/``, ``\\``, NUL or other control characters,
no spaces, no lone surrogates, no ``.``/``..`` path parts. Real ids pass: QASPER ``1909.00694``,
QuALITY ``52845_75VB1ISR`` and ``63833_set1_1``, content hashes, ``p:…``/``q:…`` source and
question ids, reviewer names such as ``alice``, ``bob.smith`` or ``carol@example.org``.
"""

from __future__ import annotations

import re

from grace_core.errors import InvalidIdentifier

MAX_ID_CHARS = 128
ID_PATTERN = rf"^[A-Za-z0-9_][A-Za-z0-9._:@+-]{{0,{MAX_ID_CHARS - 1}}}$"
ALLOWED = "ASCII letters, digits and . _ : @ + -"
_FIRST_BAD = re.compile(r"[^A-Za-z0-9._:@+-]")


def shown(value: str, limit: int = 60) -> str:
    """``value`` for a message: quoted with escapes (NUL, control characters and lone
    surrogates are shown as ``\\x00``, ``\\ud800``), cut to ``limit`` characters."""
    text = value if len(value) <= limit else value[:limit] + "…"
    return repr(text)


def id_problem(value: str) -> str | None:
    """What is wrong with ``value`` as an id (see the module docstring), or None when it is a
    valid id. The one check every input path uses."""
    if not value:
        return "is empty"
    if len(value) > MAX_ID_CHARS:
        return f"is {len(value):,} characters long (at most {MAX_ID_CHARS})"
    bad = _FIRST_BAD.search(value)
    if bad:
        return f"contains {shown(bad.group())} (allowed: {ALLOWED})"
    if value[0] in ".:@+-":
        return f"starts with {value[0]!r} (it must start with a letter, a digit or _)"
    if ".." in value:
        return "contains '..'"
    return None


def check_id(value: str, what: str) -> str:
    """``value`` when it is a valid id; otherwise :class:`~grace_core.errors.InvalidIdentifier`
    naming ``what`` (e.g. ``reviewer``) and the problem."""
    problem = id_problem(value)
    if problem:
        raise InvalidIdentifier(f"{what} {shown(value)}: {problem}")
    return value


def pydantic_id(value: str) -> str:
    """:func:`check_id` for pydantic fields: a ValueError, which pydantic reports as a
    validation error of the field (the Prefect UI shows it beside the field)."""
    problem = id_problem(value)
    if problem:
        raise ValueError(f"{shown(value)} {problem}")
    return value
