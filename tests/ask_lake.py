"""A lake holding one ingested QASPER paper of flows/samples/qasper_demo.jsonl (its Abstract and
Introduction as priors), without a round: what ``grace ask`` tests need, in a
second rather than a Prefect round's minute."""

from __future__ import annotations

from pathlib import Path

from flows.settings import build_settings
from storage.ingest import ingest_batch
from storage.lake import Lake
from tests.conftest import REPO

PAPER = "1806.00738"


def one_paper_lake(tmp_path: Path) -> tuple[str, Lake]:
    """Ingest the paper :data:`PAPER` into ``tmp_path/lake``; returns the lake's root and the lake."""
    root = str(tmp_path / "lake")
    lake = Lake.open(build_settings(lake=root))
    [line] = [line for line in (REPO / "flows/samples/qasper_demo.jsonl").read_text().splitlines() if f'"id": "{PAPER}"' in line]
    ingest_batch(lake, (line + "\n").encode(), "one-paper.jsonl", prior_sections=("Abstract", "Introduction"))
    return root, lake
