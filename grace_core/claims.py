"""Claim identity (DESIGN §1): a claim's id is a stable hash of its document id and its
normalised text, so the same claim decomposed from two sources is one node."""

from __future__ import annotations

import re
import unicodedata

from grace_core.documents import content_id

_SPACE = re.compile(r"\s+")
_TRAILING = re.compile(r"[\s.;:,!?]+$")


def normalise_claim(text: str) -> str:
    """NFKC, lower case, single spaces, no trailing punctuation."""
    return _TRAILING.sub("", _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip().lower())


def claim_id(doc_id: str, text: str) -> str:
    """The id of claim ``text`` in document ``doc_id``."""
    return "c:" + content_id(doc_id, normalise_claim(text))
