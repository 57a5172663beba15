"""Review-loop fixtures: small synthetic lakes whose boundary claims and their review costs are
known exactly.

The Prefect server is the session's ``prefect_server`` (tests/conftest.py), started with the
first test that asks for it (``pytest.mark.usefixtures("prefect_server")``): the pure unit
tests of this folder never start one.

A synthetic lake holds one document ``d1`` with two prior sections (round 0), their atomic
claims (the prior units, entailed by their section), one response (round 1) and :data:`CLAIMS`
decomposed from it (entailed by the response only), scored Boundary with priority 1 and
confidence 0 in each requested round. Every claim's text equals a
prior unit, so its embedding distance to the nearest prior is 0 and its review cost is exactly
ε + μ·t (DESIGN §4).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from collections.abc import Callable

import polars as pl
import pytest

from flows.params import StageParams
from flows.reviewers import register, sign_verdict_file
from storage.lake import Lake
from tests.storage.conftest import make_bucket  # noqa: F401

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
DOC = "d1"
PRIORS = {
    "p1": "The parser was trained on the Penn Treebank corpus. Training ran for ten epochs on one GPU.",
    "p2": "The parser reaches 91 percent accuracy on the test set. It was released under the MIT license.",
}
UNITS = {  # atomic claims of the priors (the "prior units" of review costs and nearest priors)
    "u1": ("p1", "The parser was trained on the Penn Treebank corpus."),
    "u2": ("p1", "Training ran for ten epochs on one GPU."),
    "u3": ("p2", "The parser reaches 91 percent accuracy on the test set."),
    "u4": ("p2", "The parser was released under the MIT license."),
}
CLAIMS = {"c:1": UNITS["u1"][1], "c:2": UNITS["u2"][1], "c:3": UNITS["u3"][1], "c:4": UNITS["u4"][1]}
RESPONSE = " ".join(CLAIMS.values())


def scores(round_id: int, claim_ids: list[str] | None = None, doc: str = DOC) -> pl.DataFrame:
    """Score rows of ``round_id`` of document ``doc``: the claims Boundary with priority 1 and confidence 0."""
    ids = claim_ids or list(CLAIMS)
    n = len(ids)
    return pl.DataFrame({
        "doc_id": [doc] * n, "claim_id": ids, "in_prior": [False] * n, "contradicted": [False] * n, "rejected": [False] * n,
        "closeness": [0.5] * n, "closeness_norm": [0.5] * n, "status": ["boundary"] * n, "betweenness": [0.0] * n,
        "betweenness_norm": [0.0] * n, "novelty": [1.0] * n, "novelty_norm": [0.5] * n, "priority": [1.0] * n,
        "confidence": [0.0] * n, "round": [round_id] * n,
    })


def graph_rows(doc: str = DOC) -> dict[str, pl.DataFrame]:
    """The sources (round 0 priors, the round 1 response), claims and decomposition edges of
    one synthetic document ``doc``."""
    n = len(UNITS) + len(CLAIMS)
    return {
        "sources": pl.DataFrame({
            "doc_id": [doc] * 3, "source_id": ["p1", "p2", "r1"], "source_kind": ["prior", "prior", "response"],
            "round": [0, 0, 1], "name": ["Abstract", "Introduction", "sample 1"], "ord": [0, 1, 0],
            "text": [PRIORS["p1"], PRIORS["p2"], RESPONSE],
        }),
        "claims": pl.DataFrame({
            "doc_id": [doc] * n,
            "claim_id": [f"u:{u}" for u in UNITS] + list(CLAIMS),
            "round": [0] * len(UNITS) + [1] * len(CLAIMS),
            "source_id": [p for p, _ in UNITS.values()] + ["r1"] * len(CLAIMS),
            "source_kind": ["prior"] * len(UNITS) + ["response"] * len(CLAIMS),
            "text": [t for _, t in UNITS.values()] + list(CLAIMS.values()),
        }),
        "edges": pl.DataFrame({  # decomposition edges: each prior entails its units, the response its claims
            "doc_id": [doc] * n,
            "source_id": [p for p, _ in UNITS.values()] + ["r1"] * len(CLAIMS),
            "source_kind": ["prior"] * len(UNITS) + ["response"] * len(CLAIMS),
            "claim_id": [f"u:{u}" for u in UNITS] + list(CLAIMS),
            "label": ["entails"] * n,
            "round": [0] * len(UNITS) + [1] * len(CLAIMS),
        }),
    }


def build_lake(root: str, rounds: tuple[int, ...] = (1,), docs: tuple[str, ...] = (DOC,)) -> Lake:
    """A synthetic lake at ``root`` (a folder, or an s3:// prefix reached through the
    ``GRACE_S3_*`` environment) of the documents ``docs`` (each :func:`graph_rows`), scored in
    ``rounds``: scores only, as a lake scored before ``scoring_counts`` existed (the flows
    back-fill them)."""
    lake = Lake.open(StageParams(round_id=1, lake=root).settings())
    parts = [graph_rows(doc) for doc in docs]
    lake.commit("fixture/documents", {name: pl.concat([p[name] for p in parts]) for name in parts[0]})
    for r in rounds:
        lake.commit(f"fixture/scores/round={r}", {"scores": pl.concat([scores(r, doc=doc) for doc in docs])})
    return lake


_KEYS: dict[tuple[str, str], str] = {}


def key_of(lake: Lake, reviewer: str) -> str:
    """``reviewer``'s key in ``lake``, registered (:func:`flows.reviewers.register`) on first use."""
    if (lake.uri, reviewer) not in _KEYS:
        _KEYS[(lake.uri, reviewer)] = register(lake, reviewer, T0)
    return _KEYS[(lake.uri, reviewer)]


