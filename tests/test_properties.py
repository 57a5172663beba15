"""Property tests (hypothesis): closeness is monotone in edge weight, the budget holds, and
selection is deterministic."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from grace_core.centrality import closeness_and_novelty
from grace_core.params import ScoringParams
from grace_core.selection import select_for_review

P = ScoringParams()


@st.composite
def bipartite_with_neutral_edge(draw):
    n_src = draw(st.integers(1, 6))
    n_claims = draw(st.integers(1, 12))
    pairs = draw(st.lists(st.tuples(st.integers(0, n_src - 1), st.integers(0, n_claims - 1)), min_size=1, max_size=40, unique=True))
    weights = draw(st.lists(st.sampled_from([P.w_anchor, P.w_agree, P.w_neutral, P.w_contra]), min_size=len(pairs), max_size=len(pairs)))
    upgrade = draw(st.integers(0, len(pairs) - 1))
    weights[upgrade] = P.w_neutral
    return n_src, n_claims, pairs, weights, upgrade


@settings(max_examples=150, deadline=None)
@given(bipartite_with_neutral_edge())
def test_upgrading_neutral_to_agree_never_lowers_that_claims_closeness(case) -> None:
    n_src, n_claims, pairs, weights, upgrade = case
    src = np.array([s for s, _ in pairs])
    dst = np.array([n_src + c for _, c in pairs])
    w = np.array(weights, dtype=float)
    left = np.arange(n_src + n_claims) < n_src

    def closeness_of_claim() -> float:
        cc, _ = closeness_and_novelty([0, n_src + n_claims], [0, len(src)], src, dst, 1.0 / w, left, left)
        return cc[dst[upgrade]]

    before = closeness_of_claim()
    w[upgrade] = P.w_agree
    after = closeness_of_claim()
    assert after >= before - 1e-12


candidates = st.lists(
    st.tuples(
        st.integers(0, 50),
        st.floats(0, 1, allow_nan=False),
        st.floats(0, 1, allow_nan=False),
        st.floats(0.01, 1.5, allow_nan=False),
    ),
    min_size=0, max_size=40, unique_by=lambda t: t[0],
)


def _table(rows) -> pl.DataFrame:
    return pl.DataFrame(
        [{"doc_id": f"d{i % 3}", "claim_id": f"c{i:03d}", "priority": p, "confidence": s, "cost": c} for i, p, s, c in rows],
        schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8, "priority": pl.Float64, "confidence": pl.Float64, "cost": pl.Float64},
    )


@settings(max_examples=200, deadline=None)
@given(candidates, st.floats(0, 5, allow_nan=False))
def test_budget_is_never_exceeded(rows, budget) -> None:
    sel = select_for_review(_table(rows), budget)
    assert sel["cost"].sum() <= budget + 1e-12
    assert (sel["gain"] > 0).all()


@settings(max_examples=100, deadline=None)
@given(candidates, st.floats(0, 5, allow_nan=False), st.randoms(use_true_random=False))
def test_selection_is_deterministic_whatever_the_row_order(rows, budget, rnd) -> None:
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    a = select_for_review(_table(rows), budget)
    b = select_for_review(_table(shuffled), budget)
    assert a["claim_id"].to_list() == b["claim_id"].to_list()
