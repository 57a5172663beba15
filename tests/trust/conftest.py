"""A small lake written table by table (real Delta tables, real catalog): three documents,
two scored rounds, deferrals answered by two reviewers who disagree once, and model calls."""

from __future__ import annotations

import json

import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

from flows.score import fill_scoring_counts
from grace_core.decisions import decide
from grace_core.reliability import estimate_reliability
from storage.config import LakeConfig
from storage.lake import Lake

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
DOCS = ("paper-a", "paper-b", "paper-c")
PER_DOC = 8
# per round: claim index (within a document) → status; the rest are boundary
STATUS = {
    1: {0: "grounded", 1: "grounded", 2: "grounded", 7: "refuted"},
    2: {0: "grounded", 1: "grounded", 2: "grounded", 3: "grounded", 4: "grounded", 7: "refuted"},
}
# round-1 deferrals: (doc, claim index) → {reviewer: verdict}
DISPATCH_COST = {"candidates": 9, "deferred": 5, "spent": 1.0, "budget": 3.0, "blocked_by_cost": 3, "shortfall_min": 0.05,
                 "shortfall_max": 0.4, "over_budget": 1}
"""What round 1's dispatch recorded of its budget (grace_core.selection.CostReport)."""

VOTES = {
    ("paper-a", 3): {"alice": "confirm", "verifier": "confirm"},
    ("paper-a", 4): {"alice": "confirm", "verifier": "confirm"},
    ("paper-b", 5): {"alice": "reject", "verifier": "confirm"},
    ("paper-c", 6): {"alice": "reject", "verifier": "reject"},
}


def cid(doc: str, i: int) -> str:
    return f"c:{doc}-{i}"


def _claims() -> pl.DataFrame:
    rows = [{"doc_id": d, "claim_id": cid(d, i), "round": 1, "source_id": f"r:{d}:{i % 2}", "source_kind": "response",
             "ord": i, "text": f"Claim {i} of {d} says something <checkable> & specific."} for d in DOCS for i in range(PER_DOC)]
    return pl.DataFrame(rows).with_columns(pl.col("round", "ord").cast(pl.Int32))


def _scores(round_: int) -> pl.DataFrame:
    rows = []
    for d in DOCS:
        for i in range(PER_DOC):
            status = "refuted" if (round_, d, i) == (2, "paper-c", 6) else STATUS[round_].get(i, "boundary")  # rejected in round 1
            rows.append({
                "doc_id": d, "claim_id": cid(d, i), "in_prior": status == "grounded", "contradicted": status == "refuted",
                "rejected": (round_, d, i) == (2, "paper-c", 6), "closeness": 0.1 * i, "closeness_norm": i / (PER_DOC - 1), "status": status,
                "novelty": float(i), "priority": 0.1 * i + 0.01 * DOCS.index(d) if status == "boundary" else None,
                "confidence": 0.5, "round": round_,
            })
    return pl.DataFrame(rows).with_columns(pl.col("round").cast(pl.Int32))


def _calls(round_: int) -> pl.DataFrame:
    rows = [{"key": f"k{round_}-{role}-{n}", "role": role, "round": round_, "model": "offline", "request": "{}", "response": "{}",
             "prompt_tokens": 100 * (n + 1), "completion_tokens": 20, "cost_usd": 0.001 * (n + 1),
             "outcome": "ok" if n else "timeout", "created_at": T0} for role in ("responder", "judge", "verifier") for n in range(3)]
    return pl.DataFrame(rows).with_columns(pl.col("round").cast(pl.Int32))


def write_small_lake(root: Path) -> Lake:
    lake = Lake.open(LakeConfig(lake=str(root)))
    claims = _claims()
    lake.commit("build/round=1", {"claims": claims, "scores": _scores(1), "llm_calls": _calls(1)})
    deferrals = pl.DataFrame([
        {"doc_id": d, "claim_id": cid(d, i), "round": 1, "reviewer": r, "priority": 0.5, "confidence": 0.1, "cost": 0.2,
         "gain": 1.0, "rank": k + 1, "deadline": T0 + timedelta(days=3), "created_at": T0}
        for k, ((d, i), votes) in enumerate(VOTES.items()) for r in votes
    ] + [{"doc_id": "paper-b", "claim_id": cid("paper-b", 6), "round": 1, "reviewer": "alice", "priority": 0.6,
          "confidence": 0.1, "cost": 0.2, "gain": 1.2, "rank": 5, "deadline": T0 + timedelta(days=3), "created_at": T0}])
    verdicts = pl.DataFrame([
        {"doc_id": d, "claim_id": cid(d, i), "round": 1, "reviewer": r, "verdict": v, "seconds_spent": 20.0 if r == "alice" else None,
         "channel": "file" if r == "alice" else "verifier", "created_at": T0 + timedelta(hours=1)}
        for (d, i), votes in VOTES.items() for r, v in votes.items()
    ])
    dispatch = pl.DataFrame([{"round": 1, "stage": "dispatch", "started_at": T0, "finished_at": T0, "n_documents": 3,
                              "detail_json": json.dumps({"cost": DISPATCH_COST})}]).with_columns(pl.col("round").cast(pl.Int32))
    lake.commit("dispatch/round=1", {"deferrals": deferrals.with_columns(pl.col("round", "rank").cast(pl.Int32)),
                                     "verdicts": verdicts.with_columns(pl.col("round").cast(pl.Int32)), "rounds": dispatch})
    decisions = decide(verdicts).with_columns(round=pl.lit(2, pl.Int32))
    reliability = estimate_reliability(verdicts).with_columns(round=pl.lit(2, pl.Int32))
    lake.commit("settle/round=2", {"decisions": decisions, "scores": _scores(2), "llm_calls": _calls(2), "reviewer_reliability": reliability})
    fill_scoring_counts(lake, 1000)  # the counts round_metrics sums, as the score flow stores them
    return lake


@pytest.fixture(scope="session")
def small_lake_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small lake written once for the session; :func:`small_lake` copies it."""
    return Path(write_small_lake(tmp_path_factory.mktemp("small-lake") / "lake").uri)


@pytest.fixture()
def small_lake(small_lake_template: Path, tmp_path: Path) -> Lake:
    """A small lake of this test's own: a copy of :func:`small_lake_template` (its catalog,
    which names the template's files, is rebuilt by the first query that finds it moved)."""
    root = shutil.copytree(small_lake_template, tmp_path / "lake", symlinks=True)
    return Lake.open(LakeConfig(lake=str(root)))
