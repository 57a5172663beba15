"""Retrieval QA evaluation (the paper's Table 1 conditions; DESIGN §6–§7), pure: a parsed
document batch and the model roles in, per-condition metrics out.

Conditions, each answered by the same answerer (which may abstain):

- ``Zero-shot + Part``: the title and the document's first prior — the Abstract for QASPER
  lines, the first ~1,000-word chunk for QuALITY lines.
- ``Zero-shot + Full``: the title and every prior of the document.
- ``RAG``: the product's retriever (:func:`grace_core.ask.ask`) with α = 1: the top ``k``
  priors by cosine among those at or above the relevance floor, abstaining when the best is
  below ``abstain_below`` — so the only difference to GRACE is the closeness term.
- ``GRACE``: the document's round-0 claim graph is built with the model roles (responses to
  its questions, claims, judge edges; :func:`grace_core.build.build_documents`) and scored
  (:func:`grace_core.scoring.score_edges`); the ``retrieval_k`` priors of highest cosine at or
  above the floor are reranked by α·cos + (1 − α)·ĈC and the top ``k`` are the context
  (:func:`grace_core.ask.ask`, the product's own retrieval).

Abstention (:func:`abstention_metrics`): the negatives are the questions every gold answer of
which is "unanswerable"; precision is the share of a condition's abstentions that are
negatives, recall the share of negatives it abstains on. Each row also keeps the question's
best relevance (highest cosine to a prior) and the Answer-F1 an abstention would score, so the
accuracy–coverage curve over the abstention threshold (:func:`abstention_curve`) needs no rerun.

Halves (:func:`paper_half`): a paper is in the ``tuning`` half when the SHA-256 of its id is
even, else in the ``reporting`` half; retrieval settings are chosen on the first and reported
on the second.

Metrics per condition: accuracy, answerability (share of questions attempted) and, for
QASPER lines, Answer-F1 and Evidence-F1 (:mod:`grace_core.evaluation.qasper_metrics`). An
abstention is the prediction "Unanswerable" with no evidence, as the QASPER evaluator scores
it. QASPER accuracy: a question counts as correct when its Answer-F1 ≥ 0.5. Predicted
evidence: the context paragraph that holds the answer's evidence sentence (or, when the
answerer names none, its text): the paragraph containing it, else the one with the highest
token F1 to it. QuALITY accuracy: exact match on the
option; Answer-F1 and Evidence-F1 are None.

Documents an evaluation cannot use are left out and reported, not fatal
(:func:`select_documents`): lines the parser skipped, documents of another dataset, and
documents with no question that can be scored (QASPER: no reference answer; QuALITY: no
options or no gold answer, as in the unlabelled test split). Within a usable document such
questions are left out. Gold answers are read as real files give them: null lists are empty,
QASPER answers nested under ``answer`` (the official release's shape) are unwrapped, and a
QuALITY question without ``gold_index`` uses its 1-based ``gold_label``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import polars as pl

from grace_core.ask import ask, candidate_passages
from grace_core.build import build_documents
from grace_core.documents import DocumentBatch
from grace_core.errors import GraceError
from grace_core.evaluation.qasper_metrics import (
    UNANSWERABLE,
    gold_answers,
    score_question,
    token_f1,
)
from grace_core.evaluation.quality_metrics import option_exact_match
from grace_core.models.factory import ModelRoles
from grace_core.models.roles import AnswerRequest
from grace_core.params import ScoringParams
from grace_core.retrieval import Retrieval
from grace_core.scoring import score_edges

DATASETS = ("qasper", "quality")
HALVES = ("tuning", "reporting")
CONDITIONS = ("Zero-shot + Part", "Zero-shot + Full", "RAG", "GRACE")
ACCURACY_F1 = 0.5


class DatasetMismatch(GraceError):
    """The file's documents are not of the dataset named on the command line."""


@dataclass
class ConditionTally:
    """Running sums of one condition."""

    name: str
    n: int = 0
    correct: float = 0.0
    attempted: int = 0
    answer_f1: float = 0.0
    evidence_f1: float = 0.0

    def metrics(self, dataset: str) -> dict:
        n = max(self.n, 1)
        return {
            "name": self.name,
            "accuracy": self.correct / n,
            "answerability": self.attempted / n,
            "answer_f1": self.answer_f1 / n if dataset == "qasper" else None,
            "evidence_f1": self.evidence_f1 / n if dataset == "qasper" else None,
        }


