"""Evaluation figures as long table rows (one figure per row), the shape the lake's
``evaluations`` table stores so any run can be compared with SQL."""

from __future__ import annotations

import polars as pl

RECORD_COLUMNS = {"round": pl.Int32, "name": pl.Utf8, "metric": pl.Utf8, "value": pl.Float64}


def _rows(name: str, figures: dict, round_id: int | None = None) -> list[dict]:
    return [{"round": round_id, "name": name, "metric": k, "value": None if v is None else float(v)}
            for k, v in figures.items() if not isinstance(v, (str, dict, list))]


def qa_records(metrics: dict) -> pl.DataFrame:
    """``round, name, metric, value`` of a ``grace eval qa`` metrics object: one row per
    condition and figure (name = the condition), plus the question count (name ``run``)."""
    rows = _rows("run", {"n_questions": metrics["n_questions"]})
    for condition in metrics["conditions"]:
        rows += _rows(condition["name"], condition)
    return pl.DataFrame(rows, schema=RECORD_COLUMNS)


def expansion_records(metrics: dict) -> pl.DataFrame:
    """``round, name, metric, value`` of a ``grace eval expansion`` metrics object: the figures
    of each round (name ``round``), the baselines (name ``baseline``), each confusion cell
    (name ``confusion_verifier`` / ``confusion_truth`` over out-of-distribution claims, the same
    prefixed ``all_response_claims/`` over all response claims; metric ``status/label``) and the
    run's counts (name ``run``; ``spend_cap_reached`` as 0/1)."""
    rows = _rows("run", {k: metrics[k] for k in ("n_papers", "n_questions", "hallucinations_kept_out", "spend_cap_reached")})
    rows += _rows("all_response_claims", {"hallucinations_kept_out": metrics["all_response_claims"]["hallucinations_kept_out"]})
    for r in metrics["rounds"]:
        rows += _rows("round", {k: v for k, v in r.items() if k != "round"}, r["round"])
    rows += _rows("baseline", metrics["baselines"])
    for prefix, figures in (("", metrics), ("all_response_claims/", metrics["all_response_claims"])):
        for name in ("confusion_verifier", "confusion_truth"):
            for status, cells in (figures[name] or {}).items():
                rows += _rows(prefix + name, {f"{status}/{label}": n for label, n in cells.items()})
    return pl.DataFrame(rows, schema=RECORD_COLUMNS)
