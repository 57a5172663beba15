"""One expansion round as a pure state transition (DESIGN §5, "One round").

For a chunk of documents, the state in — their sources, claims, edges and every raw vote —
plus settings and the model roles (the judge for the cascade, the embedder for review costs):

1. :func:`settle`: decisions from the votes that arrived (:func:`grace_core.decisions.decide`,
   the one decision model), promotion of newly confirmed claims to verified priors, the
   cascade of those priors over the Boundary claims they entail or contradict
   (:func:`grace_core.review.judge_cascade`), then the scores (DESIGN §1–§4) of the state
   that results, with rejected claims Refuted for good;
2. :func:`deferral` (:func:`defer`): the Boundary claims not decided and not waiting on a
   reviewer, priced (:func:`grace_core.review.with_cost`) and selected under the budget
   (:func:`grace_core.selection.select_for_review`), with what the rule and the budget left
   out (:func:`grace_core.selection.cost_report`);
3. the round's metrics (:func:`grace_core.metrics.round_metrics`, and the lake's
   ``round_metrics`` view over the same persisted tables).

The Prefect flows load a chunk's state from the lake, call these functions and commit what
they return; ``grace eval expansion`` calls the very same functions on in-memory tables.
Nothing else decides, promotes, cascades or defers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import polars as pl

from grace_core.decisions import decide, decided, settled
from grace_core.edges import EDGE_COLUMNS, SOURCE_KINDS, validate_edges
from grace_core.errors import RoundOutOfOrder
from grace_core.models.factory import ModelRoles
from grace_core.params import ScoringParams
from grace_core.promotion import Promotion, promote
from grace_core.reach import selection_priority
from grace_core.review import REVIEW_INPUTS, judge_cascade, review_inputs, with_cost
from grace_core.scoring import score_edges
from grace_core.selection import CostReport, cost_report, select_for_review
from grace_core.status import BOUNDARY

VOTE_COLUMNS = ("doc_id", "claim_id", "reviewer", "verdict")
SOURCE_COLUMNS = {"doc_id": pl.Utf8, "source_id": pl.Utf8, "source_kind": pl.Utf8, "text": pl.Utf8, "claim_id": pl.Utf8}


def round_to_run(asked: int | None, following: int, where: str) -> int:
    """The round to run: ``asked``, else ``following`` (the one after the last dispatched round
    of the lake ``where``). A round already run may be run again (it changes nothing); one after
    ``following`` would skip rounds, and each document's latest scores are those of its highest
    round, so a skipped round run later would be shadowed: :class:`RoundOutOfOrder`."""
    round_id = asked or following
    if round_id > following:
        skipped = f"round {following}" if round_id == following + 1 else f"rounds {following}–{round_id - 1}"
        raise RoundOutOfOrder(f"round {round_id} would skip {skipped}: the next round of lake {where} is {following} "
                              "(leave the round empty to run it; a round already run may be run again)")
    return round_id


def claim_texts(claims: pl.DataFrame) -> pl.DataFrame:
    """``doc_id, claim_id, text`` once per claim: its first decomposition's text (by ``round``
    when the rows have one, else in row order)."""
    rows = claims.sort("round", maintain_order=True) if "round" in claims.columns else claims
    return rows.unique(["doc_id", "claim_id"], keep="first", maintain_order=True).select("doc_id", "claim_id", "text")


def prior_units(claims: pl.DataFrame, sources: pl.DataFrame) -> pl.DataFrame:
    """``doc_id, text`` of the prior knowledge review costs and nearest priors measure against:
    the atomic claims decomposed from priors (``claims``: ``doc_id, source_kind, text``), and the
    verified claims (``sources``: ``doc_id, source_kind, text``). (A sentence embedder reads only
    the first few hundred tokens of a long section, so "nearest prior" is taken unit by unit.)"""
    return _prior_unit_rows(claims, sources, pl.col("text")).unique(maintain_order=True)


def _prior_unit_rows(claims: pl.DataFrame, sources: pl.DataFrame, column: pl.Expr) -> pl.DataFrame:
    """``doc_id`` and ``column`` of the rows that are prior units: claims decomposed from priors,
    verified sources."""
    return pl.concat([
        claims.filter(pl.col("source_kind") == "prior").select("doc_id", column),
        sources.filter(pl.col("source_kind") == "verified").select("doc_id", column),
    ])


def still_measured(stored: pl.DataFrame, claims: pl.DataFrame, sources: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``stored`` (``doc_id, claim_id, round, prior_distance``: prior distances a
    scoring of that ``round`` measured) that still hold: those of documents none of whose
    :func:`prior_units` is newer than that round, i.e. whose prior claims (``claims``) and
    verified claims (``sources``) all have a ``round`` ≤ it. A claim's distance depends only on
    its text and its document's prior units, so such a distance is what measuring again would
    give. None hold when the rows carry no ``round``, nor for a document with a unit of unknown round."""
    if "round" not in claims.columns or "round" not in sources.columns:
        return stored.head(0)
    units = _prior_unit_rows(claims, sources, pl.col("round").cast(pl.Int64))
    newest = units.group_by("doc_id").agg(prior_round=pl.col("round").max(), unknown=pl.col("round").is_null().any())
    return (
        stored.join(newest, on="doc_id", how="left")
        .filter(pl.col("unknown").is_null() | (~pl.col("unknown") & (pl.col("prior_round") <= pl.col("round"))))
        .select(stored.columns)
    )


