"""The offline responder: extractive answers from the context sentences most relevant to the
question, diverse across samples by seeded sampling, optionally with recorded hallucinations.

For sample ``i`` it takes the ``responder_pool`` sentences closest to the question, draws
``responder_sentences`` of them without replacement with weights ``exp((cos − max)/(0.1·τ))``
(τ = temperature; τ = 0 takes the closest ones) and joins them in document order. As LLM
samples word one fact differently, each sentence is then reworded with probability
``paraphrase_rate`` when τ > 0 (a parenthesis, lead phrase, trailing modifier or clause
dropped, clauses swapped, or merged with the next sentence when the two follow each other in
the context; see :mod:`grace_core.models.paraphrase`): a rewording only drops or moves words,
so it keeps the sentence true. Then each sentence is corrupted with probability
``hallucination_rate`` (a number changed, a negation flipped or a term swapped for another
term of the context; see :mod:`grace_core.models.corruption`), whose ``original`` is the
reworded sentence, so the claims a corruption makes false stay known. Both are recorded on
the response. Every draw is seeded by (seed, question, context, sample), so results do not
depend on batch order or process.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from grace_core.models.config import ModelConfig
from grace_core.models.corruption import corrupt, term_pool
from grace_core.models.hashing import stable_seed
from grace_core.models.offline_support import relevance
from grace_core.models.paraphrase import paraphrase
from grace_core.models.roles import Embedder, Paraphrase, RespondRequest, Response
from grace_core.models.segment import is_fragment, sentences

TEMPERATURE_SCALE = 0.1
"""Cosine gap that temperature 1 turns into a factor e between two sentences' weights."""


class OfflineResponder:
    """A :class:`~grace_core.models.roles.Responder` without an LLM (deterministic per seed)."""

    def __init__(self, embedder: Embedder, config: ModelConfig) -> None:
        self.embedder = embedder
        self.config = config

    def respond(self, requests: Sequence[RespondRequest]) -> list[list[Response]]:
        """``n`` (or ``n_samples``) responses per request."""
        return [self._respond_one(r) for r in requests]

    def _respond_one(self, req: RespondRequest) -> list[Response]:
        cfg = self.config
        n = req.n or cfg.n_samples
        sents = [s for s in sentences(req.context) if not is_fragment(s)] or list(sentences(req.context))
        if not sents:
            return [Response("", i, outcome="failed", error="the context has no sentence") for i in range(n)]
        scores = relevance(self.embedder, req.question, sents)
        pool = np.argsort(-scores, kind="stable")[: cfg.responder_pool]
        take = min(cfg.responder_sentences, len(pool))
        terms = term_pool(req.context)
        out = []
        for i in range(n):
            if cfg.temperature == 0:
                chosen = pool[:take]
            else:
                weights = np.exp((scores[pool] - scores[pool].max()) / (TEMPERATURE_SCALE * cfg.temperature))
                rng = np.random.default_rng(stable_seed(cfg.seed, "sample", req.question, req.context, i))
                chosen = rng.choice(pool, size=take, replace=False, p=weights / weights.sum())
            order = sorted(chosen.tolist())
            picked, reworded = self._paraphrase(order, sents, i, req)
            out.append(self._hallucinate(picked, i, req, terms, reworded))
        return out

    def _paraphrase(self, order: list[int], sents: list[str], sample: int, req: RespondRequest) -> tuple[list[str], tuple[Paraphrase, ...]]:
        """The chosen sentences (``order``: indices into ``sents``), reworded at ``paraphrase_rate`` (none at τ = 0)."""
        rate = self.config.paraphrase_rate if self.config.temperature > 0 else 0.0
        rng = random.Random(stable_seed(self.config.seed, "paraphrase", req.question, req.context, sample))
        adjacent = [b == a + 1 for a, b in zip(order, order[1:])]
        picked, done = paraphrase([sents[j] for j in order], adjacent, rate, rng)
        return picked, tuple(done)

    def _hallucinate(self, picked: list[str], sample: int, req: RespondRequest, terms: tuple[str, ...],
                     paraphrases: tuple[Paraphrase, ...]) -> Response:
        rate = self.config.hallucination_rate
        rng = random.Random(stable_seed(self.config.seed, "hallucinate", req.question, req.context, sample))
        corruptions = []
        for k, sent in enumerate(picked):
            if rate > 0 and rng.random() < rate:
                c = corrupt(sent, k, rng, terms)
                if c is not None:
                    corruptions.append(c)
                    picked[k] = c.corrupted
        return Response(" ".join(picked), sample, corruptions=tuple(corruptions), paraphrases=paraphrases)
