"""What a round leaves on its Prefect run for a person to read: the round report (a line in
words, a two-column table of formatted figures, the legend of PCR, KF, yield and cascade) and
the deferred claims of the round as a table (text, document, reviewer, due)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from flows.review import deferred_claims, dispatch_reviews
from flows.score import metrics_markdown
from tests.review.conftest import CLAIMS, DOC, T0, local_lake, reviewers, stage  # noqa: F401 (fixtures)

METRICS = pl.DataFrame([{
    "round": 3, "n_documents": 1200, "n_claims": 24_000, "n_grounded": 15_000, "n_boundary": 5_000, "n_refuted": 4_000,
    "pcr": 0.62512, "kf": 4.16666, "n_deferred": 1, "n_confirmed": 0, "n_rejected": 0, "n_abstained": 0, "n_pending": 1,
    "yield": None, "yield_decided": None, "cascade": 0.33333,
}])


def test_the_round_report_reads_plainly() -> None:
    report = metrics_markdown(METRICS, 3)
    assert "1,200 documents, 24,000 claims: 15,000 Grounded, 5,000 Boundary, 4,000 Refuted. 1 claim deferred to review" in report
    table = dict(line.strip("| ").split(" | ") for line in report.splitlines() if line.startswith("| "))
    assert table == {
        "metric": "round 3", "documents": "1,200", "claims": "24,000", "Grounded": "15,000", "Boundary": "5,000", "Refuted": "4,000",
        "PCR": "62.5%", "KF": "4.17", "deferred": "1", "confirmed": "0", "rejected": "0", "abstained": "0", "pending": "1",
        "yield": "—", "yield of decided": "—", "cascade": "0.33",
    }
    assert "PCR: share of the claims of sampled responses that are Grounded" in report and "Cascade: " in report
    assert metrics_markdown(METRICS, 4) == "# Round 4\n\nNo document has claims yet."


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_server")
def test_the_dispatch_lists_its_deferred_claims(local_lake, reviewers) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    reviewers("alice", use_verifier=True)
    dispatch_reviews(stage(local_lake, 1, now=T0))
    rows = deferred_claims(local_lake, 1)
    assert rows and [r["rank"] for r in rows] == sorted(r["rank"] for r in rows)
    assert {r["claim"] for r in rows} <= set(CLAIMS.values()) and {r["document"] for r in rows} == {DOC}
    for r in rows:
        assert r["due"] == ("answered at dispatch" if r["reviewer"] == "verifier" else "2026-03-05 09:00 UTC"), r  # 72 h review deadline
    assert set(rows[0]) == {"rank", "claim", "document", "reviewer", "due"}  # no status: audits stay blind
    with get_client(sync_client=True) as client:
        (artifact,) = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["grace-deferred-claims"])),
                                            sort=ArtifactSort.CREATED_DESC, limit=1)  # this dispatch's: the server is the session's
    assert artifact.type == "table" and json.loads(artifact.data) == rows
