"""Why QA with the grounded claims stays at the abstract-only baseline offline: one measured
experiment per cause, on QASPER dev papers never used to tune the loop (the reporting half).

For every question with a reference answer, the same answerer (the product's, offline by
default) answers from one context per condition, and the answer is scored as ``grace eval``
scores it (Answer-F1, correct when ≥ 0.5). Beside it, *answer in context*: whether the context
holds the gold answer at all (≥ 80% of the normalised answer's tokens appear in it; yes/no and
unanswerable gold answers have no tokens to find and are left out of this column).

- **The answerer** — context ``evidence``: the question's gold evidence paragraphs. The right
  paragraph, nothing else: what the answerer makes of a perfect context.
- **The claims** — context ``evidence claims``: the same paragraphs decomposed into claims by
  the product's decomposer, one per paragraph, as the Grounded-claims context is built. The
  drop from ``evidence`` is what cutting text into claims loses.
- **The context** — ``grounded claims``: the paper's Grounded claims after the expansion
  protocol (``grace eval expansion``'s own run, :func:`grace_core.evaluation.expansion.run_paper`,
  3 rounds, budget 3), against ``abstract`` and ``full paper``: whether the knowledge the loop
  grounds holds the answers at all.

Run: ``.venv/bin/python -m benchmarks.qa_diagnosis [--papers 40] [--half reporting] [--data FILE]``
(needs the full QASPER dev file: ``GRACE_DATA_DIR``). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.shared_data import QASPER_DEV, require_data
from flows.settings import build_settings
from grace_core.documents import parse_batch
from grace_core.evaluation.expansion import expansion_papers, run_paper, split_paper, usable_questions
from grace_core.evaluation.qa_harness import ACCURACY_F1, gold_reference, select_documents, select_half
from grace_core.evaluation.qasper_metrics import UNANSWERABLE, normalize_answer, score_question
from grace_core.models.factory import build_roles
from grace_core.models.roles import AnswerRequest

CONDITIONS = ("abstract", "grounded claims", "full paper", "evidence", "evidence claims")
COVERED = 0.8


def answer_in(context: str, golds: list) -> bool | None:
    """Whether ``context`` holds one of the gold answers (≥ :data:`COVERED` of its tokens); None
    when no gold answer has tokens to look for (yes/no, unanswerable)."""
    words = set(normalize_answer(context).split())
    spans = [normalize_answer(g.answer).split() for g in golds if g.kind in ("extractive", "abstractive")]
    spans = [s for s in spans if s]
    if not spans:
        return None
    return any(sum(t in words for t in s) / len(s) >= COVERED for s in spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=QASPER_DEV)
    parser.add_argument("--papers", type=int, default=40)
    parser.add_argument("--half", default="reporting")
    args = parser.parse_args()
    data = require_data(args.data)
    batch = select_half(select_documents(parse_batch(data.read_bytes(), str(data), skip_invalid=True), "qasper")[0], args.half)
    settings = build_settings()
    roles = build_roles(settings)
    rows: dict[str, list[tuple[float, bool | None]]] = {c: [] for c in CONDITIONS}
    start = time.monotonic()
    papers = expansion_papers(batch)[: args.papers]
    for doc_id in papers:
        split = split_paper(batch, doc_id, 3)
        run = run_paper(batch, doc_id, roles, settings, rounds=3, budget=3.0, context_passages=settings.context_passages)
        for question, gold_json in usable_questions(batch, doc_id).select("question", "gold_json").iter_rows():
            golds = gold_reference("qasper", gold_json)
            evidence = sorted({e for g in golds for e in g.evidence})
            claims = [c for d in roles.decomposer.decompose(evidence) for c in d.claims] if evidence else []
            contexts = {"abstract": split.abstract, "grounded claims": run.contexts[-1], "full paper": split.full_text,
                        "evidence": "\n\n".join(evidence), "evidence claims": "\n\n".join(claims)}
            answers = roles.answerer.answer([AnswerRequest(question, contexts[c]) for c in CONDITIONS])
            for c, a in zip(CONDITIONS, answers, strict=True):
                text = UNANSWERABLE if a.abstained or a.text is None else a.text
                rows[c].append((score_question(text, [], golds)[0], answer_in(contexts[c], golds)))
    n = len(rows["abstract"])
    print(f"QASPER dev, {args.half} half, first {len(papers)} papers, {n} questions, backend {roles.backend}, "
          f"{time.monotonic() - start:.0f} s\n")
    print("| context | accuracy (Answer-F1 ≥ 0.5) | mean Answer-F1 | answer in context |")
    print("|---|---|---|---|")
    for c in CONDITIONS:
        f1 = [f for f, _ in rows[c]]
        found = [x for _, x in rows[c] if x is not None]
        print(f"| {c} | {sum(f >= ACCURACY_F1 for f in f1) / n:.3f} | {sum(f1) / n:.3f} | "
              f"{sum(found) / len(found):.3f} (of {len(found)}) |")
    print("\n" + json.dumps({"papers": len(papers), "questions": n}))


if __name__ == "__main__":
    main()
