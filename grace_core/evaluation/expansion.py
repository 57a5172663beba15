"""The paper's expansion protocol on QASPER (its Tables 2–3 and Figure 2), pure: a parsed
document batch and the model roles in, per-round figures out.

Per paper:

- **Round 0.** The priors are the Abstract and the Introduction (the sections whose top-level
  name, before any ``:::``, is "Introduction", optionally numbered; the first section after the
  abstract when none is).
  The responder answers the paper's questions from the priors; priors and responses are
  decomposed, judged (:func:`grace_core.build.build_documents`) and scored. No review.
- **Held-out sections.** Every other section, in document order, split into ``rounds``
  contiguous batches of near-equal section counts (a paper with fewer sections than rounds
  has empty late batches, and those rounds add no responses for it).
- **Round r ≥ 1.** The responder answers the questions from batch r (the
  ``context_passages`` sections of the batch most similar to each question). The new
  responses are decomposed; the judge sees only the pairs not judged before (new sources ×
  every claim, old sources × new claims, verified priors included). Then the round of
  :mod:`grace_core.round`, exactly as the flows run it: the votes that arrived are decided,
  confirmed claims promoted and cascaded (the judge reads each new verified claim against the
  paper's Boundary claims; its other pairs are settled and never judged), the paper is
  scored, its Boundary claims not yet decided are deferred under ``budget`` cost units (the
  verifier's review time is 0) and the verifier (one reviewer, quorum 1) judges them against
  the full paper. The verifier answers within the round, so its votes are settled at once
  (the same settle step again): the round ends with them promoted and cascaded.
- **Consolidation rounds** (``consolidation_rounds``, after the protocol's rounds): no new
  sections; only review and cascade act.

Figures per round, over all papers, from the state at the end of the round:

- QA accuracy (Answer-F1 ≥ 0.5, an abstention is "Unanswerable") and answerability with the
  paper's Grounded claims (priors' claims included) as the answerer's sole context, one
  claim per paragraph in the order they entered the graph; baselines: title + abstract (the
  title alone when a paper has no abstract), and the full paper, once.
- PCR, KF, yield (confirmed / deferred, the outcome of the round's own deferrals) and cascade
  per paper (:func:`grace_core.metrics.round_metrics`, per-paper figures over every paper
  run); cascade counts claims that turned from Boundary (the scores the round's deferrals
  were chosen from) to Grounded (the round's end) without a confirm decision of their own
  (:func:`grace_core.round.cascaded`), as the flows count it between a round's dispatch and
  the settle step that brings its votes.
- Grounding precision against the offline responder's recorded hallucinations (response
  claims only: a claim is false when it comes from a corrupted sentence and is not a claim of
  the original sentence), over all response claims and over the out-of-distribution ones
  (first seen in round ≥ 1, answered from held-out sections, as the paper's Figure 2). With an
  LLM responder the truth is unknown and these figures are None.
- After the last round every response claim has a verifier verdict (its last one from the
  rounds, else the verifier is asked now, with the full paper), giving the confusion matrices
  of status against verifier truth and against the recorded truth.

Model spend: the roles' round counter is started once per run, so ``spend_cap_usd`` caps the
whole evaluation (per worker process); ``spend_cap_reached`` says whether it stopped calls.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from grace_core.build import build_documents, decompose_sources, judge_pairs, sample_responses
from grace_core.claims import claim_id
from grace_core.documents import DocumentBatch
from grace_core.edges import EDGE_COLUMNS
from grace_core.evaluation.qa_harness import ACCURACY_F1, DatasetMismatch, check_dataset, gold_reference
from grace_core.evaluation.qasper_metrics import UNANSWERABLE, score_question
from grace_core.settings_groups import VERIFIER
from grace_core.decisions import VERDICTS
from grace_core.metrics import grounding_precision, round_metrics
from grace_core.models.factory import ModelRoles
from grace_core.models.offline_responder import OfflineResponder
from grace_core.models.roles import AnswerRequest
from grace_core.params import ScoringParams
from grace_core.review import verify_claims
from grace_core.round import RoundState, Settlement, cascaded, deferral, settle
from grace_core.selection import CostReport
from grace_core.status import GROUNDED, STATUSES

TRUTH_LABELS = ("true", "hallucinated")
SOURCE_KEYS = ("doc_id", "source_id", "source_kind", "text", "claim_id")
VOTE_SCHEMA = {"doc_id": pl.Utf8, "claim_id": pl.Utf8, "reviewer": pl.Utf8, "verdict": pl.Utf8, "round": pl.Int32}
QUORUM = 1  # the verifier is one reviewer
_INTRODUCTION = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?\s+)?introduction\b", re.IGNORECASE)


@dataclass(frozen=True)
class PaperSplit:
    """One paper cut for the protocol: round-0 ``priors`` and the held-out ``batches``
    (``doc_id, source_id, source_kind, ord, text`` each), the answerer's baseline contexts."""

    doc_id: str
    title: str
    priors: pl.DataFrame
    batches: list[pl.DataFrame]
    abstract: str
    full_text: str


