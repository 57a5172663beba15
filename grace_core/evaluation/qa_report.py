"""The text of ``grace eval qa``'s report.md."""

from __future__ import annotations

METRIC_KEYS = ("accuracy", "answerability", "answer_f1", "evidence_f1")


def pct(v: float | None) -> str:
    """A share as a percentage with one decimal; an em dash for None."""
    return "—" if v is None else f"{100 * v:.1f}%"


def skipped_section(skipped: list[dict]) -> list[str]:
    """The report's lines on the lines and documents the evaluation left out (none: no lines)."""
    if not skipped:
        return []
    lines = [f"## Skipped ({len(skipped)})", "", "Left out of the figures: lines that cannot be used and documents without a "
             "question that can be scored.", "", "| line | document | reason |", "|---|---|---|"]
    for s in skipped:
        reason = s["reason"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {s['line']} | {s['doc_id'] or '—'} | {reason} |")
    return [*lines, ""]


def retrieval_section(metrics: dict) -> list[str]:
    """The retrieval settings, abstention precision / recall per condition and the
    accuracy–coverage curve over the abstention threshold (QASPER; none when absent)."""
    lines: list[str] = []
    r = metrics.get("retrieval")
    if r:
        lines += [f"Retrieval (RAG: α = 1, GRACE: α = {r['alpha']:g}): the {r['retrieval_k']} passages of highest cosine at or above "
                  f"{r['relevance_floor']:g}, reranked, top {r['top']}; abstain when the best cosine is below {r['abstain_below']:g}.", ""]
    if metrics.get("grace_minus_rag"):
        lines += ["GRACE − RAG on the same questions (95% interval: paired bootstrap over papers, 2,000 samples):", "",
                  "| figure | difference | 95% interval |", "|---|---|---|"]
        for m, d in metrics["grace_minus_rag"].items():
            if d["difference"] is not None:
                lines.append(f"| {m} | {100 * d['difference']:+.2f} pt | [{100 * d['low']:+.2f}, {100 * d['high']:+.2f}] pt |")
        lines.append("")
    if metrics.get("abstention"):
        lines += ["## Abstention", "", "Negatives: the questions whose gold answers all say unanswerable.", "",
                  "| condition | abstained | unanswerable | precision | recall |", "|---|---|---|---|---|"]
        for name, a in metrics["abstention"].items():
            lines.append(f"| {name} | {a['abstained']} | {a['negatives']} | {pct(a['precision'])} | {pct(a['recall'])} |")
        lines.append("")
    if metrics.get("abstention_curve"):
        lines += ["GRACE as if it also abstained when the question's best relevance (cosine to its closest prior) is below t "
                  "(exact for t at or above the run's own threshold):", "",
                  "| t | coverage | accuracy | Answer-F1 | accuracy when attempted | abstention precision | abstention recall |",
                  "|---|---|---|---|---|---|---|"]
        for c in metrics["abstention_curve"]:
            lines.append(f"| {c['threshold']:.2f} | {pct(c['coverage'])} | {pct(c['accuracy'])} | {pct(c['answer_f1'])} | "
                         f"{pct(c['selective_accuracy'])} | {pct(c['precision'])} | {pct(c['recall'])} |")
        lines.append("")
    return lines


def render_markdown(metrics: dict, *, data: str, backend: str, seconds: float) -> str:
    """The report: one table row per condition, then what was skipped."""
    lines = [
        f"# Retrieval QA evaluation — {metrics['dataset']}",
        "",
        f"Data: `{data}` · questions: {metrics['n_questions']} · skipped: {len(metrics.get('skipped', []))} · "
        f"backend: {backend} · wall time: {seconds:.1f} s",
        "",
        "| condition | accuracy | answerability | Answer-F1 | Evidence-F1 |",
        "|---|---|---|---|---|",
    ]
    for c in metrics["conditions"]:
        lines.append(f"| {c['name']} | {pct(c['accuracy'])} | {pct(c['answerability'])} | {pct(c['answer_f1'])} | {pct(c['evidence_f1'])} |")
    lines += ["", "Accuracy: " + ("Answer-F1 ≥ 0.5 counts as correct (an abstention is the answer \"Unanswerable\")."
                                  if metrics["dataset"] == "qasper" else "exact match on the option (an abstention is wrong)."),
              "Answerability: share of questions the answerer attempted.", ""]
    lines += retrieval_section(metrics)
    lines += skipped_section(metrics.get("skipped", []))
    return "\n".join(lines)
