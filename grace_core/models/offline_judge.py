"""The offline judge: entailment from embedding similarity and word overlap, contradiction from a
negation, number, antonym or term mismatch with a highly similar unit of the source.

Rule, per claim and its best unit in the source (see :mod:`grace_core.models.offline_support`):

- ``contradicts`` if similarity ≥ ``judge_contradict_similarity`` and the two mismatch;
- else ``entails`` if the claim has no specific the source cannot back (a number or term the
  source never mentions, a negation it never makes) and either
  - similarity ≥ ``judge_entail_similarity`` and overlap ≥ ``judge_entail_overlap``, or
  - (containment) the source holds every content word of the claim (overlap ≥
    :data:`CONTAINMENT_OVERLAP`) and similarity ≥ :data:`CONTAINMENT_SIMILARITY`: a longer
    claim entails the shorter claims whose content it contains (its clauses, its sentence
    without a modifier, one half of a merged sentence), however much else it says;
- else ``neutral``.

Both non-neutral labels need words in common with one unit: ``contradicts`` a share ≥
:data:`~grace_core.models.lexicon.MISMATCH_MIN_COVERAGE` of the claim's content words in the
unit, ``entails`` a share ≥ ``judge_entail_overlap`` (or all of them) in the unit's window and
no specific the source cannot back (:func:`~grace_core.models.lexicon.unbacked`). A claim that
meets neither with all the source's units together is ``neutral`` whatever the embeddings say,
and is not embedded (:func:`lexically_reachable`): the same labels, at a fraction of the
embedder's work when a source is judged against many unrelated claims (the cascade judges each
newly verified claim against every Boundary claim of its document).

Thresholds are settings calibrated on QASPER dev by ``benchmarks/calibrate_judge.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

from grace_core.models.config import ModelConfig
from grace_core.models.lexicon import MISMATCH_MIN_COVERAGE, content_stems, unbacked
from grace_core.models.offline_support import Support, SupportScorer, source_units
from grace_core.models.roles import Embedder, Judgement, JudgeRequest, Label

CONTAINMENT_OVERLAP = 1.0
"""Share of the claim's content words the source must hold for containment entailment: all."""
CONTAINMENT_SIMILARITY = 0.3
"""Least cosine for containment entailment: a short clause of a long sentence sits far from the
whole in embedding space, but not this far when it is the same topic."""


def label_of(support: Support | None, *, entail_similarity: float, entail_overlap: float, contradict_similarity: float) -> Label:
    """The judge's label for one claim given its :class:`Support` (None: nothing close)."""
    if support is None:
        return "neutral"
    if support.mismatch is not None and support.similarity >= contradict_similarity:
        return "contradicts"
    if support.unsupported is not None:
        return "neutral"
    if support.similarity >= entail_similarity and support.overlap >= entail_overlap:
        return "entails"
    if support.mismatch is None and support.similarity >= CONTAINMENT_SIMILARITY and support.overlap >= CONTAINMENT_OVERLAP:
        return "entails"
    return "neutral"


def lexically_reachable(source: str, claims: Sequence[str], *, entail_share: float) -> list[int]:
    """Indices of the ``claims`` the rule could label other than ``neutral`` against ``source``,
    judging by words alone. With ``U`` the content words of all the source's units, ``c`` a
    claim's: ``|c ∩ U| ≥ MISMATCH_MIN_COVERAGE·|c|`` (a contradiction is possible), or
    ``|c ∩ U| ≥ entail_share·|c|`` and nothing :func:`~grace_core.models.lexicon.unbacked`
    (an entailment is possible). A unit, or a unit's window, holds no more than ``U``; a margin
    for rounding keeps every claim on a threshold."""
    words = frozenset().union(*(content_stems(u) for u in source_units(source)))
    out = []
    for i, claim in enumerate(claims):
        stems = content_stems(claim)
        common = len(stems & words) + 1e-9
        if common >= MISMATCH_MIN_COVERAGE * len(stems) or (common >= entail_share * len(stems) and unbacked(claim, source) is None):
            out.append(i)
    return out


class OfflineJudge:
    """A :class:`~grace_core.models.roles.Judge` that needs no LLM (deterministic)."""

    def __init__(self, embedder: Embedder, config: ModelConfig) -> None:
        self.scorer = SupportScorer(embedder)
        self.entail_similarity = config.judge_entail_similarity
        self.entail_overlap = config.judge_entail_overlap
        self.contradict_similarity = config.judge_contradict_similarity

    def prepare(self, sources: Sequence[str]) -> None:
        """Start embedding the units of ``sources`` (:meth:`SupportScorer.prepare`)."""
        self.scorer.prepare(sources)

    def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Judgement]]:
        """Judge every claim of every request (all pairs: it is cheap offline); a claim that is
        not :func:`lexically_reachable` is ``neutral`` without a score."""
        floor = min(self.entail_similarity, self.contradict_similarity, CONTAINMENT_SIMILARITY)
        entail_share = min(self.entail_overlap, CONTAINMENT_OVERLAP)
        reachable = [lexically_reachable(r.source, r.claims, entail_share=entail_share) for r in requests]
        supports = self.scorer.support(
            [r.source for r in requests], [[r.claims[i] for i in idx] for r, idx in zip(requests, reachable, strict=True)],
            floor=floor, contradict_similarity=self.contradict_similarity,
        )
        out: list[list[Judgement]] = []
        for r, idx, row in zip(requests, reachable, supports, strict=True):
            judged = [Judgement("neutral")] * len(r.claims)
            for i, s in zip(idx, row, strict=True):
                judged[i] = Judgement(
                    label_of(s, entail_similarity=self.entail_similarity, entail_overlap=self.entail_overlap,
                             contradict_similarity=self.contradict_similarity),
                    score=None if s is None else s.similarity,
                )
            out.append(judged)
        return out