class DocumentTexts(Protocol):
    """Claim texts and prior units by document, asked for only where a claim is priced or shown
    (a round's dispatch prices a few claims of a large lake): a :class:`RoundState` has them in
    memory; the flows read them from the lake by key."""

    def claim_texts(self, doc_ids: Sequence[str] | None = None) -> pl.DataFrame:
        """:func:`claim_texts` of the claims of ``doc_ids`` (every document when None)."""
        ...

    def prior_units(self, doc_ids: Sequence[str] | None = None) -> pl.DataFrame:
        """:func:`prior_units` of ``doc_ids`` (every document when None)."""
        ...


def _of(frame: pl.DataFrame, doc_ids: Sequence[str] | None) -> pl.DataFrame:
    return frame if doc_ids is None else frame.filter(pl.col("doc_id").is_in(list(doc_ids)))


@dataclass(frozen=True)
class RoundState:
    """What a round reads of a chunk of documents.

    - ``sources``: ``doc_id, source_id, source_kind, text, claim_id`` (and ``round`` when
      known) — graph sources only (prior, verified, response); ``claim_id`` is set for
      verified sources;
    - ``claims``: one row per decomposition, ``doc_id, claim_id, source_id, source_kind, text``
      (and ``round`` when known); a claim's text is its first row's;
    - ``edges``: the judge's edge table (:data:`grace_core.edges.EDGE_COLUMNS`);
    - ``votes``: every raw vote, ``doc_id, claim_id, reviewer, verdict`` plus ``round`` and
      ``created_at`` when known (each reviewer's latest counts);
    - ``deferrals``: who was assigned what, ``doc_id, claim_id, round, reviewer`` (None when
      not tracked): a claim whose latest deferral's reviewers have not all answered stays
      pending (:func:`grace_core.decisions.decide`).
    """

    sources: pl.DataFrame
    claims: pl.DataFrame
    edges: pl.DataFrame
    votes: pl.DataFrame
    deferrals: pl.DataFrame | None = None

    def claim_texts(self, doc_ids: Sequence[str] | None = None) -> pl.DataFrame:
        """:func:`claim_texts` of this state's claims (of ``doc_ids`` when given): a :class:`DocumentTexts`."""
        return claim_texts(_of(self.claims, doc_ids))

    def prior_units(self, doc_ids: Sequence[str] | None = None) -> pl.DataFrame:
        """:func:`prior_units` of this state (of ``doc_ids`` when given)."""
        return prior_units(_of(self.claims, doc_ids), _of(self.sources, doc_ids))

    def of(self, doc_ids: Sequence[str]) -> RoundState:
        """The state of ``doc_ids`` only."""
        return RoundState(*(_of(frame, doc_ids) for frame in (self.sources, self.claims, self.edges, self.votes)),
                          deferrals=None if self.deferrals is None else _of(self.deferrals, doc_ids))

    def with_promotion(self, new_sources: pl.DataFrame, new_edges: pl.DataFrame) -> RoundState:
        """The state after adding promoted sources and their (cascade) edges."""
        return RoundState(
            sources=pl.concat([self.sources, new_sources.select(self.sources.columns)], how="vertical_relaxed"),
            claims=self.claims,
            edges=pl.concat([self.edges.select(EDGE_COLUMNS), new_edges.select(EDGE_COLUMNS)]).unique(maintain_order=True),
            votes=self.votes,
            deferrals=self.deferrals,
        )