def signed_as(lake: Lake, reviewer: str, name: str, data: bytes | str) -> bytes:
    """Verdict file ``name`` (``data``) signed by ``reviewer`` (registered on first use), as
    ``grace review sign`` signs it."""
    raw = data.encode() if isinstance(data, str) else data
    return sign_verdict_file(lake, name, raw, reviewer, key_of(lake, reviewer))[0]


def stage(lake: Lake | str, round_id: int, now: datetime = T0, **options: object) -> StageParams:
    """Stage parameters for ``round_id`` on ``lake`` at time ``now`` (budget 10: every claim fits)."""
    root = lake if isinstance(lake, str) else lake.uri
    return StageParams(round_id=round_id, lake=root, now=now, budget=options.pop("budget", 10.0), **options)


@pytest.fixture
def local_lake(tmp_path: Path) -> Lake:
    """A synthetic lake in a temporary folder, scored in round 1."""
    return build_lake(str(tmp_path / "lake"))


@pytest.fixture
def reviewers(monkeypatch: pytest.MonkeyPatch):
    """Set the review settings through the environment, as a deployment would:
    ``reviewers("alice", "bob", overlap=2, use_verifier=False)``."""
    def configure(*names: str, overlap: int = 1, use_verifier: bool = False, deadline_hours: float | None = None,
                  deadline_rounds: int | None = None) -> None:
        monkeypatch.setenv("GRACE_REVIEWERS", "[" + ", ".join(f'"{n}"' for n in names) + "]")
        monkeypatch.setenv("GRACE_OVERLAP", str(overlap))
        monkeypatch.setenv("GRACE_USE_VERIFIER", str(use_verifier).lower())
        if deadline_hours is not None:
            monkeypatch.setenv("GRACE_DEADLINE_HOURS", str(deadline_hours))
        if deadline_rounds is not None:
            monkeypatch.setenv("GRACE_DEADLINE_ROUNDS", str(deadline_rounds))
    return configure


ACCOUNTING = ("n_deferred", "n_confirmed", "n_rejected", "n_abstained", "n_pending")
"""The per-deferral counts of ``round_metrics`` that the scripted lakes follow round by round."""


def answer_deferrals(lake: Lake, round_id: int, vote_of: Callable[[str, str], str | None], at: datetime, seconds: float) -> int:
    """The scripted reviewers' answers (``vote_of(reviewer, claim_id)``: a verdict, or None for
    no answer) to round ``round_id``'s deferrals, written to ``verdicts`` at ``at`` in one
    commit (who may vote, and through which channel, is tested in test_identity.py); the number
    of votes."""
    deferrals = lake.read("deferrals", rounds=[round_id], columns=["doc_id", "claim_id", "round", "reviewer"])
    rows = [{**d, "verdict": v, "seconds_spent": seconds, "note": None, "channel": "file", "created_at": at}
            for d in deferrals.to_dicts() if (v := vote_of(d["reviewer"], d["claim_id"]))]
    if rows:
        lake.commit(f"scripted/round={round_id}", {"verdicts": pl.DataFrame(rows).with_columns(pl.col("round").cast(pl.Int32))})
    return len(rows)


def accounting(lake: Lake) -> dict[int, dict]:
    """``round_metrics``' :data:`ACCOUNTING` counts (and yield) by round."""
    rows = lake.query(f"SELECT round, {', '.join(ACCOUNTING)}, yield FROM round_metrics ORDER BY round").to_dicts()
    return {r["round"]: r for r in rows}


def promoted(lake: Lake) -> int:
    """Claims promoted by review: the verified sources."""
    return lake.read("sources").filter(pl.col("source_kind") == "verified").select("doc_id", "claim_id").n_unique()


def assert_accounting(history: list[dict[int, dict]], promotions: list[int]) -> None:
    """The invariants of per-deferral accounting over the scripted rounds (``history``: the
    :func:`accounting` after each round, ``promotions``: :func:`promoted` then): the confirmed
    deferrals summed over rounds equal the claims promoted; each round's deferrals are all
    counted once; and a round's row changes only by pending → decided (decided stays decided,
    and a round with nothing pending never changes)."""
    for seen, n_promoted in zip(history, promotions, strict=True):
        assert sum(m["n_confirmed"] for m in seen.values()) == n_promoted
        for m in seen.values():
            assert sum(m[c] for c in ACCOUNTING[1:]) == m["n_deferred"]
    for before, after in zip(history, history[1:]):
        for r, old in before.items():
            new = after[r]
            assert new["n_deferred"] == old["n_deferred"]
            for c in ("n_confirmed", "n_rejected", "n_abstained"):
                assert new[c] >= old[c], (r, c, old, new)
            if old["n_pending"] == 0:
                assert new == old, (r, old, new)
