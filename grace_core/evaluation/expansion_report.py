"""The text of ``grace eval expansion``'s report.md."""

from __future__ import annotations

from grace_core.evaluation.expansion import TRUTH_LABELS
from grace_core.evaluation.qa_report import pct, skipped_section
from grace_core.decisions import VERDICTS
from grace_core.status import STATUSES

PAPER = {  # DESIGN §8: GPT-4o-mini responder, GPT-4.1 verifier, 100 QASPER test papers
    "qa_accuracy": "14.1% (abstract only) → 49.1% after round 3; full paper 33.6%",
    "pcr": "63.1% → 83.4%",
    "kf": "10.0 → 4.6 per paper",
    "yield": "56.3% → 69.5%",
    "cascade": "3.77 → 0.73 per paper",
    "grounding_precision": "97.6% (42 of 1,741 grounded claims were hallucinations); 85.5% of hallucinations kept out of Grounded",
}


def number(v: float | None, digits: int = 2) -> str:
    """A figure with ``digits`` decimals; an em dash for None."""
    return "—" if v is None else f"{v:.{digits}f}"


def count(v: int | None) -> str:
    """A count; an em dash for None (round 0 has no selection)."""
    return "—" if v is None else str(v)


def _matrix(title: str, matrix: dict[str, dict[str, int]], columns: tuple[str, ...]) -> list[str]:
    lines = [f"### {title}", "", "| status | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {s} | " + " | ".join(str(matrix[s][c]) for c in columns) + " |" for s in STATUSES]
    return [*lines, ""]


def render_markdown(metrics: dict, *, data: str, backend: str, settings: dict, seconds: float) -> str:
    """The report: the per-round table, the baselines, the confusion matrices and the paper's figures."""
    lines = [
        "# Expansion evaluation — QASPER",
        "",
        f"Data: `{data}` · papers: {metrics['n_papers']} · questions: {metrics['n_questions']} · "
        f"skipped: {len(metrics.get('skipped', []))} · backend: {backend} · wall time: {seconds:.1f} s",
        "",
        "Settings: " + ", ".join(f"{k} = {v}" for k, v in settings.items()),
        "",
        "| round | QA accuracy | answerability | PCR | KF | candidates | blocked by cost | deferred | yield | cascade | grounding precision | OOD grounding precision |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in metrics["rounds"]:
        lines.append(
            f"| {r['round']} | {pct(r['qa_accuracy'])} | {pct(r['answerability'])} | {pct(r['pcr'])} | {number(r['kf'])} | "
            f"{count(r.get('candidates'))} | {count(r.get('blocked_by_cost'))} | "
            f"{r['deferred']} | {pct(r['yield'])} | {number(r['cascade'])} | {pct(r['grounding_precision'])} | "
            f"{pct(r['grounding_precision_ood'])} |"
        )
    base = metrics["baselines"]
    lines += [
        "",
        f"Baselines (same answerer): abstract only {pct(base['abstract_only'])}, full paper {pct(base['full_paper'])}.",
        "",
        "QA accuracy: Answer-F1 ≥ 0.5 with the round's Grounded claims as the sole context. PCR: grounded response "
        "claims / response claims. KF: Boundary claims per paper. Yield: confirmed / deferred in the round. Cascade: "
        "claims per paper that turned Grounded without review. Candidates: Boundary claims open for review; blocked by cost: "
        "those failing (1 − σ)·Pri > Cost, which no budget defers. Grounding precision: true / Grounded response claims, "
        "against the responder's recorded hallucinations; OOD: response claims first seen in round 1 or later "
        "(answered from held-out sections).",
        "",
    ]
    if metrics.get("spend_cap_reached"):
        lines += ["**The spend cap stopped model calls during this run**: some judgements and verdicts are missing.", ""]
    everything = metrics["all_response_claims"]
    for title, figures in (("out-of-distribution response claims (first seen in round ≥ 1)", metrics),
                           ("all response claims", everything)):
        lines += [f"## Status after the last round: {title}", ""]
        lines += _matrix("Against the verifier (full paper)", figures["confusion_verifier"], VERDICTS)
        if figures["confusion_truth"] is not None:
            lines += _matrix("Against the recorded hallucinations", figures["confusion_truth"], TRUTH_LABELS)
            lines += [f"Hallucinated claims kept out of Grounded: {pct(figures['hallucinations_kept_out'])}.", ""]
        else:
            lines += ["No gold truth: the responder is an LLM, whose hallucinations are not recorded.", ""]
    lines += skipped_section(metrics.get("skipped", []))
    lines += ["## The paper's figures (DESIGN §8)", ""] + [f"- {k}: {v}" for k, v in PAPER.items()] + [""]
    return "\n".join(lines)