def split_paper(batch: DocumentBatch, doc_id: str, rounds: int) -> PaperSplit:
    """Round-0 priors (Abstract + Introduction) and ``rounds`` batches of held-out sections."""
    title = batch.documents.filter(pl.col("doc_id") == doc_id)["title"][0]
    sections = batch.priors.filter(pl.col("doc_id") == doc_id).sort("ord")
    names = [n.strip().lower() for n in sections["name"].to_list()]
    is_abstract = [n == "abstract" for n in names]
    is_intro = [bool(_INTRODUCTION.match(n.split(":::")[0])) for n in names]
    if not any(is_intro):
        after = [i for i, a in enumerate(is_abstract) if not a]
        if after:
            is_intro[after[0]] = True
    keep = pl.Series([a or b for a, b in zip(is_abstract, is_intro, strict=True)])
    rows = sections.select("doc_id", "source_id", "ord", "text")
    priors = rows.filter(keep).with_columns(source_kind=pl.lit("prior")).select("doc_id", "source_id", "source_kind", "ord", "text")
    held = rows.filter(~keep).with_columns(source_kind=pl.lit("passage")).select("doc_id", "source_id", "source_kind", "ord", "text")
    cuts = np.array_split(np.arange(held.height), rounds) if rounds else []
    batches = [held[int(c[0]):int(c[-1]) + 1] if len(c) else held.clear() for c in cuts]
    texts = sections["text"].to_list()
    abstract = next((t for t, a in zip(texts, is_abstract, strict=True) if a), None)
    return PaperSplit(doc_id, title, priors, batches, title if abstract is None else f"{title}\n\n{abstract}",
                      "\n\n".join([title, *texts]))


@dataclass
class PaperGraph:
    """The growing claim graph of one paper: a :class:`grace_core.round.RoundState` plus the
    (source, claim) pairs already settled, so the judge never reads a pair twice."""

    sources: pl.DataFrame  # SOURCE_KEYS
    claims: pl.DataFrame  # CLAIM_COLUMNS (one row per decomposition)
    edges: pl.DataFrame  # EDGE_COLUMNS
    judged: pl.DataFrame  # doc_id, source_id, claim_id: pairs the judge (or decomposition) has settled
    votes: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=VOTE_SCHEMA))

    def state(self) -> RoundState:
        """The round's view of this graph."""
        return RoundState(self.sources, self.claims, self.edges, self.votes)

    def absorb(self, settlement: Settlement) -> None:
        """Take the sources and edges a round's settlement added (promoted claims, cascade);
        as in the flows, a verified claim is judged against Boundary claims only."""
        self.sources = settlement.state.sources
        self.edges = settlement.state.edges
        self.settle_all()

    def unique_claims(self) -> pl.DataFrame:
        """``doc_id, claim_id, text, source_kind`` once per claim, in the order claims entered."""
        return self.claims.unique(["doc_id", "claim_id"], keep="first", maintain_order=True).select("doc_id", "claim_id", "text", "source_kind")

    def response_claims(self) -> pl.DataFrame:
        """``doc_id, claim_id`` of claims decomposed from at least one response."""
        return self.claims.filter(pl.col("source_kind") == "response").select("doc_id", "claim_id").unique(maintain_order=True)

    def settle_all(self) -> None:
        """Record every current (source, claim) pair as judged."""
        self.judged = self.sources.select("doc_id", "source_id").join(self.claims.select("doc_id", "claim_id").unique(), on="doc_id")


def _pairs_to_judge(graph: PaperGraph) -> pl.DataFrame:
    """Every (source, claim) pair of the paper not judged yet, with both texts."""
    claims = graph.unique_claims().select("doc_id", "claim_id", pl.col("text").alias("claim_text"))
    return (
        graph.sources.select("doc_id", "source_id", "source_kind", pl.col("text").alias("source_text"))
        .join(claims, on="doc_id")
        .join(graph.judged, on=["doc_id", "source_id", "claim_id"], how="anti")
    )


