"""Typed scoring parameters (DESIGN §1–§6). Values, never read from the environment here:
the entry point builds one settings object that *is* a :class:`ScoringParams` and passes it down.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from grace_core.errors import InvalidSettings

MAX_WEIGHT = 1e6
"""Largest weight, constant or ratio: only their ratios matter, 1e6 scores normally
(tests/reliability/test_bad_settings.py), and products of a few of them stay far from float overflow."""


class ScoringParams(BaseModel):
    """Edge weights, centrality thresholds and selection constants.

    Invariant (DESIGN §1): ``w_anchor > w_agree > w_neutral > w_contra > 0``. Every value is a
    finite number (``nan`` or ``inf`` is refused) of at most :data:`MAX_WEIGHT`, δ lies in [0, 1]
    like the normalised closeness it is compared with, and k is positive.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    w_anchor: float = Field(3.0, le=MAX_WEIGHT, description="Weight of a prior → claim edge.")
    w_agree: float = Field(2.0, le=MAX_WEIGHT, description="Weight of a response → claim edge when a prior entails the claim.")
    w_neutral: float = Field(1.0, le=MAX_WEIGHT, description="Weight of any other response → claim edge.")
    w_contra: float = Field(0.25, le=MAX_WEIGHT, description="Weight of a response edge to a contradicted or rejected claim.")
    delta_refute: float = Field(0.3, ge=0, le=MAX_WEIGHT, description="Refute a claim with no anchor/agree edge below this share of the document's median closeness.")
    lambda_c: float = Field(0.5, ge=0, le=MAX_WEIGHT, description="Priority weight of boundary betweenness.")
    lambda_n: float = Field(0.5, ge=0, le=MAX_WEIGHT, description="Priority weight of novelty.")
    lambda_r: float = Field(1.0, ge=0, le=MAX_WEIGHT, description="Selection weight of cascade reach: the Boundary claims a confirmation would ground (grace_core/reach.py).")
    k: float = Field(10.0, gt=0, le=MAX_WEIGHT, description="Steepness of the confidence sigmoid.")
    delta: float = Field(0.5, ge=0, le=1, description="Midpoint of the confidence sigmoid (on the normalised closeness, in [0, 1]).")
    epsilon: float = Field(0.01, gt=0, le=MAX_WEIGHT, description="Floor of the embedding part of a review's cost.")
    mu: float = Field(0.002, ge=0, le=MAX_WEIGHT, description="Cost per expected review second (DESIGN §4: 30 s of human review add 0.06).")
    review_seconds: float = Field(
        30.0, ge=0, le=86_400, description="Expected seconds per claim for human reviewers with no history (at most a day).")
    alpha: float = Field(0.9, ge=0, le=1, description="Retrieval rerank: score = alpha·cos + (1 − alpha)·ĈC, among the candidates "
                         "gathered by relevance only (DESIGN §6).")
    retrieval_k: int = Field(10, ge=1, le=10_000, description="Retrieval candidates per question: the passages with the highest cosine "
                             "to it (at or above GRACE_RELEVANCE_FLOOR), which alpha then reranks (at most 10,000).")
    relevance_floor: float = Field(-1.0, ge=-1, le=1, description="A passage whose cosine to the question is below this is never a "
                                   "retrieval candidate, however grounded (-1: none; 0.3 suits section-sized passages: "
                                   "docs/evaluation.md).")
    abstain_below: float = Field(-1.0, ge=-1, le=1, description="Answers abstain when the best candidate's cosine to the question is "
                                 "below this (or no passage reaches GRACE_RELEVANCE_FLOOR); -1: only when the answerer does.")

    @model_validator(mode="after")
    def _weights_ordered(self) -> "ScoringParams":
        w = (self.w_anchor, self.w_agree, self.w_neutral, self.w_contra)
        if not (w[0] > w[1] > w[2] > w[3] > 0):
            raise InvalidSettings(
                "edge weights must satisfy w_anchor > w_agree > w_neutral > w_contra > 0, got "
                f"anchor={w[0]}, agree={w[1]}, neutral={w[2]}, contra={w[3]} "
                "(GRACE_W_ANCHOR, GRACE_W_AGREE, GRACE_W_NEUTRAL, GRACE_W_CONTRA or the --w-* options)"
            )
        return self