@dataclass
class QAResult:
    """``metrics`` is the metrics.json object; ``rows`` one record per (question, condition)."""

    metrics: dict
    rows: list[dict] = field(default_factory=list)


def check_dataset(batch: DocumentBatch, dataset: str) -> None:
    """Raise :class:`DatasetMismatch` unless ``dataset`` is known, every document has its
    shape and every question can be scored (a batch from :func:`select_documents` passes)."""
    if dataset not in DATASETS:
        raise DatasetMismatch(f"unknown dataset {dataset!r}; expected one of: {', '.join(DATASETS)}")
    shapes = set(batch.documents["source_format"].to_list())
    if shapes != {dataset}:
        raise DatasetMismatch(f"{batch.name}: expected {dataset} documents, found {', '.join(sorted(shapes)) or 'none'}")
    if batch.questions.height == 0:
        raise DatasetMismatch(f"{batch.name}: no questions to evaluate")
    if dataset == "quality":
        for qid, options, gold_json in batch.questions.select("question_id", "options", "gold_json").iter_rows():
            if not scorable(dataset, options, gold_json):
                raise DatasetMismatch(f"{batch.name}: question {qid!r} lacks options or a gold answer (gold_index or gold_label)")


def scorable(dataset: str, options: list[str] | None, gold_json: str | None) -> bool:
    """Whether a question can be scored: a QASPER one has a reference answer, a QuALITY one
    options and a gold option among them."""
    gold = gold_reference(dataset, gold_json)
    if dataset == "qasper":
        return bool(gold)
    return options is not None and gold is not None and 0 <= gold < len(options)


def select_documents(batch: DocumentBatch, dataset: str) -> tuple[DocumentBatch, list[dict]]:
    """The part of ``batch`` the evaluation of ``dataset`` can use (its documents of that
    dataset with their scorable questions, those without any left out), and one
    ``{line, doc_id, reason}`` per line or document left out, in file order: the parser's
    skipped lines first. :class:`DatasetMismatch` when nothing is left."""
    if dataset not in DATASETS:
        raise DatasetMismatch(f"unknown dataset {dataset!r}; expected one of: {', '.join(DATASETS)}")
    skipped = [{"line": s.line, "doc_id": s.doc_id, "reason": s.message.removeprefix(f"{batch.name}: line {s.line}: ")}
               for s in batch.skipped]
    questions = batch.questions.filter(pl.Series(
        [scorable(dataset, o, g) for o, g in batch.questions.select("options", "gold_json").iter_rows()], dtype=pl.Boolean))
    counts = dict(batch.questions.group_by("doc_id").len().iter_rows())
    usable = dict(questions.group_by("doc_id").len().iter_rows())
    keep: list[str] = []
    for doc_id, shape, line in batch.documents.select("doc_id", "source_format", "line").iter_rows():
        reason = _unusable(dataset, shape, counts.get(doc_id, 0), usable.get(doc_id, 0))
        if reason:
            skipped.append({"line": line, "doc_id": doc_id, "reason": reason})
        else:
            keep.append(doc_id)
    skipped.sort(key=lambda s: s["line"])
    if not keep:
        shapes = sorted(set(batch.documents["source_format"].to_list()))
        if shapes and dataset not in shapes:
            raise DatasetMismatch(f"{batch.name}: expected {dataset} documents, found {', '.join(shapes)}")
        if batch.documents.height and batch.questions.height == 0:
            raise DatasetMismatch(f"{batch.name}: no questions to evaluate")
        first = f"; first: line {skipped[0]['line']}: {skipped[0]['reason']}" if skipped else ""
        raise DatasetMismatch(f"{batch.name}: no document can be evaluated ({len(skipped)} left out{first})")
    selected = replace(batch, documents=batch.documents.filter(pl.col("doc_id").is_in(keep)),
                       priors=batch.priors.filter(pl.col("doc_id").is_in(keep)),
                       questions=questions.filter(pl.col("doc_id").is_in(keep)))
    return selected, skipped


def _unusable(dataset: str, shape: str, n_questions: int, n_usable: int) -> str | None:
    if shape != dataset:
        return f"a {shape} document, not {dataset}"
    if n_questions == 0:
        return "no questions"
    if n_usable == 0:
        return ("no question has a reference answer" if dataset == "qasper"
                else "no question has options and a gold answer (gold_index or gold_label)")
    return None


