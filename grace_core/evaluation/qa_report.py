"""The outputs of ``grace eval qa``: report.md, metrics.json and the PNG plot, as bytes."""

from __future__ import annotations

import json

from grace_core.evaluation.figures import png_bytes, pyplot

METRIC_KEYS = ("accuracy", "answerability", "answer_f1", "evidence_f1")


def pct(v: float | None) -> str:
    """A share as a percentage with one decimal; an em dash for None."""
    return "—" if v is None else f"{100 * v:.1f}%"


def render_markdown(metrics: dict, *, data: str, backend: str, seconds: float) -> str:
    """The report: one table row per condition."""
    lines = [
        f"# Retrieval QA evaluation — {metrics['dataset']}",
        "",
        f"Data: `{data}` · questions: {metrics['n_questions']} · backend: {backend} · wall time: {seconds:.1f} s",
        "",
        "| condition | accuracy | answerability | Answer-F1 | Evidence-F1 |",
        "|---|---|---|---|---|",
    ]
    for c in metrics["conditions"]:
        lines.append(f"| {c['name']} | {pct(c['accuracy'])} | {pct(c['answerability'])} | {pct(c['answer_f1'])} | {pct(c['evidence_f1'])} |")
    lines += ["", "Accuracy: " + ("Answer-F1 ≥ 0.5 counts as correct (an abstention is the answer \"Unanswerable\")."
                                  if metrics["dataset"] == "qasper" else "exact match on the option (an abstention is wrong)."),
              "Answerability: share of questions the answerer attempted.", ""]
    return "\n".join(lines)


def plot(metrics: dict) -> bytes:
    """A grouped bar chart of the metrics per condition (PNG)."""
    plt = pyplot()
    keys = [k for k in METRIC_KEYS if any(c[k] is not None for c in metrics["conditions"])]
    names = [c["name"] for c in metrics["conditions"]]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(keys)
    for i, key in enumerate(keys):
        xs = [j + i * width for j in range(len(names))]
        ax.bar(xs, [c[key] or 0.0 for c in metrics["conditions"]], width, label=key)
    ax.set_xticks([j + width * (len(keys) - 1) / 2 for j in range(len(names))], names)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share")
    ax.set_title(f"{metrics['dataset']}: {metrics['n_questions']} questions")
    ax.legend()
    return png_bytes(fig)


def report_files(metrics: dict, *, data: str, backend: str, seconds: float) -> dict[str, bytes]:
    """report.md, metrics.json and qa_metrics.png."""
    return {
        "report.md": render_markdown(metrics, data=data, backend=backend, seconds=seconds).encode(),
        "metrics.json": (json.dumps(metrics, indent=2) + "\n").encode(),
        "qa_metrics.png": plot(metrics),
    }