def _sources(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` as graph sources (:data:`SOURCE_KEYS`; ``claim_id`` null unless verified)."""
    if "claim_id" not in rows.columns:
        rows = rows.with_columns(claim_id=pl.lit(None, pl.Utf8))
    return rows.select(SOURCE_KEYS)


def grow(graph: PaperGraph, new_sources: pl.DataFrame, roles: ModelRoles, round_id: int) -> None:
    """Add ``new_sources`` with their claims; judge only the new pairs."""
    if new_sources.height == 0:
        return
    new_claims = decompose_sources(new_sources, roles, round_id=round_id)
    own = new_claims.select("doc_id", "source_id", "source_kind", "claim_id", pl.lit("entails").alias("label"))
    graph.sources = pl.concat([graph.sources, _sources(new_sources)])
    graph.claims = pl.concat([graph.claims, new_claims])
    graph.judged = pl.concat([graph.judged, own.select("doc_id", "source_id", "claim_id")])
    judged = judge_pairs(_pairs_to_judge(graph), roles, round_id=round_id).select(EDGE_COLUMNS)
    graph.edges = pl.concat([graph.edges, own, judged]).unique(maintain_order=True)
    graph.settle_all()


@dataclass(frozen=True)
class PlayedRound:
    """One round of a paper: the scores when its deferrals were chosen (``opening``), the
    settlement of its reviews (``closing``: the state at the end of the round) and its
    deferred claims with their decision (``doc_id, claim_id, decision``)."""

    opening: pl.DataFrame
    closing: Settlement
    deferred: pl.DataFrame
    cost: CostReport | None = None  # what the rule (1 − σ)·Pri > Cost and the budget did to the candidates


def play_round(graph: PaperGraph, split: PaperSplit, roles: ModelRoles, params: ScoringParams, *, budget: float,
               round_id: int, review: bool = True) -> PlayedRound:
    """One round of :mod:`grace_core.round` on the paper: settle (decisions, promotion,
    cascade, scores), defer under ``budget`` (the verifier's review time is 0), let the
    verifier (one reviewer, quorum 1) judge the deferred claims against the full paper, and
    settle again with its votes: the verifier answers within the round, so the round ends with
    its verdicts promoted and cascaded (a human's votes would be settled when they arrive, by
    the next round's settle step; the step is the same)."""
    opening = settle(graph.state(), params, lambda: roles, quorum=QUORUM, round_id=round_id)
    graph.absorb(opening)
    if not review:
        return PlayedRound(opening.scores, opening, pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8, "decision": pl.Utf8}))
    state = graph.state()
    selection = deferral(opening.scores, opening.decisions, pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8}),
                         state, roles, params, budget=budget, review_seconds=0.0)
    chosen = selection.chosen
    document = pl.DataFrame({"doc_id": [split.doc_id], "text": [split.full_text]})
    verdicts = verify_claims(chosen.select("doc_id", "claim_id", "text"), document, roles)
    graph.votes = pl.concat([graph.votes, verdicts.select(
        "doc_id", "claim_id", pl.lit(VERIFIER).alias("reviewer"), "verdict", pl.lit(round_id, pl.Int32).alias("round"))])
    closing = settle(graph.state(), params, lambda: roles, quorum=QUORUM, round_id=round_id)
    graph.absorb(closing)
    deferred = chosen.select("doc_id", "claim_id").join(closing.decisions.select("doc_id", "claim_id", "decision"),
                                                         on=["doc_id", "claim_id"], how="left")
    return PlayedRound(opening.scores, closing, deferred, selection.report)


def hallucinated_claims(corruptions: pl.DataFrame, roles: ModelRoles) -> pl.DataFrame:
    """``doc_id, claim_id`` of the claims a recorded corruption made false: the claims of the
    corrupted sentence that are not claims of the original one."""
    if corruptions.height == 0:
        return pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8})
    rows = corruptions.select("doc_id", "corrupted", "original").unique(maintain_order=True)
    decomposed = roles.decomposer.decompose([t for r in rows.iter_rows() for t in r[1:]])
    false = set()
    for i, doc_id in enumerate(rows["doc_id"].to_list()):
        bad, good = decomposed[2 * i], decomposed[2 * i + 1]
        false |= {(doc_id, claim_id(doc_id, c)) for c in set(bad.claims) - set(good.claims)}
    return pl.DataFrame(sorted(false), schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8}, orient="row")


def answer_round(split: PaperSplit, questions: pl.DataFrame, context: str, roles: ModelRoles) -> list[dict]:
    """Answer-F1, correctness and attempt of each question answered from ``context``."""
    reqs = [AnswerRequest(q, context) for q in questions["question"].to_list()]
    out = []
    for (qid, gold_json), ans in zip(questions.select("question_id", "gold_json").iter_rows(), roles.answerer.answer(reqs) if reqs else []):
        attempted = not ans.abstained and ans.text is not None
        a_f1, _ = score_question(ans.text if attempted else UNANSWERABLE, [], gold_reference("qasper", gold_json))
        out.append({"doc_id": split.doc_id, "question_id": qid, "attempted": attempted, "answer_f1": a_f1, "correct": a_f1 >= ACCURACY_F1})
    return out


@dataclass
class PaperRun:
    """Per-round records of one paper."""

    scores: list[pl.DataFrame] = field(default_factory=list)  # end-of-round scores with from_response
    decisions: list[pl.DataFrame] = field(default_factory=list)  # this round's deferrals + decision
    cascaded: list[pl.DataFrame] = field(default_factory=list)  # doc_id, claim_id turned Grounded unreviewed
    answers: list[list[dict]] = field(default_factory=list)
    contexts: list[str] = field(default_factory=list)  # the Grounded claims QA read at the end of each round
    costs: list[CostReport | None] = field(default_factory=list)  # each round's selection (None: round 0, no review)
    baselines: dict[str, list[dict]] = field(default_factory=dict)
    first_round: pl.DataFrame | None = None  # doc_id, claim_id, round a response claim was first seen
    truth: pl.DataFrame | None = None  # doc_id, claim_id, is_true for response claims
    final_verdicts: pl.DataFrame | None = None  # doc_id, claim_id, verdict for every response claim
    spend_cap_reached: bool = False


def usable_questions(batch: DocumentBatch, doc_id: str) -> pl.DataFrame:
    """The paper's questions that have at least one reference answer."""
    qs = batch.questions.filter(pl.col("doc_id") == doc_id).sort("ord")
    return qs.filter(pl.Series([bool(gold_reference("qasper", g)) for g in qs["gold_json"].to_list()], dtype=pl.Boolean))


def final_verdicts(graph: PaperGraph, split: PaperSplit, roles: ModelRoles) -> pl.DataFrame:
    """A verifier verdict for every response claim: its last one from the rounds, else one
    asked now with the full paper (``doc_id, claim_id, verdict``)."""
    responses = graph.response_claims()
    known = graph.votes.group_by("doc_id", "claim_id", maintain_order=True).agg(pl.col("verdict").last())
    ask = graph.unique_claims().join(responses, on=["doc_id", "claim_id"], how="semi").join(known, on=["doc_id", "claim_id"], how="anti")
    document = pl.DataFrame({"doc_id": [split.doc_id], "text": [split.full_text]})
    fresh = verify_claims(ask.select("doc_id", "claim_id", "text"), document, roles).select("doc_id", "claim_id", "verdict")
    return pl.concat([known.join(responses, on=["doc_id", "claim_id"], how="semi"), fresh])


def run_paper(batch: DocumentBatch, doc_id: str, roles: ModelRoles, params: ScoringParams, *, rounds: int, budget: float,
              context_passages: int = 3, consolidation_rounds: int = 0) -> PaperRun:
    """The whole protocol on one paper: round 0, ``rounds`` rounds revealing held-out
    sections, then ``consolidation_rounds`` rounds with no new sections, in which only review
    and cascade act. The truth of response claims is known when the responder is the offline
    one (it records its corruptions)."""
    split = split_paper(batch, doc_id, rounds)
    questions = usable_questions(batch, doc_id)
    asked = questions.select("doc_id", "question_id", "question")
    docs = pl.DataFrame({"doc_id": [doc_id], "title": [split.title]})
    run = PaperRun()
    run.baselines = {"abstract_only": answer_round(split, questions, split.abstract, roles),
                     "full_paper": answer_round(split, questions, split.full_text, roles)}
    built = build_documents(docs, split.priors, asked, roles, round_id=0, context_passages=context_passages, model="eval")
    corruptions = [built.corruptions]
    graph = PaperGraph(
        sources=pl.concat([_sources(split.priors), _sources(built.responses)]),
        claims=built.claims, edges=built.edges.select(EDGE_COLUMNS),
        judged=pl.DataFrame(schema={"doc_id": pl.Utf8, "source_id": pl.Utf8, "claim_id": pl.Utf8}),
    )
    graph.settle_all()
    played = play_round(graph, split, roles, params, budget=budget, round_id=0, review=False)
    scores = _with_origin(played.closing.scores, graph)
    run.scores.append(scores)
    run.decisions.append(played.deferred)
    run.costs.append(played.cost)
    run.cascaded.append(pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8}))
    run.contexts.append(grounded_context(graph, scores))
    run.answers.append(answer_round(split, questions, run.contexts[-1], roles))
    for r in range(1, rounds + consolidation_rounds + 1):
        if r <= rounds:
            responses, bad = sample_responses(docs, split.batches[r - 1], asked, roles, round_id=r,
                                              context_passages=context_passages, model="eval")
            corruptions.append(bad)
            grow(graph, responses.select("doc_id", "source_id", "source_kind", "text"), roles, r)
        played = play_round(graph, split, roles, params, budget=budget, round_id=r)
        scores = _with_origin(played.closing.scores, graph)
        run.scores.append(scores)
        run.decisions.append(played.deferred)
        run.costs.append(played.cost)
        run.cascaded.append(cascaded(played.opening, scores, played.closing.decisions))
        run.contexts.append(grounded_context(graph, scores))
        run.answers.append(answer_round(split, questions, run.contexts[-1], roles))
    responses = graph.response_claims()
    run.first_round = graph.claims.filter(pl.col("source_kind") == "response").group_by("doc_id", "claim_id").agg(pl.col("round").min())
    if isinstance(roles.responder, OfflineResponder):
        false = hallucinated_claims(pl.concat(corruptions), roles).with_columns(is_true=pl.lit(False))
        run.truth = responses.join(false, on=["doc_id", "claim_id"], how="left").with_columns(pl.col("is_true").fill_null(True))
    run.final_verdicts = final_verdicts(graph, split, roles)
    run.spend_cap_reached = roles.spend_cap_reached
    return run


def _with_origin(scores: pl.DataFrame, graph: PaperGraph) -> pl.DataFrame:
    """``scores`` with ``from_response`` (the claim was decomposed from a sampled response)."""
    return scores.join(graph.response_claims().with_columns(from_response=pl.lit(True)), on=["doc_id", "claim_id"], how="left").with_columns(
        pl.col("from_response").fill_null(False)
    )


def grounded_context(graph: PaperGraph, scores: pl.DataFrame) -> str:
    """The Grounded claims of the paper, one per paragraph, in the order they entered the graph."""
    grounded = graph.unique_claims().join(scores.filter(pl.col("status") == GROUNDED).select("doc_id", "claim_id"), on=["doc_id", "claim_id"], how="semi")
    return "\n\n".join(grounded["text"].to_list())


def _mean(rows: list[dict], key: str) -> float | None:
    return float(np.mean([r[key] for r in rows])) if rows else None


def confusion(status: pl.DataFrame, labels: pl.DataFrame, label: str, order: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Counts of system status (rows) × ``label`` value (columns) over the claims in both tables."""
    joined = status.join(labels, on=["doc_id", "claim_id"])
    return {s: {v: int(((joined["status"] == s) & (joined[label] == v)).sum()) for v in order} for s in STATUSES}


def _final_figures(final: pl.DataFrame, verdicts: pl.DataFrame, truth: pl.DataFrame | None) -> dict:
    """Confusion matrices of ``final`` (``doc_id, claim_id, status``) against the verifier and
    the recorded truth, and the share of hallucinated claims kept out of Grounded."""
    out = {"confusion_verifier": confusion(final, verdicts, "verdict", VERDICTS), "confusion_truth": None, "hallucinations_kept_out": None}
    if truth is not None:
        labelled = truth.with_columns(truth=pl.when(pl.col("is_true")).then(pl.lit("true")).otherwise(pl.lit("hallucinated")))
        out["confusion_truth"] = matrix = confusion(final, labelled, "truth", TRUTH_LABELS)
        n_false = sum(row["hallucinated"] for row in matrix.values())
        out["hallucinations_kept_out"] = (n_false - matrix["grounded"]["hallucinated"]) / n_false if n_false else None
    return out


def summarise(runs: list[PaperRun], rounds: int, consolidation_rounds: int = 0) -> dict:
    """metrics.json of ``grace eval expansion`` from the papers' runs. The headline confusion
    matrices are over out-of-distribution response claims (first seen in round ≥ 1, as the
    paper's Figure 2); ``all_response_claims`` holds the same figures over every response claim."""
    n_questions = sum(len(r.baselines["full_paper"]) for r in runs)
    truth = pl.concat([r.truth for r in runs]) if all(r.truth is not None for r in runs) else None
    first = pl.concat([r.first_round for r in runs if r.first_round is not None])
    ood = first.filter(pl.col("round") >= 1).select("doc_id", "claim_id")
    out_rounds = []
    for k in range(rounds + consolidation_rounds + 1):
        scores = pl.concat([r.scores[k] for r in runs])
        m = round_metrics(scores, pl.concat([r.decisions[k] for r in runs]), pl.concat([r.cascaded[k] for r in runs]), documents=len(runs))
        answers = [a for r in runs for a in r.answers[k]]
        response = scores.filter(pl.col("from_response"))
        ood_now = response.join(ood, on=["doc_id", "claim_id"], how="semi")
        out_rounds.append({
            "round": k, "consolidation": k > rounds,
            "qa_accuracy": _mean(answers, "correct"),
            "answerability": _mean(answers, "attempted"),
            "answer_f1": _mean(answers, "answer_f1"),
            "pcr": m["pcr"], "kf": m["kf"],
            "yield": m["yield"] if k else None, "yield_decided": m["yield_decided"] if k else None,
            "cascade": m["cascade"] if k else None,
            "grounding_precision": grounding_precision(response, truth) if truth is not None else None,
            "grounding_precision_ood": grounding_precision(ood_now, truth) if truth is not None and k else None,
            "claims": m["claims"], "grounded": m["grounded"], "boundary": m["boundary"], "refuted": m["refuted"],
            "deferred": m["deferred"], "confirmed": m["confirmed"], "rejected": m["rejected"],
            **selection_figures([r.costs[k] for r in runs]),
        })
    final = pl.concat([r.scores[-1] for r in runs]).filter(pl.col("from_response")).select("doc_id", "claim_id", "status")
    verdicts = pl.concat([r.final_verdicts for r in runs if r.final_verdicts is not None])
    return {
        "n_papers": len(runs),
        "n_questions": n_questions,
        "rounds": out_rounds,
        "baselines": {
            name: _mean([a for r in runs for a in r.baselines[name]], "correct") for name in ("abstract_only", "full_paper")
        },
        **_final_figures(final.join(ood, on=["doc_id", "claim_id"], how="semi"), verdicts, truth),
        "all_response_claims": _final_figures(final, verdicts, truth),
        "spend_cap_reached": any(r.spend_cap_reached for r in runs),
    }


def selection_figures(costs: list[CostReport | None]) -> dict:
    """One round's selection over the papers: ``candidates`` (Boundary claims not decided and not
    waiting), ``blocked_by_cost`` (failing (1 − σ)·Pri > Cost, whatever the budget) and
    ``over_budget`` (meeting the rule, left out by the budget); None in round 0 (no review)."""
    known = [c for c in costs if c is not None]
    if not known:
        return {"candidates": None, "blocked_by_cost": None, "over_budget": None}
    return {"candidates": sum(c.candidates for c in known), "blocked_by_cost": sum(c.blocked_by_cost for c in known),
            "over_budget": sum(c.over_budget for c in known)}


def expansion_papers(batch: DocumentBatch) -> list[str]:
    """Ids of the batch's papers the protocol runs on (QASPER lines with at least one question
    that has a reference answer), in file order."""
    check_dataset(batch, "qasper")
    doc_ids = [d for d in batch.documents["doc_id"].to_list() if usable_questions(batch, d).height]
    if not doc_ids:
        raise DatasetMismatch(f"{batch.name}: no paper has a question with a reference answer")
    return doc_ids


def evaluate_expansion(batch: DocumentBatch, roles: ModelRoles, params: ScoringParams, *, rounds: int = 3, budget: float = 3.0,
                       context_passages: int = 3, consolidation_rounds: int = 0, progress: Callable[[int], None] | None = None) -> dict:
    """Run the protocol on every paper of ``batch`` one after the other; ``progress(1)`` after
    each paper. ``budget`` is in review-cost units per paper and round."""
    roles.start_round(0)
    runs = []
    for doc_id in expansion_papers(batch):
        runs.append(run_paper(batch, doc_id, roles, params, rounds=rounds, budget=budget, context_passages=context_passages,
                              consolidation_rounds=consolidation_rounds))
        if progress is not None:
            progress(1)
    return summarise(runs, rounds, consolidation_rounds)
