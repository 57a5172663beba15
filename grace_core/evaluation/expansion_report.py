"""The outputs of ``grace eval expansion`` as bytes: report.md, metrics.json and two PNG plots
(metrics per round; confusion matrices)."""

from __future__ import annotations

import json

from grace_core.evaluation.expansion import STATUS_ORDER, TRUTH_ORDER, VERDICT_ORDER
from grace_core.evaluation.figures import png_bytes, pyplot
from grace_core.evaluation.qa_report import pct

PAPER = {  # DESIGN §8: GPT-4o-mini responder, GPT-4.1 verifier, 100 QASPER test papers
    "qa_accuracy": "14.1% (abstract only) → 49.1% after round 3; full paper 33.6%",
    "pcr": "63.1% → 83.4%",
    "kf": "10.0 → 4.6 per paper",
    "yield": "56.3% → 69.5%",
    "cascade": "3.77 → 0.73 per paper",
    "grounding_precision": "97.6% (42 of 1,741 grounded claims were hallucinations); 85.5% of hallucinations kept out of Grounded",
}


def _num(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _matrix(title: str, matrix: dict[str, dict[str, int]], columns: tuple[str, ...]) -> list[str]:
    lines = [f"### {title}", "", "| status | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {s} | " + " | ".join(str(matrix[s][c]) for c in columns) + " |" for s in STATUS_ORDER]
    return [*lines, ""]


def render_markdown(metrics: dict, *, data: str, backend: str, settings: dict, seconds: float) -> str:
    """The report: the per-round table, the baselines, the confusion matrices and the paper's figures."""
    lines = [
        "# Expansion evaluation — QASPER",
        "",
        f"Data: `{data}` · papers: {metrics['n_papers']} · questions: {metrics['n_questions']} · backend: {backend} · "
        f"wall time: {seconds:.1f} s",
        "",
        "Settings: " + ", ".join(f"{k} = {v}" for k, v in settings.items()),
        "",
        "| round | QA accuracy | answerability | PCR | KF | deferred | yield | cascade | grounding precision |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in metrics["rounds"]:
        lines.append(
            f"| {r['round']} | {pct(r['qa_accuracy'])} | {pct(r['answerability'])} | {pct(r['pcr'])} | {_num(r['kf'])} | "
            f"{r['deferred']} | {pct(r['yield'])} | {_num(r['cascade'])} | {pct(r['grounding_precision'])} |"
        )
    base = metrics["baselines"]
    lines += [
        "",
        f"Baselines (same answerer): abstract only {pct(base['abstract_only'])}, full paper {pct(base['full_paper'])}.",
        "",
        "QA accuracy: Answer-F1 ≥ 0.5 with the round's Grounded claims as the sole context. PCR: grounded response "
        "claims / response claims. KF: Boundary claims per paper. Yield: confirmed / deferred in the round. Cascade: "
        "claims per paper that turned Grounded without review. Grounding precision: true / Grounded response claims, "
        "against the responder's recorded hallucinations.",
        "",
        "## Status after the last round against truth (response claims)",
        "",
    ]
    lines += _matrix("Against the verifier (full paper)", metrics["confusion_verifier"], VERDICT_ORDER)
    if metrics["confusion_truth"] is not None:
        lines += _matrix("Against the recorded hallucinations", metrics["confusion_truth"], TRUTH_ORDER)
        lines += [f"Hallucinated claims kept out of Grounded: {pct(metrics['hallucinations_kept_out'])}.", ""]
    else:
        lines += ["No gold truth: the responder is an LLM, whose hallucinations are not recorded.", ""]
    lines += ["## The paper's figures (DESIGN §8)", ""] + [f"- {k}: {v}" for k, v in PAPER.items()] + [""]
    return "\n".join(lines)


def plot_rounds(metrics: dict) -> bytes:
    """Shares per round (left) and per-paper counts per round (right), as PNG."""
    plt = pyplot()
    rounds = [r["round"] for r in metrics["rounds"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for key in ("qa_accuracy", "pcr", "yield", "grounding_precision"):
        pts = [(r["round"], r[key]) for r in metrics["rounds"] if r[key] is not None]
        if pts:
            left.plot(*zip(*pts), marker="o", label=key)
    for name, value in metrics["baselines"].items():
        if value is not None:
            left.axhline(value, linestyle="--", linewidth=1, color="grey" if name == "abstract_only" else "black", label=f"QA {name}")
    left.set_ylim(0, 1.05)
    left.set_xlabel("round")
    left.set_title("shares")
    left.legend(fontsize=8)
    for key in ("kf", "cascade"):
        pts = [(r["round"], r[key]) for r in metrics["rounds"] if r[key] is not None]
        if pts:
            right.plot(*zip(*pts), marker="o", label=key)
    right.set_xlabel("round")
    right.set_title("per paper")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xticks(rounds)
    fig.suptitle(f"QASPER expansion: {metrics['n_papers']} papers, {metrics['n_questions']} questions")
    return png_bytes(fig)


def plot_confusion(metrics: dict) -> bytes:
    """The confusion matrices (status × verifier verdict, status × gold truth) as PNG heat maps."""
    plt = pyplot()
    panels = [("verifier verdict", metrics["confusion_verifier"], VERDICT_ORDER)]
    if metrics["confusion_truth"] is not None:
        panels.append(("recorded truth", metrics["confusion_truth"], TRUTH_ORDER))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.8), squeeze=False)
    for ax, (title, matrix, columns) in zip(axes[0], panels, strict=True):
        values = [[matrix[s][c] for c in columns] for s in STATUS_ORDER]
        ax.imshow(values, cmap="Blues")
        top = max(max(row) for row in values) or 1
        for i, row in enumerate(values):
            for j, v in enumerate(row):
                ax.text(j, i, str(v), ha="center", va="center", color="white" if v > top / 2 else "black")
        ax.set_xticks(range(len(columns)), columns)
        ax.set_yticks(range(len(STATUS_ORDER)), STATUS_ORDER)
        ax.set_xlabel(title)
        ax.set_ylabel("system status")
    return png_bytes(fig)


def report_files(metrics: dict, *, data: str, backend: str, settings: dict, seconds: float) -> dict[str, bytes]:
    """report.md, metrics.json, expansion_rounds.png and confusion.png."""
    return {
        "report.md": render_markdown(metrics, data=data, backend=backend, settings=settings, seconds=seconds).encode(),
        "metrics.json": (json.dumps(metrics, indent=2) + "\n").encode(),
        "expansion_rounds.png": plot_rounds(metrics),
        "confusion.png": plot_confusion(metrics),
    }
