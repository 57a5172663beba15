"""A round's settle step with a judge that keeps failing (the real litellm path against the
loopback server): the cascade is never partial — settle raises ModelCallsFailed, so the flow
commits nothing of the round's settle step and a re-run redoes it whole."""

from __future__ import annotations

import polars as pl
import pytest

from grace_core.errors import ModelCallsFailed
from grace_core.models.factory import build_roles
from grace_core.params import ScoringParams
from grace_core.round import RoundState, settle
from tests.models.openai_server import OpenAICompatibleServer
from tests.models.test_litellm_backend import server_config


def state() -> RoundState:
    """One document: a prior entailing claim a, a response entailing a, b and c; b confirmed."""
    claims = {"a": "The model uses GloVe embeddings.", "b": "The model is trained on SQuAD.", "c": "It is trained on SQuAD data."}
    return RoundState(
        sources=pl.DataFrame({"doc_id": ["d"] * 2, "source_id": ["p", "r"], "source_kind": ["prior", "response"],
                              "text": ["The model uses GloVe embeddings.", " ".join(claims.values())], "claim_id": [None, None]},
                             schema={"doc_id": pl.Utf8, "source_id": pl.Utf8, "source_kind": pl.Utf8, "text": pl.Utf8, "claim_id": pl.Utf8}),
        claims=pl.DataFrame({"doc_id": ["d"] * 3, "claim_id": list(claims), "source_id": ["r"] * 3, "source_kind": ["response"] * 3,
                             "text": list(claims.values())}),
        edges=pl.DataFrame({"doc_id": ["d"] * 4, "source_id": ["p", "r", "r", "r"], "source_kind": ["prior", "response", "response", "response"],
                            "claim_id": ["a", "a", "b", "c"], "label": ["entails"] * 4}),
        votes=pl.DataFrame({"doc_id": ["d"], "claim_id": ["b"], "reviewer": ["alice"], "verdict": ["confirm"], "round": [1]}),
    )


def test_a_failing_cascade_judge_fails_the_settle_step(llm_server: OpenAICompatibleServer) -> None:
    llm_server.fallback = "500"
    roles = build_roles(server_config(llm_server, max_retries=1))
    with pytest.raises(ModelCallsFailed, match=r"round 2: cascade: 1 model item failed \(judge 1\)"):
        settle(state(), ScoringParams(), lambda: roles, quorum=1, round_id=2)


def test_a_working_cascade_judge_promotes_and_cascades(llm_server: OpenAICompatibleServer) -> None:
    roles = build_roles(server_config(llm_server))
    s = settle(state(), ScoringParams(), lambda: roles, quorum=1, round_id=2)
    assert s.promotion.sources["claim_id"].to_list() == ["b"]
    assert s.decisions["decision"].to_list() == ["confirm"]
    assert dict(zip(s.scores["claim_id"], s.scores["status"]))["b"] == "grounded"
    assert len(llm_server.chat_requests()) == 1  # one judge call: the new verified claim against the Boundary claims
