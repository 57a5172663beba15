"""Seeded synthetic edge tables shaped like GRACE documents (used by tests and benchmarks)."""

from __future__ import annotations

import numpy as np
import polars as pl


def synthetic_edges(
    n_docs: int,
    seed: int = 0,
    n_claims: int = 200,
    n_priors: int = 5,
    n_responses: int = 8,
    min_sources: int = 1,
    max_sources: int = 8,
    p_contradict: float = 0.05,
    p_isolated: float = 0.0,
    p_response_contradict: float = 0.0,
) -> pl.DataFrame:
    """Edge table of ``n_docs`` documents: each claim is entailed by ``min..max`` random sources;
    a share ``p_contradict`` of claims is also contradicted by a random prior, a share
    ``p_isolated`` has only a contradiction row (no edge at all), and a share
    ``p_response_contradict`` is contradicted by a random response (drawn from a generator of
    its own, so the other rows do not depend on it)."""
    rng = np.random.default_rng(seed)
    disputes = np.random.default_rng([seed, 1])
    cols: dict[str, list] = {"doc_id": [], "source_id": [], "source_kind": [], "claim_id": [], "label": []}
    for d in range(n_docs):
        doc = f"doc{d:05d}"
        sources = [f"p{i}" for i in range(n_priors)] + [f"r{i}" for i in range(n_responses)]
        kinds = ["prior"] * n_priors + ["response"] * n_responses
        for c in range(n_claims):
            claim = f"c{c:04d}"
            if n_priors and rng.random() < p_isolated:
                picks = []
            else:
                k = int(rng.integers(min_sources, min(max_sources, len(sources)) + 1))
                picks = rng.choice(len(sources), size=k, replace=False)
            for s in picks:
                cols["doc_id"].append(doc); cols["source_id"].append(sources[s]); cols["source_kind"].append(kinds[s])
                cols["claim_id"].append(claim); cols["label"].append("entails")
            if n_priors and (len(picks) == 0 or rng.random() < p_contradict):
                cols["doc_id"].append(doc); cols["source_id"].append(f"p{int(rng.integers(n_priors))}"); cols["source_kind"].append("prior")
                cols["claim_id"].append(claim); cols["label"].append("contradicts")
            if n_responses and p_response_contradict and disputes.random() < p_response_contradict:
                cols["doc_id"].append(doc); cols["source_id"].append(f"r{int(disputes.integers(n_responses))}")
                cols["source_kind"].append("response"); cols["claim_id"].append(claim); cols["label"].append("contradicts")
    return pl.DataFrame(cols)
