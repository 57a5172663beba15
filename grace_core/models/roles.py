"""The six model roles (interfaces) and their typed requests and results.

Every role works on a batch and returns one result per request, in order. A result's
``outcome`` says how it was obtained:

- ``ok``: the model answered (or the offline heuristic decided);
- ``failed``: the model's replies stayed malformed, or the call kept failing, after the
  bounded retries; the item carries a neutral value (``neutral`` label, ``abstain`` verdict,
  abstained answer, no claims, empty response) and the rest of the batch is unaffected;
- ``capped``: the round's spend cap was reached before the item's call started;
- ``skipped`` (judgements only): the embedding prefilter left the claim out of the source's
  call, so the judge said nothing about it (label ``neutral``).

Flows should write edges and verdicts only for ``ok`` items and retry the others later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np

Outcome = Literal["ok", "failed", "capped"]
JudgeOutcome = Literal["ok", "failed", "capped", "skipped"]
Label = Literal["entails", "contradicts", "neutral"]
VerdictLabel = Literal["confirm", "reject", "abstain"]
CorruptionKind = Literal["number", "negation", "term"]
ParaphraseKind = Literal["parenthetical", "lead", "trailing", "clause", "swap", "merge"]


@dataclass(frozen=True, slots=True)
class RespondRequest:
    """A question to answer from ``context``; ``n`` samples (the configured ``n_samples`` when None)."""

    question: str
    context: str
    n: int | None = None


@dataclass(frozen=True, slots=True)
class Corruption:
    """One deliberate hallucination of the offline responder: sentence ``sentence_index`` of the
    response had ``before`` replaced by ``after`` (``original`` → ``corrupted``)."""

    sentence_index: int
    kind: CorruptionKind
    original: str
    corrupted: str
    before: str
    after: str


@dataclass(frozen=True, slots=True)
class Paraphrase:
    """One truth-keeping rewording of the offline responder: sentence ``sentence_index`` of the
    response is ``paraphrased``, said of ``original`` (one context sentence, or two for a
    ``merge``) with words only dropped or moved (see :mod:`grace_core.models.paraphrase`)."""

    sentence_index: int
    kind: ParaphraseKind
    original: str
    paraphrased: str


@dataclass(frozen=True, slots=True)
class Response:
    """Sample ``sample`` of a responder's answer. ``corruptions`` lists the offline responder's
    injected hallucinations (empty for LLMs, whose errors are unknown); ``paraphrases`` its
    rewordings, which keep the sentences true (a corruption's ``original`` is the reworded one)."""

    text: str
    sample: int
    outcome: Outcome = "ok"
    error: str | None = None
    corruptions: tuple[Corruption, ...] = ()
    paraphrases: tuple[Paraphrase, ...] = ()


@dataclass(frozen=True, slots=True)
class Decomposition:
    """The atomic, self-contained claims of one text, in order, without duplicates."""

    claims: tuple[str, ...]
    outcome: Outcome = "ok"
    error: str | None = None


@dataclass(frozen=True, slots=True)
class JudgeRequest:
    """One source text and the claims to judge against it."""

    source: str
    claims: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Judgement:
    """Whether the source entails, contradicts or says nothing about one claim.
    ``score`` is the claim's best cosine to the source when embeddings were used."""

    label: Label
    outcome: JudgeOutcome = "ok"
    score: float | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class VerifyRequest:
    """A claim to check against the full text of its document."""

    claim: str
    document: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """A reviewer's decision on one claim with the reason for it."""

    verdict: VerdictLabel
    reason: str
    outcome: Outcome = "ok"
    error: str | None = None


@dataclass(frozen=True, slots=True)
class AnswerRequest:
    """A question over ``context``; multiple choice when ``options`` is given."""

    question: str
    context: str
    options: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer: free text, or the 0-based ``option`` for multiple choice. ``abstained`` means
    "unanswerable" (``text`` and ``option`` are then None). ``score`` is the offline confidence;
    ``evidence`` the context sentence the answer rests on, when the answerer names one."""

    text: str | None
    option: int | None
    abstained: bool
    score: float | None = None
    outcome: Outcome = "ok"
    error: str | None = None
    evidence: str | None = None


@runtime_checkable
class Responder(Protocol):
    """Answers questions from given context, several samples each."""

    def respond(self, requests: Sequence[RespondRequest]) -> list[list[Response]]:
        """One list of samples per request."""
        ...


@runtime_checkable
class Decomposer(Protocol):
    """Breaks text into atomic, self-contained claims."""

    def decompose(self, texts: Sequence[str]) -> list[Decomposition]:
        """One decomposition per text."""
        ...


@runtime_checkable
class Judge(Protocol):
    """Labels claims against a source: entails, contradicts or neutral."""

    def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Judgement]]:
        """One judgement per claim of each request, in the request's claim order."""
        ...

    def prepare(self, sources: Sequence[str]) -> None:
        """Start, without waiting for it, the work that judging claims against these sources
        will need (their units' embeddings); judging gives the same judgements without it."""
        ...


@runtime_checkable
class Verifier(Protocol):
    """Stands in for an expert: confirms, rejects or abstains on a claim given its whole document."""

    def verify(self, requests: Sequence[VerifyRequest]) -> list[Verdict]:
        """One verdict per request."""
        ...


@runtime_checkable
class Answerer(Protocol):
    """Answers a question from context, or abstains."""

    def answer(self, requests: Sequence[AnswerRequest]) -> list[Answer]:
        """One answer per request."""
        ...


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalised vectors (cosine = dot product)."""

    @property
    def dim(self) -> int:
        """Vector length."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 array of shape (len(texts), dim), rows of unit length."""
        ...

    def prefetch(self, texts: Sequence[str]) -> None:
        """Start embedding ``texts`` for a later :meth:`embed`, without waiting (may do nothing)."""
        ...