def paper_half(doc_id: str) -> str:
    """``tuning`` when the SHA-256 of the document id (UTF-8) is even, else ``reporting``: a
    fixed split of a dataset's papers into two halves."""
    return HALVES[int(hashlib.sha256(doc_id.encode()).hexdigest(), 16) % 2]


def select_half(batch: DocumentBatch, half: str | None) -> DocumentBatch:
    """The documents of ``batch`` in ``half`` (:func:`paper_half`; all when None)."""
    if half is None:
        return batch
    if half not in HALVES:
        raise DatasetMismatch(f"unknown half {half!r}; expected one of: {', '.join(HALVES)}")
    keep = [d for d in batch.documents["doc_id"].to_list() if paper_half(d) == half]
    return replace(batch, documents=batch.documents.filter(pl.col("doc_id").is_in(keep)),
                   priors=batch.priors.filter(pl.col("doc_id").is_in(keep)),
                   questions=batch.questions.filter(pl.col("doc_id").is_in(keep)))


def abstention_metrics(rows: list[dict], condition: str) -> dict:
    """Abstention precision and recall of ``condition`` against the questions whose gold answers
    all say unanswerable (QASPER rows)."""
    mine = [r for r in rows if r["condition"] == condition]
    abstained = [r for r in mine if not r["attempted"]]
    negatives = [r for r in mine if r["unanswerable"]]
    hits = sum(r["unanswerable"] for r in abstained)
    return {"abstained": len(abstained), "negatives": len(negatives),
            "precision": hits / len(abstained) if abstained else None,
            "recall": hits / len(negatives) if negatives else None}


def abstention_curve(rows: list[dict], condition: str, thresholds: list[float]) -> list[dict]:
    """For each threshold t, ``condition`` as if it also abstained when the question's best
    relevance is below t: coverage (share attempted), accuracy (Answer-F1 ≥ 0.5, abstentions
    scored as "Unanswerable"), Answer-F1, accuracy among the attempted, and abstention precision
    and recall. Exact for every t at or above the run's own ``abstain_below``."""
    mine = [r for r in rows if r["condition"] == condition]
    out = []
    for t in thresholds:
        n = max(len(mine), 1)
        kept = [r for r in mine if r["attempted"] and (r["best_relevance"] is not None and r["best_relevance"] >= t)]
        kept_ids = {id(r) for r in kept}
        dropped = [r for r in mine if id(r) not in kept_ids]
        f1 = [r["answer_f1"] for r in kept] + [r["abstain_f1"] for r in dropped]
        negatives = sum(r["unanswerable"] for r in mine)
        hits = sum(r["unanswerable"] for r in dropped)
        out.append({"threshold": t, "coverage": len(kept) / n, "accuracy": sum(f >= ACCURACY_F1 for f in f1) / n,
                    "answer_f1": sum(f1) / n,
                    "selective_accuracy": sum(r["answer_f1"] >= ACCURACY_F1 for r in kept) / len(kept) if kept else None,
                    "precision": hits / len(dropped) if dropped else None, "recall": hits / negatives if negatives else None})
    return out


def paired_bootstrap(rows: list[dict], a: str, b: str, metric: str, *, samples: int = 2000, seed: int = 0) -> dict:
    """The mean of ``metric`` under condition ``a`` minus under ``b`` over the same questions,
    with a 95% interval from a paired bootstrap that resamples papers (questions of a paper stay
    together); ``metric`` is a row key (``answer_f1``, ``evidence_f1``, ``correct``)."""
    import numpy as np

    by = {(r["doc_id"], r["question_id"], r["condition"]): float(r[metric]) for r in rows if r["condition"] in (a, b)}
    keys = sorted({(d, q) for d, q, _ in by})
    docs = sorted({d for d, _ in keys})
    index = {d: i for i, d in enumerate(docs)}
    sums, counts = np.zeros(len(docs)), np.zeros(len(docs))
    for d, q in keys:
        sums[index[d]] += by[(d, q, a)] - by[(d, q, b)]
        counts[index[d]] += 1
    if not docs:
        return {"difference": None, "low": None, "high": None}
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(docs), size=(samples, len(docs)))
    boot = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    low, high = np.quantile(boot, [0.025, 0.975])
    return {"difference": float(sums.sum() / counts.sum()), "low": float(low), "high": float(high)}


