"""Calibrate the offline judge, verifier and answerer thresholds on QASPER dev.

Pairs (DESIGN: "gold evidence paragraphs entail their answers"): for every extractive or
abstractive answer of at least five words with paragraph evidence,

- positive: (its gold evidence paragraphs, the answer) must be ``entails``;
- random negative: (a random non-evidence paragraph of the paper, the answer);
- hard negative: (the non-evidence paragraph sharing most content words with the answer, the answer);
- contradiction: (the evidence, the answer corrupted by a number, negation or term change)
  must be ``contradicts`` (or at least not ``entails``);
- reported only, not fitted: a sentence of the evidence (``sent``, must be ``entails``) and that
  sentence corrupted (``sent_corrupt``, must be ``contradicts``), the offline responder's kind
  of hallucination checked against the passage it came from.

Entailment of the judge as it runs (:class:`~grace_core.models.offline_judge.OfflineJudge`,
containment included) on pairs the thresholds were not fitted on, reported on the held-out
half, and beside another checkout's judge with ``--old-judge DIR`` (e.g. a ``git worktree`` of
an earlier commit, run in a subprocess on that checkout's code and default settings):

- ``sent_ans``: the gold evidence sentence sharing most content words with an answer, and that
  answer (should entail); ``ans_ans``: two annotators' answers to one question, the first as
  source (should entail);
- ``para``: an evidence sentence (or it merged with the next one) and a rewording of it by the
  offline responder's operations (:mod:`grace_core.models.paraphrase`; should entail);
- negatives: ``rand``, ``hard``, ``corrupt`` above and the corrupted variants of the new
  positives, ``sent_ans_x``, ``ans_ans_x``, ``para_x`` (a number, negation or term changed:
  must not entail, should contradict).

Papers alternate between a fit half (thresholds chosen there) and a held-out half (figures
reported there). The answerer's abstention threshold is fitted so that attempting tracks
whether the sentence it would answer with lies in a gold evidence paragraph (Youden's J).

Run: ``.venv/bin/python -m benchmarks.calibrate_judge [--papers 100] [--threads 2] [--old-judge /tmp/old-checkout]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grace_core.models.config import ModelConfig
from grace_core.models.corruption import corrupt, term_pool
from grace_core.models.lexicon import content_stems
from grace_core.models.offline_embedder import OfflineEmbedder
from grace_core.models.offline_judge import OfflineJudge
from grace_core.models.offline_support import SupportScorer, relevance
from grace_core.models.paraphrase import OPERATIONS, merge
from grace_core.models.roles import JudgeRequest
from grace_core.models.segment import claim_units, is_fragment, normalise, sentences
from benchmarks.shared_data import QASPER_DEV, require_data

DEFAULT_DATA = QASPER_DEV
MIN_ANSWER_WORDS = 5
KINDS = ("pos", "rand", "hard", "corrupt", "sent", "sent_corrupt")
ENTAIL_POSITIVES = ("pos", "sent_ans", "ans_ans", "para")
ENTAIL_NEGATIVES = ("rand", "hard", "corrupt", "sent_ans_x", "ans_ans_x", "para_x")
OLD_JUDGE = """import json, sys
from grace_core.models.config import ModelConfig
from grace_core.models.offline_embedder import OfflineEmbedder
from grace_core.models.offline_judge import OfflineJudge
from grace_core.models.roles import JudgeRequest
pairs = json.load(sys.stdin)
cfg = ModelConfig(torch_threads=int(sys.argv[1]))
judge = OfflineJudge(OfflineEmbedder.from_config(cfg), cfg)
json.dump([row[0].label for row in judge.judge([JudgeRequest(s, (c,)) for s, c in pairs])], sys.stdout)
"""
"""Labels the pairs (JSON list of [source, claim] on stdin) with the judge of the checkout it runs in."""


@dataclass(frozen=True)
class Pair:
    """One (source, claim) calibration pair; ``kind`` ∈ pos, rand, hard, corrupt, sent, sent_corrupt."""

    fit: bool
    kind: str
    source: str
    claim: str


def load_papers(path: Path, limit: int | None) -> list[dict]:
    """The first ``limit`` papers of a QASPER JSONL file."""
    papers = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            papers.append(json.loads(line))
            if limit is not None and len(papers) >= limit:
                break
    return papers


def paper_paragraphs(paper: dict) -> list[str]:
    """Every non-empty paragraph of the paper's sections."""
    return [p for s in paper["sections"] for p in s["paragraphs"] if p.strip()]


