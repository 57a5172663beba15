"""Write a lake back in the format of earlier GRACE versions, for ``grace migrate`` tests.

Before Delta, a lake was Parquet files under ``tables/<table>/[round=N/]`` (the ``round`` column
inside the file) named by JSON commit records under ``_manifest/commits/``, and it had none of
the tables later versions derive as rounds settle (:data:`DERIVED`). :func:`downgrade` turns a
lake written by this GRACE into such a lake: one record per commit of its commit log, in commit
order with the same key and time, naming the files that commit added to each base table (read
from the tables' Delta logs), the derived tables and the commits that only mark them complete
left out.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from storage.schemas import TABLES, conform

DERIVED = ("decisions", "scoring_counts", "review_inputs", "reviewer_reliability")
"""Tables an earlier GRACE did not store: derived from the others as rounds settle."""


def write_old_file(old: Path, name: str, table: pa.Table, rnd: int | None) -> dict:
    """Write one table's rows of one round (``rnd``; None: a table not stored by round) as the
    earlier GRACE did: a zstd Parquet file named by the hash of its bytes. Returns its entry of
    the commit record."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    data = sink.getvalue().to_pybytes()
    folder = f"tables/{name}" if rnd is None else f"tables/{name}/round={rnd}"
    rel = f"{folder}/part-{hashlib.sha256(data).hexdigest()[:32]}.parquet"
    (old / folder).mkdir(parents=True, exist_ok=True)
    (old / rel).write_bytes(data)
    return {"table": name, "path": rel, "rows": table.num_rows, "bytes": len(data), "round": rnd, "schema_version": TABLES[name].version}


def write_record(old: Path, key: str, committed_at: datetime, files: list[dict]) -> None:
    """Write the commit record of the earlier format naming ``files`` (:func:`write_old_file`)."""
    cid = hashlib.sha256(key.encode()).hexdigest()[:32]
    (old / "_manifest/commits").mkdir(parents=True, exist_ok=True)
    record = {"format": 1, "id": cid, "key": key, "committed_at": committed_at.isoformat(), "files": files}
    (old / f"_manifest/commits/{cid}.json").write_text(json.dumps(record, sort_keys=True))


def added_files(table_dir: Path, version: int) -> list[tuple[str, dict]]:
    """``(path, partitionValues)`` of the files Delta version ``version`` of a table added."""
    log = table_dir / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [(a["add"]["path"], a["add"]["partitionValues"]) for a in actions if "add" in a]


def downgrade(lake: Path, old: Path) -> int:
    """Write the lake at ``lake`` to ``old`` in the earlier format; returns the commit records written."""
    log = pl.read_delta(str(lake / "_grace" / "commits")).sort("committed_at", "key")
    written = 0
    for row in log.iter_rows(named=True):
        if row["key"].startswith("scoring-counts/"):
            continue  # the derived scoring counts and their completion mark
        files = []
        for name, (version, _rows) in sorted(json.loads(row["tables_json"]).items()):
            if name in DERIVED:
                continue
            for path, partition in added_files(lake / "tables" / name, version):
                part = pq.read_table(lake / "tables" / name / path)
                rnd = int(partition["round"]) if TABLES[name].partitioned else None
                if rnd is not None:
                    part = part.append_column("round", pa.array([rnd] * part.num_rows, pa.int32()))
                files.append(write_old_file(old, name, conform(name, part), rnd))
        if not files and json.loads(row["tables_json"]):
            continue  # a commit of derived tables only
        write_record(old, row["key"], row["committed_at"], files)
        written += 1
    return written