@dataclass(frozen=True)
class Settlement:
    """What :func:`settle` returns: the ``decisions`` (one row per claim with votes), the
    ``promotion`` (new verified sources, their anchor edges, the rejected claims), the
    ``cascade`` edges judged from the new verified sources, the ``scores`` of the settled
    state, and the ``state`` itself."""

    decisions: pl.DataFrame
    promotion: Promotion
    cascade: pl.DataFrame
    scores: pl.DataFrame
    state: RoundState

    def review_inputs(self, roles: Callable[[], ModelRoles], stored: pl.DataFrame | None = None) -> pl.DataFrame:
        """``doc_id, claim_id`` and :data:`~grace_core.review.REVIEW_INPUTS` of every Boundary
        claim of the settled scores (:func:`grace_core.review.review_inputs` against the
        settled state's Boundary claims and prior units): what :func:`defer` would otherwise
        compute every round.

        ``stored``: ``doc_id, claim_id, round, prior_distance`` that earlier scorings measured
        with the embedder of ``roles()``; a claim keeps its distance when it still holds
        (:func:`still_measured`), so a document rescored without new prior units (a reject, a
        new response) embeds nothing. ``roles()`` is called only when a claim is left to measure."""
        keys = ["doc_id", "claim_id"]
        boundary = self._boundary()
        if boundary.height == 0:
            return pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8, **REVIEW_INPUTS})
        known = None if stored is None else still_measured(stored, self.state.claims, self.state.sources)
        left = boundary if known is None else boundary.join(known, on=keys, how="anti")
        embedder = roles().embedder if left.height else None
        return review_inputs(boundary, boundary, self.state.prior_units(), embedder, known).select(*keys, *REVIEW_INPUTS)

    def remeasured(self) -> list[str]:
        """The texts :meth:`review_inputs` embeds whatever distances are stored, to
        :meth:`~grace_core.models.roles.Embedder.prefetch` while the stored ones are read: the
        Boundary claims and prior units of the documents this settlement promoted a claim in (a
        new prior unit: no stored distance of theirs still holds, :func:`still_measured`)."""
        boundary = self._boundary(self.promotion.sources["doc_id"].unique().to_list())
        docs = boundary["doc_id"].unique().to_list()  # a document left with no Boundary claim measures nothing
        if not docs:
            return []
        return pl.concat([boundary["text"], self.state.prior_units(docs)["text"]]).unique(maintain_order=True).to_list()

    def _boundary(self, doc_ids: Sequence[str] | None = None) -> pl.DataFrame:
        """``doc_id, claim_id, text`` of the Boundary claims of the settled scores (of ``doc_ids`` when given)."""
        keys = ["doc_id", "claim_id"]
        return _of(self.scores.filter(pl.col("status") == BOUNDARY), doc_ids).select(keys).join(self.state.claim_texts(doc_ids), on=keys)

    @property
    def new_edges(self) -> pl.DataFrame:
        """Anchor edges of the promoted claims and the cascade's edges (:data:`EDGE_COLUMNS`)."""
        return pl.concat([self.promotion.edges.select(EDGE_COLUMNS), self.cascade.select(EDGE_COLUMNS)])