def build_pairs(papers: list[dict], seed: int) -> list[Pair]:
    """Calibration pairs of every paper (even index: fit half; odd: held-out half)."""
    rng = random.Random(seed)
    pairs: list[Pair] = []
    for idx, paper in enumerate(papers):
        fit = idx % 2 == 0
        paras = paper_paragraphs(paper)
        pool = term_pool("\n\n".join(paras))
        seen: set[tuple[str, str]] = set()
        for q in paper["questions"]:
            for a in q["answers"]:
                if a["answer_type"] not in ("extractive", "abstractive"):
                    continue
                evidence = [e for e in a["evidence"] if e.strip() and not e.startswith("FLOAT SELECTED")]
                claim = normalise(a["free_form_answer"] or " ".join(a["extractive_spans"]))
                if not evidence or len(claim.split()) < MIN_ANSWER_WORDS:
                    continue
                source = "\n\n".join(evidence)
                if (source, claim) in seen:
                    continue
                seen.add((source, claim))
                others = [p for p in paras if p not in evidence]
                pairs.append(Pair(fit, "pos", source, claim))
                if others:
                    pairs.append(Pair(fit, "rand", rng.choice(others), claim))
                    words = content_stems(claim)
                    pairs.append(Pair(fit, "hard", max(others, key=lambda p: len(words & content_stems(p))), claim))
                bad = corrupt(claim, 0, rng, pool)
                if bad is not None:
                    pairs.append(Pair(fit, "corrupt", source, bad.corrupted))
                units = claim_units(source)
                if units:
                    sent = rng.choice(units)
                    pairs.append(Pair(fit, "sent", source, sent))
                    bad = corrupt(sent, 0, rng, pool)
                    if bad is not None:
                        pairs.append(Pair(fit, "sent_corrupt", source, bad.corrupted))
    return pairs


def _answers(question: dict) -> list[tuple[str, list[str]]]:
    """(answer text, evidence without figures) of the question's extractive and abstractive
    answers of at least :data:`MIN_ANSWER_WORDS` words."""
    out = []
    for a in question["answers"]:
        if a["answer_type"] not in ("extractive", "abstractive"):
            continue
        text = normalise(a["free_form_answer"] or " ".join(a["extractive_spans"]))
        if len(text.split()) >= MIN_ANSWER_WORDS:
            out.append((text, [e for e in a["evidence"] if e.strip() and not e.startswith("FLOAT SELECTED")]))
    return out


