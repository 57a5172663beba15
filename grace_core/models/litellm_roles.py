"""The five LLM roles and the API embedder over :class:`~grace_core.models.litellm_client.LiteLLMClient`.

Each role asks for a JSON object, validates it with a pydantic model, and maps a reply that
stays malformed after the client's retries to a ``failed`` item. The judge makes one call per
source with at most ``judge_batch_size`` candidate claims, chosen by embedding similarity to
the source's sentences; the others are ``skipped`` (never one call per (source, claim) pair).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ValidationError

from grace_core.errors import EmbeddingFailed, MalformedReply
from grace_core.models.config import ModelConfig
from grace_core.models.hashing import text_hash
from grace_core.models.litellm_client import CallResult, LiteLLMClient
from grace_core.models.offline_support import SupportScorer
from grace_core.models.roles import (
    Answer,
    AnswerRequest,
    Decomposition,
    Embedder,
    Judgement,
    JudgeRequest,
    Label,
    RespondRequest,
    Response,
    Verdict,
    VerdictLabel,
    VerifyRequest,
)
from grace_core.models.segment import normalise

M = TypeVar("M", bound=BaseModel)

_FENCE = re.compile(r"^\s*```(?:json)?\s*|\s*```\s*$", re.IGNORECASE)

RESPONDER_PROMPT = (
    "You answer questions about a document using only the context given. "
    'Reply with a JSON object {"answer": "..."} and nothing else.'
)
DECOMPOSER_PROMPT = (
    "Break the text into atomic claims. Each claim is one short, self-contained factual statement "
    "that can be checked on its own: resolve pronouns, keep numbers, names and qualifiers. Leave out "
    'questions, headings and fragments. Reply with a JSON object {"claims": ["...", ...]} and nothing else.'
)
JUDGE_PROMPT = (
    "You judge numbered claims against a source text, using only the source. For each claim answer "
    '"entails" if the source states or clearly implies it, "contradicts" if the source states something '
    'incompatible with it, and "neutral" otherwise. Reply with a JSON object '
    '{"judgements": [{"id": 1, "label": "entails"}, ...]} with exactly one item per claim and nothing else.'
)
VERIFIER_PROMPT = (
    "You are an expert reviewer checking a claim against the full document it is about. Answer "
    '"confirm" if the document supports the claim, "reject" if the document contradicts it or shows '
    'its details to be wrong, and "abstain" if the document does not let you decide. Reply with a JSON '
    'object {"verdict": "confirm" | "reject" | "abstain", "reason": "one sentence"} and nothing else.'
)
ANSWERER_PROMPT = (
    "Answer the question using only the context. If the context does not contain the answer, the "
    'answer is null. Reply with a JSON object {"answer": "..." or null} and nothing else.'
)
CHOICE_PROMPT = (
    "Choose the option that answers the question, using only the context. Reply with a JSON object "
    '{"option": <0-based index of the option>} , or {"option": null} if the context does not let you '
    "choose, and nothing else."
)

LITELLM_EMBED_BATCH = 64
"""Texts per embedding API call."""


class _AnswerReply(BaseModel):
    answer: str


class _ClaimsReply(BaseModel):
    claims: list[str]


class _JudgementItem(BaseModel):
    id: int
    label: Literal["entails", "contradicts", "neutral"]


class _JudgeReply(BaseModel):
    judgements: list[_JudgementItem]


class _VerdictReply(BaseModel):
    verdict: Literal["confirm", "reject", "abstain"]
    reason: str


class _FreeAnswerReply(BaseModel):
    answer: str | None


class _OptionReply(BaseModel):
    option: int | None


def parse_json_object(text: str) -> dict:
    """The JSON object in a reply (code fences and text around the braces tolerated), or
    :class:`MalformedReply`."""
    body = _FENCE.sub("", text.strip())
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise MalformedReply("no JSON object in the reply")
    try:
        obj = json.loads(body[start: end + 1])
    except json.JSONDecodeError as exc:
        raise MalformedReply(f"invalid JSON: {exc.msg}") from None
    if not isinstance(obj, dict):
        raise MalformedReply("the reply is not a JSON object")
    return obj


def validate_reply(schema: type[M], text: str) -> M:
    """Parse ``text`` as a JSON object of ``schema`` or raise :class:`MalformedReply`."""
    try:
        return schema.model_validate(parse_json_object(text))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "reply"
        raise MalformedReply(f"{where}: {first['msg']}") from None


def parse_judgements(text: str, n: int) -> list[Label]:
    """Labels of claims 1..n from a judge reply; every id exactly once, or :class:`MalformedReply`."""
    reply = validate_reply(_JudgeReply, text)
    labels: dict[int, Label] = {}
    for item in reply.judgements:
        if not 1 <= item.id <= n:
            raise MalformedReply(f"claim id {item.id} is not between 1 and {n}")
        if item.id in labels:
            raise MalformedReply(f"claim id {item.id} judged twice")
        labels[item.id] = item.label
    missing = sorted(set(range(1, n + 1)) - set(labels))
    if missing:
        raise MalformedReply(f"no judgement for claim id(s) {', '.join(map(str, missing))}")
    return [labels[i] for i in range(1, n + 1)]


def _messages(system: str, user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def judge_messages(source: str, claims: Sequence[str]) -> list[dict[str, str]]:
    """The judge's prompt for one source and its candidate claims (numbered from 1)."""
    numbered = "\n".join(f"{i}. {c}" for i, c in enumerate(claims, 1))
    return _messages(JUDGE_PROMPT, f"Source:\n{source}\n\nClaims:\n{numbered}")