def score_state(state: RoundState, params: ScoringParams, rejected: pl.DataFrame, origin: str = "edge table") -> pl.DataFrame:
    """Scores of every claim of ``state`` (:func:`grace_core.scoring.score_edges`) with the
    ``rejected`` claims (``doc_id, claim_id``) Refuted for good."""
    return score_edges(
        validate_edges(state.edges.select(EDGE_COLUMNS), origin=origin), params, rejected=rejected,
        claims=state.claims.select("doc_id", "claim_id").unique(),
        sources=state.sources.filter(pl.col("source_kind").is_in(SOURCE_KINDS)).select("doc_id", "source_id", "source_kind"),
    )


def settle(
    state: RoundState, params: ScoringParams, roles: Callable[[], ModelRoles], *, quorum: int, round_id: int,
    origin: str = "edge table", weights: Mapping[str, float] | None = None,
) -> Settlement:
    """Decisions, promotion, cascade and scores of one round for ``state`` (DESIGN §5).

    The votes are decided with ``quorum`` decisive votes (a majority weighted by ``weights``,
    reviewer → weight, when given; pending while the reviewers of the state's ``deferrals``
    have not answered: :func:`grace_core.decisions.decide`); a confirmed claim not yet verified becomes a
    verified prior with an anchor edge to itself; the judge (``roles()``, called only when
    something was promoted) reads each new verified prior against the document's Boundary
    claims as scored before the promotion, leaving out the claims confirmed in the same
    promotion; then the grown state is scored. Rejected claims are Refuted for good.
    """
    decisions = decide(state.votes.select([c for c in (*VOTE_COLUMNS, "round", "created_at") if c in state.votes.columns]), quorum, weights,
                       state.deferrals)
    rejected = settled(decisions, "reject")
    verified = state.sources.filter(pl.col("source_kind") == "verified").select("doc_id", "claim_id")
    texts = state.claim_texts()
    promotion = promote(decisions.join(verified, on=["doc_id", "claim_id"], how="anti"), texts)
    before = score_state(state, params, rejected, origin)
    if promotion.sources.height == 0:
        empty = pl.DataFrame(schema={c: pl.Utf8 for c in EDGE_COLUMNS})
        return Settlement(decisions, promotion, empty, before, state)
    cascade = judge_cascade(promotion.sources, before, texts, roles(), round_id=round_id).select(EDGE_COLUMNS)
    new_sources = promotion.sources.select(list(SOURCE_COLUMNS))
    if "round" in state.sources.columns:  # promoted in this round
        new_sources = new_sources.with_columns(round=pl.lit(round_id).cast(state.sources.schema["round"]))
    grown = state.with_promotion(new_sources, pl.concat([promotion.edges.select(EDGE_COLUMNS), cascade]))
    # scoring is per document: only the documents that gained verified priors are scored again
    promoted = promotion.sources["doc_id"].unique().sort().to_list()
    scores = pl.concat([before.filter(~pl.col("doc_id").is_in(promoted)), score_state(grown.of(promoted), params, rejected, origin)])
    return Settlement(decisions, promotion, cascade, scores.sort("doc_id", "claim_id"), grown)


def review_candidates(scores: pl.DataFrame, decisions: pl.DataFrame, busy: pl.DataFrame) -> pl.DataFrame:
    """The claims a round may defer, in no particular order: Boundary (with a priority), not
    decided for good (confirm or reject), not waiting on a reviewer (``busy``: ``doc_id, claim_id``); with
    ``doc_id, claim_id, priority, confidence`` and the :data:`~grace_core.review.REVIEW_INPUTS`
    of ``scores`` when it has them (else null)."""
    known = [pl.col(c) if c in scores.columns else pl.lit(None, t).alias(c) for c, t in REVIEW_INPUTS.items()]
    boundary = scores.lazy().filter((pl.col("status") == BOUNDARY) & pl.col("priority").is_not_null()).select(
        "doc_id", "claim_id", "priority", "confidence", *known)
    return _not_in(boundary, pl.concat([decided(decisions), busy.select("doc_id", "claim_id")])).collect()


def _not_in(rows: pl.LazyFrame, keys: pl.DataFrame) -> pl.LazyFrame:
    """``rows`` but those whose ``doc_id, claim_id`` are in ``keys``, in no particular order: an
    anti-join of only the rows of ``keys``' documents (a round's millions of candidates against a
    few thousand decided or busy claims: the others are not hashed on both keys). Lazy, so the
    candidates are materialised once, not once per step."""
    near = pl.col("doc_id").is_in(keys["doc_id"].unique().implode())
    return pl.concat([rows.filter(~near), rows.filter(near).join(keys.unique().lazy(), on=["doc_id", "claim_id"], how="anti")])