def entailment_pairs(papers: list[dict], seed: int) -> list[Pair]:
    """The pairs of the entailment comparison (``sent_ans``, ``ans_ans``, ``para`` and their
    corrupted ``_x`` variants; see the module docstring)."""
    rng = random.Random(seed)
    pairs: list[Pair] = []

    def add(fit: bool, kind: str, source: str, claim: str, pool: tuple[str, ...]) -> None:
        pairs.append(Pair(fit, kind, source, claim))
        bad = corrupt(claim, 0, rng, pool)
        if bad is not None:
            pairs.append(Pair(fit, f"{kind}_x", source, bad.corrupted))

    for idx, paper in enumerate(papers):
        fit = idx % 2 == 0
        pool = term_pool("\n\n".join(paper_paragraphs(paper)))
        seen: set[str] = set()
        for q in paper["questions"]:
            answers = _answers(q)
            for text, evidence in answers:
                sents = [u for e in evidence for u in sentences(e) if not is_fragment(u)]
                if sents:
                    words = content_stems(text)
                    add(fit, "sent_ans", max(sents, key=lambda u: len(words & content_stems(u))), text, pool)
                for e in evidence:
                    units = [u for u in sentences(e) if not is_fragment(u)]
                    for k, sent in enumerate(units):
                        if sent in seen:
                            continue
                        seen.add(sent)
                        for op in rng.sample(list(OPERATIONS.values()), len(OPERATIONS)):
                            new = op(sent, rng)
                            if new is not None:
                                add(fit, "para", sent, new, pool)
                                break
                        joined = merge(sent, units[k + 1]) if k + 1 < len(units) else None
                        if joined is not None:
                            add(fit, "para", joined, rng.choice((sent, units[k + 1])), pool)
            for (first, _), (second, _) in zip(answers, answers[1:]):
                if first != second:
                    add(fit, "ans_ans", first, second, pool)
    return pairs


def judge_labels(judge: OfflineJudge, pairs: list[Pair]) -> np.ndarray:
    """The judge's label of every pair."""
    return np.array([row[0].label for row in judge.judge([JudgeRequest(p.source, (p.claim,)) for p in pairs])])