def paragraphs(text: str) -> list[str]:
    """The paragraphs of a prior (sections are stored as paragraphs joined by blank lines)."""
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def answer_paragraph(answer: str, context_paragraphs: list[str]) -> list[str]:
    """The predicted evidence of an answer: the paragraph containing it, else the closest by token F1."""
    if not context_paragraphs:
        return []
    for p in context_paragraphs:
        if answer.strip() and answer.strip() in p:
            return [p]
    best = max(context_paragraphs, key=lambda p: token_f1(answer, p))
    return [best] if token_f1(answer, best) > 0 else []


def graph_candidates(batch: DocumentBatch, doc_id: str, roles: ModelRoles, params: ScoringParams, *,
                     context_passages: int) -> pl.DataFrame:
    """Build and score one document's round-0 claim graph; return its prior candidates with ĈC."""
    docs = batch.documents.filter(pl.col("doc_id") == doc_id).select("doc_id", "title")
    priors = batch.priors.filter(pl.col("doc_id") == doc_id)
    passages = priors.select("doc_id", "source_id", pl.lit("prior").alias("source_kind"), "ord", "text")
    questions = batch.questions.filter(pl.col("doc_id") == doc_id).select("doc_id", "question_id", "question")
    built = build_documents(docs, passages, questions, roles, round_id=0, context_passages=context_passages, model="eval")
    sources = pl.concat([passages.select("doc_id", "source_id", "source_kind"),
                         built.responses.select("doc_id", "source_id", "source_kind")])
    scores = score_edges(built.edges, params, claims=built.claims.select("doc_id", "claim_id").unique(), sources=sources)
    entails = built.edges.filter((pl.col("label") == "entails") & (pl.col("source_kind") == "prior")).select(
        "doc_id", "source_id", "claim_id").unique()
    claims = built.claims.unique(["doc_id", "claim_id"], keep="first").select("doc_id", "claim_id", "text")
    return candidate_passages(priors.select("doc_id", "source_id", "text"), entails, scores, claims, expansion=False)


def _answer_records(answers: object) -> Iterator[dict]:
    """QASPER answer records as :func:`gold_answers` reads them: null lists empty, non-text
    items dropped, an answer nested under ``answer`` unwrapped."""
    for a in answers if isinstance(answers, list) else []:
        if isinstance(a, dict) and isinstance(a.get("answer"), dict):
            a = a["answer"]
        if not isinstance(a, dict):
            continue
        yield {
            **a,
            "extractive_spans": [t for t in a.get("extractive_spans") or [] if isinstance(t, str)],
            "free_form_answer": a.get("free_form_answer") if isinstance(a.get("free_form_answer"), str) else "",
            "evidence": [e for e in a.get("evidence") or [] if isinstance(e, str)],
        }


def _gold_index(gold: dict) -> int | None:
    index, label = gold.get("gold_index"), gold.get("gold_label")
    if isinstance(index, int) and not isinstance(index, bool):
        return index
    if isinstance(label, int) and not isinstance(label, bool):
        return label - 1
    return None


def gold_reference(dataset: str, gold_json: str | None):
    """The reference of one question: QASPER's gold answers (evidence stripped), or QuALITY's
    0-based option index (None when the question has no gold answer)."""
    gold = json.loads(gold_json) if gold_json else {}
    if dataset == "qasper":
        golds = gold_answers({"answers": list(_answer_records(gold.get("answers")))})
        return [replace(g, evidence=tuple(e.strip() for e in g.evidence)) for g in golds]
    return _gold_index(gold)


