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
    lines += skipped_section(metrics.get("skipped", []))
    return "\n".join(lines)