def checkout_labels(checkout: Path, pairs: list[Pair], threads: int) -> np.ndarray:
    """The labels of the offline judge of another checkout (its code and default settings)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-c", OLD_JUDGE, str(threads)], input=json.dumps([[p.source, p.claim] for p in pairs]),
                          capture_output=True, text=True, cwd=checkout, env=env, check=True)
    return np.array(json.loads(done.stdout))


def entailment_table(labels: dict[str, np.ndarray], kind: np.ndarray, held: np.ndarray) -> list[str]:
    """Markdown rows: each judge's share of ``entails`` / ``contradicts`` per kind, then the
    precision and recall of ``entails`` (positives: :data:`ENTAIL_POSITIVES`; negatives:
    :data:`ENTAIL_NEGATIVES`) on the held-out half."""
    names = list(labels)
    rows = ["| pairs | n | " + " | ".join(f"{n}: entails / contradicts" for n in names) + " |",
            "|---|---|" + "---|" * len(names)]
    for k in (*ENTAIL_POSITIVES, *ENTAIL_NEGATIVES):
        sel = held & (kind == k)
        cells = [f"{float((lab[sel] == 'entails').mean()):.3f} / {float((lab[sel] == 'contradicts').mean()):.3f}" for lab in labels.values()]
        rows.append(f"| {k} | {int(sel.sum())} | " + " | ".join(cells) + " |")
    rows += ["", "| entailment | " + " | ".join(f"{n}: precision / recall" for n in names) + " |", "|---|" + "---|" * len(names)]
    truth = np.isin(kind, ENTAIL_POSITIVES)
    for positives in (*ENTAIL_POSITIVES, "all"):
        pos = truth if positives == "all" else kind == positives
        sel = held & (pos | np.isin(kind, ENTAIL_NEGATIVES))
        cells = []
        for lab in labels.values():
            p, r, _ = precision_recall(lab[sel] == "entails", pos[sel])
            cells.append(f"{p:.3f} / {r:.3f}")
        rows.append(f"| {positives} vs all negatives | " + " | ".join(cells) + " |")
    return rows


def precision_recall(pred: np.ndarray, truth: np.ndarray) -> tuple[float, float, float]:
    """Precision, recall and F1 of boolean predictions."""
    tp = float(np.sum(pred & truth))
    p = tp / max(1.0, float(pred.sum()))
    r = tp / max(1.0, float(truth.sum()))
    return p, r, 2 * p * r / max(1e-9, p + r)


def youden_j(pred: np.ndarray, truth: np.ndarray) -> float:
    """True-positive rate minus false-positive rate (insensitive to how rare positives are)."""
    return float(pred[truth].mean() if truth.any() else 0.0) - float(pred[~truth].mean() if (~truth).any() else 0.0)


def fit_entailment(
    sim: np.ndarray, ovl: np.ndarray, backed: np.ndarray, truth: np.ndarray, min_precision: float | None
) -> tuple[float, float]:
    """Thresholds (similarity, overlap) of the entailment rule maximising F1, or the recall at
    ``min_precision``; ``backed`` marks claims whose numbers, terms and negations the source backs."""
    best, best_key = (1.0, 1.0), (-1.0, -1.0)
    for ts in np.arange(0.30, 0.951, 0.025):
        for to in np.arange(0.0, 1.001, 0.05):
            p, r, f = precision_recall((sim >= ts) & (ovl >= to) & backed, truth)
            key = (f, p) if min_precision is None else ((r, p) if p >= min_precision else (-1.0, p))
            if key > best_key:
                best_key, best = key, (round(float(ts), 3), round(float(to), 2))
    return best


def fit_contradiction(sim: np.ndarray, mism: np.ndarray, truth: np.ndarray) -> float:
    """The similarity threshold (at least 0.5: contradictions are between highly similar texts)
    from which a mismatch means ``contradicts``, maximising F1 over all pairs (only the
    corrupted ones should be contradicted)."""
    best_t, best_f = 1.0, -1.0
    for t in np.arange(0.50, 0.951, 0.025):
        f = precision_recall(mism & (sim >= t), truth)[2]
        if f > best_f:
            best_f, best_t = f, round(float(t), 3)
    return best_t


def answer_rows(papers: list[dict], embedder: OfflineEmbedder) -> list[tuple[bool, float, bool]]:
    """(fit half?, best question–sentence cosine, is that sentence in gold evidence?) per question."""
    rows = []
    for idx, paper in enumerate(papers):
        paras = paper_paragraphs(paper)
        sents = [s for s in sentences("\n\n".join(paras)) if not is_fragment(s)]
        if not sents:
            continue
        for q in paper["questions"]:
            evidence = [normalise(e) for a in q["answers"] for e in a["evidence"] if not e.startswith("FLOAT SELECTED")]
            scores = relevance(embedder, q["question"], sents)
            best = int(np.argmax(scores))
            hit = any(sents[best] in e for e in evidence)
            rows.append((idx % 2 == 0, float(scores[best]), hit))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--papers", type=int, default=100, help="first N papers of the dev file (all: 0)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--old-judge", type=Path, default=None, help="a checkout whose offline judge is reported beside this one")
    args = ap.parse_args()

    t0 = time.perf_counter()
    papers = load_papers(require_data(args.data), args.papers or None)
    embedder = OfflineEmbedder.from_config(ModelConfig(torch_threads=args.threads))
    scorer = SupportScorer(embedder)
    pairs = build_pairs(papers, args.seed)
    supports = scorer.support([p.source for p in pairs], [[p.claim] for p in pairs], floor=-1.0, contradict_similarity=-1.0)
    sim = np.array([row[0].similarity for row in supports])
    ovl = np.array([row[0].overlap for row in supports])
    backed = np.array([row[0].unsupported is None for row in supports])
    mism = np.array([row[0].mismatch is not None for row in supports])
    kind = np.array([p.kind for p in pairs])
    fit = np.array([p.fit for p in pairs])

    entail_set = np.isin(kind, ["pos", "rand", "hard"])
    is_pos = kind == "pos"
    m = fit & entail_set
    ts, to = fit_entailment(sim[m], ovl[m], backed[m], is_pos[m], None)
    vs, vo = fit_entailment(sim[m], ovl[m], backed[m], is_pos[m], 0.95)
    mc = fit & np.isin(kind, ["pos", "rand", "hard", "corrupt"])
    tc = fit_contradiction(sim[mc], mism[mc], (kind == "corrupt")[mc])

    print(f"QASPER dev: {len(papers)} papers, {len(pairs)} pairs "
          f"({', '.join(f'{k}={int((kind == k).sum())}' for k in KINDS)}); "
          f"fit on even papers, reported on odd papers; embedder passes in {embedder.precision}\n")
    print(f"judge_entail_similarity={ts}  judge_entail_overlap={to}  judge_contradict_similarity={tc}")
    print(f"verifier_confirm_similarity={vs}  verifier_confirm_overlap={vo}\n")
    print("| rule | negatives | precision | recall | F1 |\n|---|---|---|---|---|")
    held = ~fit
    for name, (a, b) in (("judge entails", (ts, to)), ("verifier confirms", (vs, vo))):
        for neg in ("rand", "hard", "rand+hard"):
            negs = neg.split("+")
            sel = held & (is_pos | np.isin(kind, negs))
            p, r, f = precision_recall((sim[sel] >= a) & (ovl[sel] >= b) & backed[sel], is_pos[sel])
            print(f"| {name} | {neg} | {p:.3f} | {r:.3f} | {f:.3f} |")
    contra = mism & (sim >= tc)
    entails = ~contra & (sim >= ts) & (ovl >= to) & backed
    sel = held & np.isin(kind, ["pos", "rand", "hard", "corrupt"])
    p, r, f = precision_recall(contra[sel], (kind == "corrupt")[sel])
    print(f"| judge contradicts | answer pairs (corrupted answers are the positives) | {p:.3f} | {r:.3f} | {f:.3f} |")
    sel = held & np.isin(kind, ["sent", "sent_corrupt"])
    p, r, f = precision_recall(contra[sel], (kind == "sent_corrupt")[sel])
    print(f"| judge contradicts | evidence sentences, clean vs corrupted | {p:.3f} | {r:.3f} | {f:.3f} |")
    print("\nheld-out share of each kind judged entails / contradicts:")
    for k in KINDS:
        sel = held & (kind == k)
        print(f"  {k:8s} entails {float(entails[sel].mean()):.3f}  contradicts {float(contra[sel].mean()):.3f}")

    extra = entailment_pairs(papers, args.seed)
    both = [p for p in pairs if p.kind in ("pos", "rand", "hard", "corrupt")] + extra
    labels = {"new judge": judge_labels(OfflineJudge(embedder, ModelConfig(torch_threads=args.threads)), both)}
    if args.old_judge is not None:
        labels = {"old judge": checkout_labels(args.old_judge, both, args.threads), **labels}
    print("\nentailment of the judge as it runs, held-out half:\n")
    print("\n".join(entailment_table(labels, np.array([p.kind for p in both]), ~np.array([p.fit for p in both]))))

    rows = answer_rows(papers, embedder)
    afit = np.array([r[0] for r in rows])
    ascore = np.array([r[1] for r in rows])
    ahit = np.array([r[2] for r in rows])
    grid = np.arange(0.0, 0.9, 0.01)
    youden = [youden_j(ascore[afit] >= t, ahit[afit]) for t in grid]
    ta = round(float(grid[int(np.argmax(youden))]), 2)
    attempt = ascore[~afit] >= ta
    print(f"\nanswer_min_score={ta} (max Youden J of attempting vs the best sentence being gold evidence): held-out "
          f"{int((~afit).sum())} questions, best sentence is evidence for {ahit[~afit].mean():.3f}, answerability {attempt.mean():.3f}, "
          f"attempted answers from gold evidence {ahit[~afit][attempt].mean() if attempt.any() else 0:.3f}, "
          f"abstentions where the best sentence is not evidence {(~ahit[~afit][~attempt]).mean() if (~attempt).any() else 0:.3f}")
    print(f"\n{embedder.encoded} texts embedded; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
