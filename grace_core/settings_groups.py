"""The settings groups of review, adjudication, audits and questions: plain pydantic models the
settings object (:mod:`flows.settings`) is made of, kept apart from the polars and numpy code
that reads them (:mod:`grace_core.assignment`, :mod:`grace_core.adjudication`,
:mod:`grace_core.audit`, :mod:`grace_core.queries`), so that building the settings, every
command's first step, imports neither (``grace sql`` starts in a third of a second)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from grace_core.errors import InvalidSettings
from grace_core.identifiers import id_problem, shown

VERIFIER = "verifier"
"""The automatic reviewer's name in the pool."""

MAX_AUDITS = 1_000_000
"""Claims audited per round, at most: each is a review assignment, and a round's sample is held in memory."""
MAX_BUDGET = 1e9
"""A review budget, at most: more than any pool reviews in a round, and cost sums stay far from float overflow."""


class ReviewConfig(BaseModel):
    """How deferred claims reach reviewers (env: ``GRACE_REVIEWERS``, ``GRACE_USE_VERIFIER``,
    ``GRACE_OVERLAP``, ``GRACE_PACKET_SIZE``, ``GRACE_DEADLINE_HOURS``, ``GRACE_DEADLINE_ROUNDS``)."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    reviewers: tuple[str, ...] = Field(
        (), description='Human reviewers who get review packets, e.g. GRACE_REVIEWERS=\'["alice", "bob"]\'; none by default.'
    )
    use_verifier: bool = Field(True, description="The verifier (litellm or offline) reviews as one more member of the pool.")
    overlap: int = Field(1, ge=1, le=1000, description="Reviewers each deferred claim is assigned to (at most the pool size; at most 1,000).")
    packet_size: int = Field(10, ge=1, le=1000, description="Claims per review packet in the Prefect UI (at most 1,000: one form).")
    deadline_hours: float = Field(
        72.0, gt=0, le=24 * 366,
        description="Hours a human reviewer has to answer (at most a year); an unanswered claim then returns to the pool and "
        "goes to another reviewer. With GRACE_DEADLINE_ROUNDS set too, whichever deadline comes first."
    )
    deadline_rounds: int | None = Field(
        None, ge=1, le=10_000,
        description="Rounds a reviewer has to answer: an assignment of round r is overdue from the dispatch of round r + N on, "
        "its claim back in the pool for another reviewer (at most 10,000); none by default (hours only). With "
        "GRACE_DEADLINE_HOURS, whichever deadline comes first."
    )
    weigh_by_reliability: bool = Field(
        False, description="Decide each claim by a majority weighted by its reviewers' estimated reliability (Dawid–Skene over every "
        "vote of the lake, grace_core/reliability.py) instead of one vote each.")

    @model_validator(mode="after")
    def _names_valid(self) -> ReviewConfig:
        for name in self.reviewers:
            if problem := id_problem(name):
                raise InvalidSettings(f"reviewer name {shown(name)}: {problem} (GRACE_REVIEWERS)")
        if VERIFIER in self.reviewers:
            raise InvalidSettings(f"{VERIFIER!r} names the automatic reviewer: set use_verifier instead of listing it in reviewers")
        if len(set(self.reviewers)) != len(self.reviewers):
            raise InvalidSettings(f"reviewers are listed twice: {', '.join(sorted({r for r in self.reviewers if self.reviewers.count(r) > 1}))}")
        return self

    @property
    def pool(self) -> tuple[str, ...]:
        """Every reviewer that gets assignments: the humans, then the verifier when used."""
        return self.reviewers + ((VERIFIER,) if self.use_verifier else ())


class AdjudicationConfig(BaseModel):
    """Who breaks split votes (env: ``GRACE_ADJUDICATOR``)."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    adjudicator: str | None = Field(
        None, description="Who breaks split votes: a reviewer of GRACE_REVIEWERS, or 'verifier'; unset: a split claim returns to the pool."
    )


class AuditConfig(BaseModel):
    """Audits of Grounded and Refuted claims (env: ``GRACE_AUDIT_GROUNDED``,
    ``GRACE_AUDIT_REFUTED``, ``GRACE_AUDIT_BUDGET``)."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    audit_grounded: int = Field(0, ge=0, le=MAX_AUDITS, description="Grounded claims audited per round: a random sample stratified by "
                                "document; 0: none (at most 1,000,000).")
    audit_refuted: int = Field(0, ge=0, le=MAX_AUDITS, description="Refuted claims audited per round (same sampling); 0: none "
                               "(at most 1,000,000).")
    audit_budget: float = Field(1.0, ge=0, le=MAX_BUDGET, description="Review budget per round for audits, in cost units, apart "
                                "from GRACE_BUDGET (at most 1e9).")

    def audit_size(self, status: str) -> int:
        """Claims of ``status`` to audit per round."""
        from grace_core.status import GROUNDED, REFUTED  # here: grace_core.status imports numpy

        return {GROUNDED: self.audit_grounded, REFUTED: self.audit_refuted}[status]

    @property
    def audited_statuses(self) -> tuple[str, ...]:
        """The statuses with claims to audit each round (none by default)."""
        from grace_core.audit import AUDITED_STATUSES  # here: grace_core.audit imports polars and numpy

        return tuple(s for s in AUDITED_STATUSES if self.audit_size(s) > 0)


class QueryConfig(BaseModel):
    """When a ``grace ask`` answer counts as unanswered (env: ``GRACE_ASK_MIN_SCORE``)."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    ask_min_score: float = Field(
        0.0, ge=0, le=1, description="A grace ask answer counts as unanswered when no passage of its context has this cosine to the "
        "question (or the answerer abstained); its question becomes a responder question for its document in the next round. "
        "0: only abstentions (the offline answerer abstains below GRACE_ANSWER_MIN_SCORE).",
    )
