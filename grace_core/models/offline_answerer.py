"""The offline answerer: the context sentence closest to the question for free-form questions,
option scoring for multiple choice; abstains below a calibrated score.

- Free form: the evidence is the sentence with the highest cosine to the question; abstain
  when that cosine is below ``answer_min_score`` (calibrated on QASPER dev so that attempting
  tracks whether the sentence lies in gold evidence). A polar question (opening with an
  auxiliary verb, no "or" alternative: "Do they use BERT?") is answered "No" when the evidence
  sentence is negated and "Yes" otherwise; any other question is answered with the sentence.
- Multiple choice: each option scores the best cosine between "question + option" and a
  context sentence; the highest wins; abstain when it is below ``option_min_score``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from grace_core.models.config import ModelConfig
from grace_core.models.offline_support import relevance
from grace_core.models.roles import Answer, AnswerRequest, Embedder
from grace_core.models.segment import is_fragment, sentences


_POLAR = re.compile(r"^\s*(?:do|does|did|is|are|was|were|can|could|will|would|has|have|had|should|may|might)\b", re.IGNORECASE)
_NEGATED = re.compile(r"\b(?:not|no|never|none|neither|nor|cannot|without)\b|n't\b", re.IGNORECASE)


def is_polar(question: str) -> bool:
    """A yes/no question: it opens with an auxiliary verb and offers no "or" alternative."""
    return bool(_POLAR.match(question)) and not re.search(r"\bor\b", question, re.IGNORECASE)


def polar_answer(evidence: str) -> str:
    """"No" when the evidence sentence is negated, else "Yes"."""
    return "No" if _NEGATED.search(evidence) else "Yes"


class OfflineAnswerer:
    """A :class:`~grace_core.models.roles.Answerer` without an LLM (deterministic)."""

    def __init__(self, embedder: Embedder, config: ModelConfig) -> None:
        self.embedder = embedder
        self.config = config

    def answer(self, requests: Sequence[AnswerRequest]) -> list[Answer]:
        """One answer (or abstention) per request."""
        return [self._answer_one(r) for r in requests]

    def _answer_one(self, req: AnswerRequest) -> Answer:
        sents = [s for s in sentences(req.context) if not is_fragment(s)] or list(sentences(req.context))
        if not sents:
            return Answer(None, None, abstained=True, score=None)
        if req.options is None:
            scores = relevance(self.embedder, req.question, sents)
            best = int(np.argmax(scores))
            score = float(scores[best])
            if score < self.config.answer_min_score:
                return Answer(None, None, abstained=True, score=score)
            evidence = sents[best]
            text = polar_answer(evidence) if is_polar(req.question) else evidence
            return Answer(text, None, abstained=False, score=score, evidence=evidence)
        emb = self.embedder.embed([f"{req.question} {o}" for o in req.options] + sents)
        k = len(req.options)
        option_scores = (emb[:k] @ emb[k:].T).max(axis=1)
        best = int(np.argmax(option_scores))
        score = float(option_scores[best])
        if score < self.config.option_min_score:
            return Answer(None, None, abstained=True, score=score)
        return Answer(None, best, abstained=False, score=score)
