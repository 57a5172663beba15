"""The offline verifier: judges a claim against the whole document, and abstains when unsure.

- ``reject`` when a highly similar sentence of the document contradicts the claim (negation,
  number, antonym or term mismatch, from ``judge_contradict_similarity`` up);
- ``confirm`` when the best unit has cosine ≥ ``verifier_confirm_similarity``, its
  neighbourhood holds ≥ ``verifier_confirm_overlap`` of the claim's content words (thresholds
  calibrated for high precision on QASPER dev) and the document backs every number, term and
  negation of the claim;
- ``abstain`` otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from grace_core.models.config import ModelConfig
from grace_core.models.offline_support import SupportScorer
from grace_core.models.roles import Embedder, Verdict, VerifyRequest


class OfflineVerifier:
    """A :class:`~grace_core.models.roles.Verifier` without an LLM (deterministic)."""

    def __init__(self, embedder: Embedder, config: ModelConfig) -> None:
        self.scorer = SupportScorer(embedder)
        self.config = config

    def verify(self, requests: Sequence[VerifyRequest]) -> list[Verdict]:
        """One verdict per request; requests about the same document are scored together."""
        cfg = self.config
        by_doc: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            by_doc.setdefault(r.document, []).append(i)
        docs = list(by_doc)
        supports = self.scorer.support(
            docs, [[requests[i].claim for i in by_doc[d]] for d in docs],
            floor=min(cfg.verifier_confirm_similarity, cfg.judge_contradict_similarity),
            contradict_similarity=cfg.judge_contradict_similarity,
        )
        out: list[Verdict | None] = [None] * len(requests)
        for d, row in zip(docs, supports, strict=True):
            for i, s in zip(by_doc[d], row, strict=True):
                if s is None:
                    out[i] = Verdict("abstain", "the document has no text to check the claim against")
                elif s.mismatch is not None:
                    m = s.mismatch
                    out[i] = Verdict("reject", f"contradicted ({m.kind}: {m.claim_side!r} vs {m.source_side!r}) by: {s.unit}")
                elif (s.similarity >= cfg.verifier_confirm_similarity and s.overlap >= cfg.verifier_confirm_overlap
                      and s.unsupported is None):
                    out[i] = Verdict("confirm", f"stated by the document (cosine {s.similarity:.2f}, overlap {s.overlap:.2f}): {s.unit}")
                else:
                    why = s.unsupported or f"best cosine {s.similarity:.2f}, overlap {s.overlap:.2f}"
                    out[i] = Verdict("abstain", f"not clearly supported or contradicted ({why})")
        return [v for v in out if v is not None]