class LiteLLMResponder:
    """Samples answers from an LLM: one call per (request, sample), at the configured temperature."""

    def __init__(self, client: LiteLLMClient, model: str, config: ModelConfig) -> None:
        self.client, self.model, self.config = client, model, config

    def respond(self, requests: Sequence[RespondRequest]) -> list[list[Response]]:
        """``n`` (or ``n_samples``) responses per request; failed samples have empty text."""
        items = [(i, s) for i, r in enumerate(requests) for s in range(r.n or self.config.n_samples)]

        def call(item: tuple[int, int]) -> CallResult[_AnswerReply]:
            req = requests[item[0]]
            msgs = _messages(RESPONDER_PROMPT, f"Context:\n{req.context}\n\nQuestion: {req.question}")
            return self.client.complete_json("responder", self.model, msgs, lambda t: validate_reply(_AnswerReply, t),
                                             temperature=self.config.temperature, sample=item[1])

        out: list[list[Response]] = [[] for _ in requests]
        for (i, s), res in zip(items, self.client.map(call, items), strict=True):
            text = res.value.answer.strip() if res.value is not None else ""
            out[i].append(Response(text, s, outcome=res.outcome, error=res.error))
        return out


def parse_claims(text: str, most: int) -> list[str]:
    """The claims of a decomposer reply, or :class:`MalformedReply` if it has more than ``most``
    (``max_claims_per_text``): refused rather than cut, so no text's claims are silently
    dropped; the correction turn tells the model the limit (a loopback server's 20,000 claims
    per text had made 120,000 claim rows from 8 calls)."""
    claims = validate_reply(_ClaimsReply, text).claims
    if len(claims) > most:
        raise MalformedReply(f"{len(claims)} claims, more than the {most} allowed for one text")
    return claims


class LiteLLMDecomposer:
    """Asks an LLM for the atomic claims of each text (one call per non-empty text, at most
    ``max_claims_per_text`` claims each)."""

    def __init__(self, client: LiteLLMClient, model: str) -> None:
        self.client, self.model = client, model

    def decompose(self, texts: Sequence[str]) -> list[Decomposition]:
        """The claims of each text, normalised and without duplicates."""
        todo = [i for i, t in enumerate(texts) if t.strip()]

        most = self.client.config.max_claims_per_text

        def call(i: int) -> CallResult[list[str]]:
            msgs = _messages(DECOMPOSER_PROMPT, f"Text:\n{texts[i]}")
            return self.client.complete_json("decomposer", self.model, msgs, lambda t: parse_claims(t, most))

        out = [Decomposition(()) for _ in texts]
        for i, res in zip(todo, self.client.map(call, todo), strict=True):
            claims = () if res.value is None else tuple(dict.fromkeys(c for c in map(normalise, res.value) if c))
            out[i] = Decomposition(claims, outcome=res.outcome, error=res.error)
        return out


class LiteLLMJudge:
    """Judges claims with an LLM: one call per source with its top-K claims by embedding similarity."""

    def __init__(self, client: LiteLLMClient, model: str, config: ModelConfig, embedder: Embedder) -> None:
        self.client, self.model, self.config = client, model, config
        self.scorer = SupportScorer(embedder)

    def prepare(self, sources: Sequence[str]) -> None:
        """Start embedding the units of ``sources`` for the prefilter (:meth:`SupportScorer.prepare`)."""
        self.scorer.prepare(sources)

    def candidates(self, requests: Sequence[JudgeRequest]) -> list[tuple[list[int], np.ndarray]]:
        """Per request: the claim indices sent to the LLM (at most K, cosine ≥ the prefilter
        threshold, in claim order) and every claim's best cosine to the source."""
        out = []
        k, floor = self.config.judge_batch_size, self.config.judge_prefilter_similarity
        for req, (_, sim) in zip(requests, self.scorer.similarities([r.source for r in requests], [r.claims for r in requests]), strict=True):
            order = np.argsort(-sim, kind="stable")
            out.append((sorted(order[sim[order] >= floor][:k].tolist()), sim))
        return out

    def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Judgement]]:
        """One judgement per claim; claims left out by the prefilter are ``skipped`` (neutral)."""
        chosen = self.candidates(requests)
        todo = [i for i, (cand, _) in enumerate(chosen) if cand]

        def call(i: int) -> CallResult[list[Label]]:
            cand = chosen[i][0]
            claims = [requests[i].claims[j] for j in cand]
            return self.client.complete_json("judge", self.model, judge_messages(requests[i].source, claims),
                                             lambda t: parse_judgements(t, len(claims)))

        results = dict(zip(todo, self.client.map(call, todo), strict=True))
        out: list[list[Judgement]] = []
        for i, (cand, sim) in enumerate(chosen):
            row = [Judgement("neutral", outcome="skipped", score=s) for s in sim.tolist()]
            res = results.get(i)
            for pos, j in enumerate(cand):
                if res is not None and res.value is not None:
                    row[j] = Judgement(res.value[pos], score=float(sim[j]))
                elif res is not None:
                    row[j] = Judgement("neutral", outcome=res.outcome, score=float(sim[j]), error=res.error)
            out.append(row)
        return out


