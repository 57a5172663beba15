"""The budget curve of ``grace eval expansion --budget B1,B2,…``: the expansion protocol's
figures per round for each review budget swept, and the smallest budget at which the frontier
shrinks from round to round as in the paper.

For each budget B (cost units per paper and round) and protocol round r ≥ 1 the curve keeps KF,
PCR, yield, cascade, the Boundary candidates and those the rule (1 − σ)·Pri > Cost blocked (no
budget defers them), the claims deferred and the **review seconds** they would take people:
``deferred × s̄``, s̄ = ``GRACE_REVIEW_SECONDS`` (30 s, the product's expected seconds per claim
before any timed verdict; the evaluation's own reviewer, the verifier, takes none).

**The frontier shrinks** at budget B when KF falls from each protocol round to the next,
KF_r < KF_{r−1} for r = 2 … R (round 1 is the first with review, so its KF is the start), as the
paper's KF falls 10.0 → 4.6 (DESIGN §8). Consolidation rounds are left out of the rule (they add
no sections) but kept in the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

CURVE_KEYS = ("kf", "pcr", "yield", "cascade", "candidates", "blocked_by_cost", "deferred", "review_seconds")


def parse_budgets(text: str) -> list[float]:
    """``"1,3,10,30"`` → ``[1.0, 3.0, 10.0, 30.0]`` (sorted, each once); a value that is not a
    number ≥ 0 raises :class:`ValueError` naming it."""
    out = set()
    for part in text.split(","):
        try:
            value = float(part.strip())
        except ValueError:
            raise ValueError(f"budget {part.strip()!r} is not a number") from None
        if not value >= 0 or value == float("inf"):
            raise ValueError(f"budget {part.strip()!r} must be a finite number ≥ 0")
        out.add(value)
    return sorted(out)


def shrinks(kf: Sequence[float | None]) -> bool:
    """Whether KF falls from each round to the next (``kf``: protocol rounds 1 … R in order; a
    single round or a missing value: False)."""
    known = [k for k in kf if k is not None]
    return len(known) == len(kf) >= 2 and all(b < a for a, b in zip(known, known[1:]))


def budget_curve(runs: Mapping[float, dict], review_seconds: float) -> dict:
    """The curve from each budget's metrics (``grace eval expansion``'s metrics.json): per
    budget, ``rows`` (round, consolidation and :data:`CURVE_KEYS`) and ``shrinks``; and
    ``shrinking_budget``, the smallest budget whose frontier shrinks (None: none of them)."""
    budgets = []
    for budget in sorted(runs):
        metrics = runs[budget]
        rows = [
            {"round": r["round"], "consolidation": r["consolidation"], **{k: r.get(k) for k in CURVE_KEYS if k != "review_seconds"},
             "review_seconds": r["deferred"] * review_seconds}
            for r in metrics["rounds"] if r["round"] >= 1
        ]
        protocol = [r["kf"] for r in rows if not r["consolidation"]]
        budgets.append({"budget": budget, "n_papers": metrics["n_papers"], "rows": rows, "shrinks": shrinks(protocol)})
    shrinking = [b["budget"] for b in budgets if b["shrinks"]]
    return {"review_seconds_per_claim": review_seconds, "budgets": budgets, "shrinking_budget": shrinking[0] if shrinking else None}


def render_curve_markdown(curve: dict, *, data: str, settings: Mapping[str, object]) -> str:
    """budget_curve.md: one table row per budget and round, and the budget at which the frontier shrinks."""
    def fig(v: float | None, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    lines = [
        "# Budget curve — QASPER expansion", "",
        f"Data: `{data}` · " + ", ".join(f"{k} = {v}" for k, v in settings.items()), "",
        "| budget | round | KF | PCR | yield | cascade | candidates | blocked by cost | deferred | review seconds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b in curve["budgets"]:
        for r in b["rows"]:
            label = f"{r['round']}{' (consolidation)' if r['consolidation'] else ''}"
            lines.append(f"| {fig(b['budget'], 'g')} | {label} | {fig(r['kf'], '.2f')} | {fig(r['pcr'], '.3f')} | "
                         f"{fig(r['yield'], '.3f')} | {fig(r['cascade'], '.2f')} | {fig(r['candidates'], 'd')} | {fig(r['blocked_by_cost'], 'd')} | "
                         f"{r['deferred']} | {fig(r['review_seconds'], ',.0f')} |")
    shrinking = curve["shrinking_budget"]
    lines += [
        "",
        f"Review seconds: deferred claims × {curve['review_seconds_per_claim']:g} s (GRACE_REVIEW_SECONDS), what people "
        "would spend; the evaluation's verifier takes none. Budget: review-cost units per paper and round.",
        "",
        ("The frontier shrinks (KF falls from each protocol round to the next, as in the paper) from budget "
         f"**{shrinking:g}** per paper and round." if shrinking is not None else
         "At none of these budgets does KF fall from each protocol round to the next."),
        "",
    ]
    return "\n".join(lines)
