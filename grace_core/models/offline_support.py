"""How well a text backs a claim, from embeddings and words: the measure shared by the offline
judge, verifier, responder and answerer, and by the litellm judge's candidate prefilter.

A source is cut into units (its claims, see :func:`~grace_core.models.segment.claim_units`).
For each claim: ``similarity`` is its best cosine to a unit; ``overlap`` is the share of its
content words found in that unit and its two neighbours; ``mismatch`` is the contradiction
signal (negation, number, antonym, term) between the claim and that unit; ``unsupported``
names a specific of the claim (number, term, negation) the source cannot back.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from grace_core.models.lexicon import Mismatch, content_stems, mismatch, unsupported
from grace_core.models.roles import Embedder
from grace_core.models.segment import claim_units, sentences


NEAR_COPY_SIMILARITY = 0.85
"""From this cosine the best unit is a near copy of the claim: a number or term that differs is a
contradiction even if the claim's value occurs elsewhere in the source."""


@dataclass(frozen=True, slots=True)
class Support:
    """The evidence a source gives for one claim."""

    similarity: float
    overlap: float
    unit: str
    mismatch: Mismatch | None
    unsupported: str | None


def source_units(source: str) -> tuple[str, ...]:
    """The units a source is compared by: its claims, else its sentences, else the whole text."""
    return claim_units(source) or sentences(source) or ((source.strip(),) if source.strip() else ())


class SupportScorer:
    """Scores claims against sources with one embedder call per batch."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def prepare(self, sources: Sequence[str]) -> None:
        """Start embedding the units of ``sources`` (:meth:`Embedder.prefetch`), so that scoring
        claims against them later finds them embedded or being embedded, and return at once:
        cutting the sources into units runs on a thread of its own too, since it is slow Python
        (pysbd: a tenth of a second for a paper's priors, several times that while other
        documents' threads hold the GIL) that the caller's next steps (a document's context
        encode, then its first calls) should not wait for."""
        threading.Thread(target=self._prefetch_units, args=(list(sources),), name="grace-units").start()

    def _prefetch_units(self, sources: list[str]) -> None:
        """Only a head start: sources that cannot be cut into units (a broken document) are left
        to :meth:`similarities`, which meets the same error in the caller's thread, where the
        document is left out and named; here it would be an unhandled thread exception."""
        try:
            units = list(dict.fromkeys(u for s in sources for u in source_units(s)))
        except (TypeError, ValueError):
            return
        if units:
            self.embedder.prefetch(units)

    def similarities(self, sources: Sequence[str], claims: Sequence[Sequence[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each source and its claims: (index of the best unit, best cosine) per claim.
        A source without units gives index -1 and cosine -1."""
        units = [source_units(s) for s in sources]
        texts = list(dict.fromkeys([u for us in units for u in us] + [c for cs in claims for c in cs]))
        index = {t: i for i, t in enumerate(texts)}
        emb = self.embedder.embed(texts) if texts else np.zeros((0, 1), dtype=np.float32)
        out = []
        rows: dict[tuple[str, ...], np.ndarray] = {}  # a document's sources share its claims: gather them once
        for us, cs in zip(units, claims, strict=True):
            if not us or not cs:
                out.append((np.full(len(cs), -1, dtype=np.int64), np.full(len(cs), -1.0, dtype=np.float32)))
                continue
            key = tuple(cs)
            if key not in rows:
                rows[key] = emb[[index[c] for c in cs]]
            sims = rows[key] @ emb[[index[u] for u in us]].T
            best = sims.argmax(axis=1)
            out.append((best, sims[np.arange(len(cs)), best]))
        return out

    def support(
        self, sources: Sequence[str], claims: Sequence[Sequence[str]], *, floor: float, contradict_similarity: float
    ) -> list[list[Support | None]]:
        """:class:`Support` of every claim of each source (None when the source has no units).
        Below ``floor`` (too far to matter) only the similarity is computed (overlap 0, no
        mismatch, nothing unsupported); ``mismatch`` is looked for only from
        ``contradict_similarity`` up."""
        result: list[list[Support | None]] = []
        for source, cs, (best, sim) in zip(sources, claims, self.similarities(sources, claims), strict=True):
            units = source_units(source)
            stems = [content_stems(u) for u in units]
            windows: dict[int, frozenset[str]] = {}
            row: list[Support | None] = []
            for claim, j, s in zip(cs, best.tolist(), sim.tolist(), strict=True):
                if j < 0:
                    row.append(None)
                    continue
                if s < floor:
                    row.append(Support(s, 0.0, units[j], None, None))
                    continue
                if j not in windows:
                    windows[j] = frozenset().union(*stems[max(0, j - 1): j + 2])
                words = content_stems(claim)
                overlap = len(words & windows[j]) / len(words) if words else 0.0
                found = None
                if s >= contradict_similarity:
                    found = mismatch(claim, units[j], None if s >= NEAR_COPY_SIMILARITY else source)
                row.append(Support(s, overlap, units[j], found, unsupported(claim, units[j], source)))
            result.append(row)
        return result


def relevance(embedder: Embedder, question: str, candidates: Sequence[str]) -> np.ndarray:
    """Cosine between ``question`` and each candidate text."""
    if not candidates:
        return np.zeros(0, dtype=np.float32)
    emb = embedder.embed([question, *candidates])
    return emb[1:] @ emb[0]
