"""The files of ``grace eval`` reports: the markdown from grace_core, metrics.json, and PNG
plots drawn with matplotlib (kept out of grace_core, whose imports are the domain's)."""

from __future__ import annotations

import io
import json
from typing import Any

from grace_core.evaluation.budget_curve import render_curve_markdown
from grace_core.evaluation.expansion import TRUTH_LABELS
from grace_core.evaluation.expansion_report import render_markdown as expansion_markdown
from grace_core.evaluation.qa_report import METRIC_KEYS
from grace_core.evaluation.qa_report import render_markdown as qa_markdown
from grace_core.decisions import VERDICTS
from grace_core.status import STATUSES


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig: Any) -> bytes:
    """The figure as PNG bytes (100 dpi); the figure is closed."""
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    pyplot().close(fig)
    return buf.getvalue()


def plot_qa(metrics: dict) -> bytes:
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


def plot_abstention(metrics: dict) -> bytes:
    """The accuracy–coverage curve over the abstention threshold, and abstention precision /
    recall against it (PNG)."""
    plt = pyplot()
    curve = metrics["abstention_curve"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot([c["coverage"] for c in curve], [c["selective_accuracy"] or 0.0 for c in curve], marker="o", label="accuracy when attempted")
    left.plot([c["coverage"] for c in curve], [c["accuracy"] for c in curve], marker=".", label="accuracy (abstentions scored)")
    left.set_xlabel("coverage (share attempted)")
    left.set_ylim(0, 1)
    left.set_title("accuracy–coverage")
    left.legend(fontsize=8)
    ts = [c["threshold"] for c in curve]
    for key in ("precision", "recall", "coverage"):
        right.plot(ts, [c[key] if c[key] is not None else float("nan") for c in curve], marker="o", label=key)
    chosen = metrics.get("retrieval", {}).get("abstain_below")
    if chosen is not None:
        right.axvline(chosen, linestyle="--", color="grey", linewidth=1, label="abstain_below")
    right.set_xlabel("abstention threshold on the best cosine")
    right.set_ylim(0, 1.05)
    right.set_title("abstention (negatives: unanswerable)")
    right.legend(fontsize=8)
    fig.suptitle(f"{metrics['dataset']}: GRACE, {metrics['n_questions']} questions")
    return png_bytes(fig)


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
    panels = [("verifier verdict", metrics["confusion_verifier"], VERDICTS)]
    if metrics["confusion_truth"] is not None:
        panels.append(("recorded truth", metrics["confusion_truth"], TRUTH_LABELS))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.8), squeeze=False)
    for ax, (title, matrix, columns) in zip(axes[0], panels, strict=True):
        values = [[matrix[s][c] for c in columns] for s in STATUSES]
        ax.imshow(values, cmap="Blues")
        top = max(max(row) for row in values) or 1
        for i, row in enumerate(values):
            for j, v in enumerate(row):
                ax.text(j, i, str(v), ha="center", va="center", color="white" if v > top / 2 else "black")
        ax.set_xticks(range(len(columns)), columns)
        ax.set_yticks(range(len(STATUSES)), STATUSES)
        ax.set_xlabel(title)
        ax.set_ylabel("system status")
    return png_bytes(fig)


def _json(metrics: dict) -> bytes:
    return (json.dumps(metrics, indent=2) + "\n").encode()


def qa_report_files(metrics: dict, *, data: str, backend: str, seconds: float) -> dict[str, bytes]:
    """report.md, metrics.json and qa_metrics.png of ``grace eval qa`` (and abstention.png for QASPER)."""
    files = {
        "report.md": qa_markdown(metrics, data=data, backend=backend, seconds=seconds).encode(),
        "metrics.json": _json(metrics),
        "qa_metrics.png": plot_qa(metrics),
    }
    if metrics.get("abstention_curve"):
        files["abstention.png"] = plot_abstention(metrics)
    return files


def expansion_report_files(metrics: dict, *, data: str, backend: str, settings: dict, seconds: float) -> dict[str, bytes]:
    """report.md, metrics.json, expansion_rounds.png and confusion.png of ``grace eval expansion``."""
    return {
        "report.md": expansion_markdown(metrics, data=data, backend=backend, settings=settings, seconds=seconds).encode(),
        "metrics.json": _json(metrics),
        "expansion_rounds.png": plot_rounds(metrics),
        "confusion.png": plot_confusion(metrics),
    }


def plot_budget_curve(curve: dict) -> bytes:
    """KF and PCR per round for each budget swept, and each budget's review seconds over the
    protocol against the KF it ends with (PNG)."""
    plt = pyplot()
    fig, (kf, pcr, trade) = plt.subplots(1, 3, figsize=(14, 4))
    for b in curve["budgets"]:
        rounds = [r["round"] for r in b["rows"]]
        label = f"budget {b['budget']:g}"
        kf.plot(rounds, [r["kf"] for r in b["rows"]], marker="o", label=label)
        pcr.plot(rounds, [r["pcr"] for r in b["rows"]], marker="o", label=label)
        trade.scatter([sum(r["review_seconds"] for r in b["rows"]) / 3600], [b["rows"][-1]["kf"]], label=label)
    kf.set_title("KF (Boundary claims per paper)")
    pcr.set_title("PCR")
    pcr.set_ylim(0, 1.05)
    trade.set_title("review hours (all papers) → last KF")
    trade.set_xlabel("review hours")
    for ax in (kf, pcr):
        ax.set_xlabel("round")
        ax.set_xticks(sorted({r["round"] for b in curve["budgets"] for r in b["rows"]}))
    for ax in (kf, pcr, trade):
        ax.legend(fontsize=8)
    shrinking = curve["shrinking_budget"]
    fig.suptitle("budget curve: " + (f"KF falls round to round from budget {shrinking:g}" if shrinking is not None else
                                     "KF falls round to round at none of the budgets"))
    return png_bytes(fig)


def budget_curve_files(curve: dict, *, data: str, settings: dict) -> dict[str, bytes]:
    """budget_curve.md, budget_curve.json and budget_curve.png of a ``grace eval expansion`` budget sweep."""
    return {
        "budget_curve.md": render_curve_markdown(curve, data=data, settings=settings).encode(),
        "budget_curve.json": _json(curve),
        "budget_curve.png": plot_budget_curve(curve),
    }