class LiteLLMVerifier:
    """An LLM reviewer: the claim and the full document in one call per claim."""

    def __init__(self, client: LiteLLMClient, model: str) -> None:
        self.client, self.model = client, model

    def verify(self, requests: Sequence[VerifyRequest]) -> list[Verdict]:
        """One verdict per request; a failed call abstains."""

        def call(req: VerifyRequest) -> CallResult[_VerdictReply]:
            msgs = _messages(VERIFIER_PROMPT, f"Document:\n{req.document}\n\nClaim: {req.claim}")
            return self.client.complete_json("verifier", self.model, msgs, lambda t: validate_reply(_VerdictReply, t))

        out = []
        for res in self.client.map(call, list(requests)):
            if res.value is None:
                out.append(Verdict("abstain", "no verdict: the model call did not succeed", outcome=res.outcome, error=res.error))
            else:
                verdict: VerdictLabel = res.value.verdict
                out.append(Verdict(verdict, res.value.reason.strip()))
        return out


class LiteLLMAnswerer:
    """Answers from context with an LLM, free-form or multiple choice; null means unanswerable."""

    def __init__(self, client: LiteLLMClient, model: str) -> None:
        self.client, self.model = client, model

    def answer(self, requests: Sequence[AnswerRequest]) -> list[Answer]:
        """One answer per request; a failed call abstains."""

        def call(req: AnswerRequest) -> CallResult[Answer]:
            if req.options is None:
                msgs = _messages(ANSWERER_PROMPT, f"Context:\n{req.context}\n\nQuestion: {req.question}")
                return self.client.complete_json("answerer", self.model, msgs, _free_answer)
            listed = "\n".join(f"{i}. {o}" for i, o in enumerate(req.options))
            msgs = _messages(CHOICE_PROMPT, f"Context:\n{req.context}\n\nQuestion: {req.question}\n\nOptions:\n{listed}")
            return self.client.complete_json("answerer", self.model, msgs, lambda t: _option_answer(t, len(req.options or ())))

        return [
            res.value if res.value is not None else Answer(None, None, abstained=True, outcome=res.outcome, error=res.error)
            for res in self.client.map(call, list(requests))
        ]


def _free_answer(text: str) -> Answer:
    reply = validate_reply(_FreeAnswerReply, text)
    answer = (reply.answer or "").strip()
    if not answer or answer.lower().strip(".") in ("unanswerable", "null", "none"):
        return Answer(None, None, abstained=True)
    return Answer(answer, None, abstained=False)


def _option_answer(text: str, n: int) -> Answer:
    reply = validate_reply(_OptionReply, text)
    if reply.option is None:
        return Answer(None, None, abstained=True)
    if not 0 <= reply.option < n:
        raise MalformedReply(f"option {reply.option} is not between 0 and {n - 1}")
    return Answer(None, reply.option, abstained=False)


class LiteLLMEmbedder:
    """Embeds through a litellm embedding model, cached by text hash in memory and by call in
    the call cache; vectors are normalised to unit length."""

    def __init__(self, client: LiteLLMClient, model: str) -> None:
        self.client, self.model = client, model
        self._cache: dict[str, np.ndarray] = {}
        self._dim: int | None = None

    @property
    def dim(self) -> int:
        """The model's vector length (one probe call if nothing was embedded yet)."""
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def prefetch(self, texts: Sequence[str]) -> None:
        """Nothing: API embeddings are made when asked (a prefetch could spend calls on texts
        whose document then fails)."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``texts``; raises :class:`EmbeddingFailed` if a call fails for good."""
        keys = [text_hash(t) for t in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
        by_key = dict(zip(keys, texts, strict=True))
        batches = [missing[i: i + LITELLM_EMBED_BATCH] for i in range(0, len(missing), LITELLM_EMBED_BATCH)]
        for batch, res in zip(batches, self.client.map(lambda b: self.client.embed(self.model, [by_key[k] for k in b]), batches), strict=True):
            if res.value is None:
                raise EmbeddingFailed(f"embedding model {self.model!r}: {res.error or res.outcome}")
            vecs = res.value / np.maximum(np.linalg.norm(res.value, axis=1, keepdims=True), 1e-12)
            self._dim = vecs.shape[1]
            self._cache.update(zip(batch, vecs, strict=True))
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        return np.stack([self._cache[k] for k in keys]).astype(np.float32, copy=False)