def evaluate_qa(batch: DocumentBatch, dataset: str, roles: ModelRoles, params: ScoringParams, *, alpha: float,
                k: int = 5, context_passages: int = 3, progress: Callable[[int], None] | None = None,
                graphs: Callable[[str], pl.DataFrame] | None = None) -> QAResult:
    """Run the four conditions on every question of ``batch``; ``progress(n)`` is called after
    each document with its number of questions. The retrieval settings are ``params``'s
    (``retrieval_k``, ``relevance_floor``, ``abstain_below``) with ``alpha`` and ``k``;
    ``graphs(doc_id)``, when given, returns the GRACE candidates of a document (a cache of
    :func:`graph_candidates`, for parameter sweeps)."""
    check_dataset(batch, dataset)
    grace_retrieval = Retrieval.of(params, top=k, alpha=alpha)
    rag_retrieval = replace(grace_retrieval, alpha=1.0)
    tallies = {c: ConditionTally(c) for c in CONDITIONS}
    rows: list[dict] = []
    for doc_id, title in batch.documents.select("doc_id", "title").iter_rows():
        priors = batch.priors.filter(pl.col("doc_id") == doc_id).sort("ord")
        qs = batch.questions.filter(pl.col("doc_id") == doc_id).sort("ord")
        if qs.height == 0:
            continue
        texts = priors["text"].to_list()
        part = f"{title}\n\n{texts[0]}"
        full = "\n\n".join([title, *texts])
        rag_candidates = candidate_passages(priors.select("doc_id", "source_id", "text"),
                                            pl.DataFrame(schema={"doc_id": pl.Utf8, "source_id": pl.Utf8, "claim_id": pl.Utf8}),
                                            pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8, "status": pl.Utf8, "closeness_norm": pl.Float64}),
                                            pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8, "text": pl.Utf8}),
                                            expansion=False)
        grace_candidates = (graphs(doc_id) if graphs is not None
                            else graph_candidates(batch, doc_id, roles, params, context_passages=context_passages))
        for qid, question, options, gold_json in qs.select("question_id", "question", "options", "gold_json").iter_rows():
            opts = tuple(options) if dataset == "quality" else None
            gold = gold_reference(dataset, gold_json)
            if dataset == "qasper" and not gold:
                continue  # no usable reference answer
            z_part, z_full = roles.answerer.answer([AnswerRequest(question, part, opts), AnswerRequest(question, full, opts)])
            rag = ask(question, rag_candidates, roles, k=k, options=opts, retrieval=rag_retrieval)
            gr = ask(question, grace_candidates, roles, k=k, options=opts, retrieval=grace_retrieval)
            outcomes = {
                "Zero-shot + Part": (z_part, paragraphs(part)),
                "Zero-shot + Full": (z_full, paragraphs(full)),
                "RAG": (rag.answer, [p for t in rag.context["text"].to_list() for p in paragraphs(t)]),
                "GRACE": (gr.answer, [p for t in gr.context["text"].to_list() for p in paragraphs(t)]),
            }
            for name, (ans, ctx_pars) in outcomes.items():
                t = tallies[name]
                t.n += 1
                attempted = not ans.abstained and (ans.text is not None or ans.option is not None)
                t.attempted += int(attempted)
                row = {"doc_id": doc_id, "question_id": qid, "condition": name, "attempted": attempted,
                       "best_relevance": rag.best_relevance}
                if dataset == "qasper":
                    text = ans.text if attempted else UNANSWERABLE
                    evidence = answer_paragraph(ans.evidence or text, ctx_pars) if attempted else []
                    a_f1, e_f1 = score_question(text, evidence, gold)
                    t.answer_f1 += a_f1
                    t.evidence_f1 += e_f1
                    t.correct += float(a_f1 >= ACCURACY_F1)
                    row.update(answer=text, answer_f1=a_f1, evidence_f1=e_f1, correct=a_f1 >= ACCURACY_F1,
                               abstain_f1=score_question(UNANSWERABLE, [], gold)[0],
                               unanswerable=all(g.kind == "none" for g in gold))
                else:
                    em = option_exact_match(ans.option if attempted else None, int(gold))
                    t.correct += em
                    row.update(option=ans.option if attempted else None, gold_index=int(gold), correct=bool(em))
                rows.append(row)
        if progress is not None:
            progress(qs.height)
    n_questions = tallies["GRACE"].n
    metrics = {"dataset": dataset, "n_questions": n_questions, "conditions": [tallies[c].metrics(dataset) for c in CONDITIONS],
               "retrieval": {"alpha": alpha, "retrieval_k": grace_retrieval.retrieval_k, "relevance_floor": grace_retrieval.relevance_floor,
                             "abstain_below": grace_retrieval.abstain_below, "top": k}}
    if dataset == "qasper":
        metrics["abstention"] = {c: abstention_metrics(rows, c) for c in CONDITIONS}
        metrics["grace_minus_rag"] = {m: paired_bootstrap(rows, "GRACE", "RAG", m) for m in ("answer_f1", "evidence_f1", "correct")}
        metrics["abstention_curve"] = abstention_curve(rows, "GRACE", [round(0.05 * i, 2) for i in range(0, 17)])
    return QAResult(metrics, rows)
