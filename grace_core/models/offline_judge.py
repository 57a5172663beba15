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

Thresholds are settings calibrated on QASPER dev by ``benchmarks/calibrate_judge.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

from grace_core.models.config import ModelConfig
from grace_core.models.offline_support import Support, SupportScorer
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
        """Judge every claim of every request (all pairs: it is cheap offline)."""
        floor = min(self.entail_similarity, self.contradict_similarity, CONTAINMENT_SIMILARITY)
        supports = self.scorer.support(
            [r.source for r in requests], [r.claims for r in requests],
            floor=floor, contradict_similarity=self.contradict_similarity,
        )
        out: list[list[Judgement]] = []
        for row in supports:
            out.append([
                Judgement(
                    label_of(s, entail_similarity=self.entail_similarity, entail_overlap=self.entail_overlap,
                             contradict_similarity=self.contradict_similarity),
                    score=None if s is None else s.similarity,
                )
                for s in row
            ])
        return out
