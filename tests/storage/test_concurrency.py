"""Concurrent writers and kill -9, with real processes, on a local lake and on moto S3.

The figures these tests assert (rows lost and rows duplicated: 0) are the ones the lake
promises: two writers touching the same keys never both land, a re-run completes a killed
unit without duplicating what it had written."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from storage.config import LakeConfig
from storage.lake import Lake
from tests.storage.writer_process import unit_rows

REPO = Path(__file__).resolve().parents[2]
WRITER = [sys.executable, "-m", "tests.storage.writer_process"]


def doc(i: int, variant: str = "") -> dict:
    return {"id": f"d{i}", "title": f"Document {i}", "text": f"Paragraph one of {i}{variant}.\n\nParagraph two of {i}.",
            "questions": [{"id": "q1", "question": f"What is {i}?"}]}


def batch_file(folder: Path, name: str, docs: list[dict]) -> Path:
    path = folder / name
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def duplicates_and_losses(lake: Lake, ids: set[str]) -> dict[str, tuple[int, int]]:
    """Per table: (rows duplicated, ids lost)."""
    docs = lake.read("documents")
    sources = lake.read("sources")
    questions = lake.read("questions")
    return {
        "documents": (docs.height - docs["doc_id"].n_unique(), len(ids - set(docs["doc_id"]))),
        "sources": (sources.height - sources.select("doc_id", "source_id", "round").n_unique(), len(ids - set(sources["doc_id"]))),
        "questions": (questions.height - questions.select("doc_id", "question_id").n_unique(), len(ids - set(questions["doc_id"]))),
    }


@pytest.mark.slow
def test_concurrent_ingests_of_overlapping_batches_store_each_document_once(lake_config: LakeConfig, tmp_path: Path) -> None:
    batches = [batch_file(tmp_path, f"b{k}.jsonl", [doc(i) for i in range(6 * k, 6 * k + 12)]) for k in range(3)]
    go = tmp_path / "go"
    procs = [subprocess.Popen([*WRITER, "ingest", lake_config.model_dump_json(), str(b), str(go)], cwd=REPO,
                              stdout=subprocess.PIPE, text=True) for b in batches]
    assert [p.stdout.readline().strip() for p in procs] == ["WAITING"] * 3  # all three have imported and opened the lake
    go.touch()
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    lake = Lake.open(lake_config)
    ids = {f"d{i}" for i in range(24)}
    assert duplicates_and_losses(lake, ids) == {"documents": (0, 0), "sources": (0, 0), "questions": (0, 0)}
    assert lake.read("documents").height == 24 and lake.read("batches").height == 3
    assert lake.query("SELECT count(*) AS n, count(DISTINCT doc_id) AS d FROM documents").row(0) == (24, 24)


@pytest.mark.slow
def test_grace_ingest_twice_at_once_with_shared_documents(local_config: LakeConfig, tmp_path: Path) -> None:
    """The reported case: `grace ingest a.jsonl & grace ingest b.jsonl` with shared documents."""
    a = batch_file(tmp_path, "a.jsonl", [doc(i) for i in range(0, 10)])
    b = batch_file(tmp_path, "b.jsonl", [doc(i) for i in range(5, 15)])
    grace = str(Path(sys.executable).with_name("grace"))
    procs = [subprocess.Popen([grace, "ingest", str(f), "--lake", local_config.lake], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for f in (a, b)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    lake = Lake.open(local_config)
    assert duplicates_and_losses(lake, {f"d{i}" for i in range(15)}) == {"documents": (0, 0), "sources": (0, 0), "questions": (0, 0)}
    assert lake.read("documents").height == 15


@pytest.mark.slow
def test_the_same_id_with_other_content_from_two_writers_lands_once(lake_config: LakeConfig, tmp_path: Path) -> None:
    first = batch_file(tmp_path, "first.jsonl", [doc(100), doc(1, " (first version)")])
    second = batch_file(tmp_path, "second.jsonl", [doc(1, " (second version)"), doc(200)])
    go = tmp_path / "go"
    held = subprocess.Popen([*WRITER, "ingest-held", lake_config.model_dump_json(), str(first), str(go)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert held.stdout is not None and held.stdout.readline().strip() == "READY"  # checked: d1 is not stored yet
        other = subprocess.run([*WRITER, "ingest", lake_config.model_dump_json(), str(second), str(tmp_path)], cwd=REPO,
                               capture_output=True, text=True, timeout=240)
        assert other.returncode == 0, other.stdout + other.stderr
        go.touch()  # the held writer now finds the table moved: it re-checks on the new snapshot
        out, _ = held.communicate(timeout=240)
    finally:
        held.kill()
    assert held.returncode == 3
    assert "REFUSED: first.jsonl: line 2: field 'id': document 'd1' is already stored with different content" in out
    lake = Lake.open(lake_config)
    docs = lake.read("documents").sort("doc_id")
    assert docs["doc_id"].to_list() == ["d1", "d200"]  # nothing of the refused batch, d1 once
    assert set(lake.read("sources").filter(pl.col("doc_id") == "d1")["text"]) == {"Paragraph one of 1 (second version).\n\nParagraph two of 1."}
    assert lake.read("batches")["name"].to_list() == ["second.jsonl"]


@pytest.mark.slow
def test_racing_writers_with_one_id_in_two_versions_one_wins_the_other_fails_cleanly(lake_config: LakeConfig, tmp_path: Path) -> None:
    files = [batch_file(tmp_path, f"v{k}.jsonl", [doc(7, f" (version {k})"), doc(50 + k)]) for k in range(2)]
    go = tmp_path / "go"
    procs = [subprocess.Popen([*WRITER, "ingest", lake_config.model_dump_json(), str(f), str(go)], cwd=REPO,
                              stdout=subprocess.PIPE, text=True) for f in files]
    assert [p.stdout.readline().strip() for p in procs] == ["WAITING"] * 2  # both have imported and opened the lake
    go.touch()
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert sorted(p.returncode for p in procs) == [0, 3], outs
    loser = outs[[p.returncode for p in procs].index(3)]
    assert "field 'id': document 'd7' is already stored with different content" in loser
    lake = Lake.open(lake_config)
    assert lake.read("documents").filter(pl.col("doc_id") == "d7").height == 1
    assert lake.read("documents").height == 2 and lake.read("batches").height == 1


@pytest.mark.slow
def test_kill_9_at_random_moments_loses_and_duplicates_nothing(lake_config: LakeConfig) -> None:
    units, kills, rng = 10, 0, random.Random(12)
    cmd = [*WRITER, "units", lake_config.model_dump_json(), "run", str(units)]
    while True:
        child = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
        if kills < 6:
            # kill at a random moment of the run, whatever the machine's speed: after 1 to 3 more units
            # have committed (the writer prints UNIT i after each), within the next unit's commit
            let_commit, committed = rng.randint(1, 3), 0
            for line in child.stdout:
                committed += line.startswith("UNIT ")
                if committed >= let_commit:
                    break
            time.sleep(rng.uniform(0.0, 0.4))
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
                child.wait(timeout=30)
                child.stdout.close()
                kills += 1
                continue
        child.communicate(timeout=300)
        assert child.returncode == 0
        break
    lake = Lake.open(lake_config)
    expected = pl.concat([unit_rows("run", i)["claims"] for i in range(units)])
    stored = lake.read("claims")
    lost = expected.join(stored, on=["doc_id", "round", "source_id", "claim_id"], how="anti").height
    duplicated = stored.height - stored.select("doc_id", "round", "source_id", "claim_id").n_unique()
    edges = lake.read("edges")
    print(f"\n{lake_config.lake}: {kills} kill -9, claims lost {lost}, duplicated {duplicated}, "
          f"edges {edges.height} of {expected.height}, units committed {sum(lake.is_committed(f'run/{i}') for i in range(units))} of {units}", file=sys.stderr)
    assert kills >= 1 and (lost, duplicated) == (0, 0)
    assert edges.height == expected.height and edges.select("doc_id", "round", "source_id", "claim_id", "label").n_unique() == edges.height
    assert all(lake.is_committed(f"run/{i}") for i in range(units))