@dataclass(frozen=True)
class Deferral:
    """A round's deferral step: the ``chosen`` claims in selection order and the
    :class:`~grace_core.selection.CostReport` of its candidates (how many the rule
    (1 − σ)·Pri > Cost blocked and by how much, how many did not fit the budget)."""

    chosen: pl.DataFrame
    report: CostReport


def deferral(
    scores: pl.DataFrame, decisions: pl.DataFrame, busy: pl.DataFrame, texts: DocumentTexts, roles: ModelRoles,
    params: ScoringParams, *, budget: float, review_seconds: float,
) -> Deferral:
    """The round's deferrals (DESIGN §4) and what the rule and the budget left out:
    :func:`review_candidates` priced with the reviewer pool's expected ``review_seconds``,
    credited for their cascade reach (their ``priority`` becomes
    :func:`grace_core.reach.selection_priority`: the Boundary claims of ``scores`` a
    confirmation would ground) and selected under ``budget``; ``chosen`` rows in selection
    order with ``reach, prior_distance, cost, gain, rank`` and the claim's ``text``, and the
    candidates' :func:`grace_core.selection.cost_report`.

    A candidate's reach and prior distance come with ``scores`` when its document's scoring
    stored them (:func:`grace_core.review.review_inputs`, fixed until the document is rescored);
    the others are computed here by the same function, from ``texts`` of their documents only
    (the claim texts of the chosen claims are the only others asked for)."""
    keys = ["doc_id", "claim_id"]
    candidates = review_candidates(scores, decisions, busy)
    missing = pl.any_horizontal(pl.col(c).is_null() for c in REVIEW_INPUTS)
    unpriced = candidates.filter(missing)
    if unpriced.height:
        docs = unpriced["doc_id"].unique().sort().to_list()
        claim_text = texts.claim_texts(docs)
        boundary = scores.filter((pl.col("status") == BOUNDARY) & pl.col("doc_id").is_in(docs)).select(keys).join(claim_text, on=keys)
        fresh = review_inputs(unpriced.drop(*REVIEW_INPUTS).join(claim_text, on=keys), boundary, texts.prior_units(docs), roles.embedder)
        candidates = pl.concat([candidates.filter(~missing), fresh.select(candidates.columns)])
    candidates = with_cost(candidates.with_columns(priority=selection_priority(params.lambda_r)), params, review_seconds)
    chosen = select_for_review(candidates, budget)
    texts_of_chosen = texts.claim_texts(chosen["doc_id"].unique().sort().to_list())
    return Deferral(chosen.join(texts_of_chosen, on=keys, how="left", maintain_order="left"), cost_report(candidates, chosen, budget))


def defer(
    scores: pl.DataFrame, decisions: pl.DataFrame, busy: pl.DataFrame, texts: DocumentTexts, roles: ModelRoles,
    params: ScoringParams, *, budget: float, review_seconds: float,
) -> pl.DataFrame:
    """The chosen rows of :func:`deferral` alone (``grace eval expansion`` and the scripts,
    which do not report what the rule left out)."""
    return deferral(scores, decisions, busy, texts, roles, params, budget=budget, review_seconds=review_seconds).chosen


def cascaded(before: pl.DataFrame, after: pl.DataFrame, decisions: pl.DataFrame) -> pl.DataFrame:
    """``doc_id, claim_id`` of the claims that turned from Boundary (``before``: the previous
    round's scores) to Grounded (``after``) without a confirm decision of their own — the
    cascade of DESIGN §7 (the ``round_metrics`` view counts the same)."""
    keys = ["doc_id", "claim_id"]
    return (
        before.filter(pl.col("status") == BOUNDARY).select(keys)
        .join(after.filter(pl.col("status") == "grounded").select(keys), on=keys)
        .join(settled(decisions, "confirm"), on=keys, how="anti")
    )
