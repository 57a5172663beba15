"""A lake of the first bundled QASPER paper after ingestion and expansion round 1 (offline
models), for tests of what real rounds do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flows.expansion import expansion_round
from flows.ingest import ingest_batch
from flows.params import IngestParams, RoundParams
from storage.lake import Lake
from tests.conftest import REPO


def one_paper_after_round_1(tmp_path: Path, **common: Any) -> tuple[str, Lake]:
    """Ingest the first paper of flows/samples/qasper_demo.jsonl into ``tmp_path/lake`` and run
    round 1, both with ``common`` (prior sections, hallucination rate, budget); returns the
    lake's root and the opened lake."""
    batch = tmp_path / "one-paper.jsonl"
    batch.write_text((REPO / "flows/samples/qasper_demo.jsonl").read_text().splitlines()[0] + "\n")
    root = str(tmp_path / "lake")
    ingest_batch(IngestParams(batch=str(batch), lake=root, **common))
    expansion_round(RoundParams(round_id=1, lake=root, **common))
    return root, Lake.open(RoundParams(lake=root).settings())
