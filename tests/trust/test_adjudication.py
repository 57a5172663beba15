"""Split votes go to an adjudicator (grace_core/adjudication.py)."""

from __future__ import annotations

import polars as pl
import pytest

from grace_core.adjudication import check_adjudicator, split_claims
from grace_core.errors import InvalidSettings


def test_only_even_splits_the_adjudicator_has_not_voted_on_and_not_waiting() -> None:
    decisions = pl.DataFrame({
        "doc_id": ["d"] * 5, "claim_id": ["even", "only-abstain", "majority", "voted", "busy"],
        "n_confirm": [1, 0, 2, 1, 2], "n_reject": [1, 0, 1, 1, 2], "decision": ["abstain", "abstain", "confirm", "abstain", "abstain"],
    })
    votes = pl.DataFrame({"doc_id": ["d", "d"], "claim_id": ["voted", "even"], "reviewer": ["carol", "alice"]})
    busy = pl.DataFrame({"doc_id": ["d"], "claim_id": ["busy"]})
    assert split_claims(decisions, votes, busy, "carol")["claim_id"].to_list() == ["even"]
    assert split_claims(decisions, votes, busy, "alice")["claim_id"].to_list() == ["voted"]  # alice voted on "even" herself


def test_the_adjudicator_must_be_in_the_pool() -> None:
    check_adjudicator(None, ())
    check_adjudicator("verifier", ("alice", "verifier"))
    with pytest.raises(InvalidSettings, match="GRACE_ADJUDICATOR: 'carol' is not in the reviewer pool"):
        check_adjudicator("carol", ("alice", "bob"))
