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
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from storage.schemas import TABLES, conform

DERIVED = ("decisions", "scoring_counts", "review_inputs", "reviewer_reliability")
"""Tables an earlier GRACE did not store: derived from the others as rounds settle."""


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
            spec = TABLES[name]
            for path, partition in added_files(lake / "tables" / name, version):
                part = pq.read_table(lake / "tables" / name / path)
                if spec.partitioned:
                    part = part.append_column("round", pa.array([int(partition["round"])] * part.num_rows, pa.int32()))
                table = conform(name, part)
                sink = pa.BufferOutputStream()
                pq.write_table(table, sink, compression="zstd")
                data = sink.getvalue().to_pybytes()
                rnd = int(partition["round"]) if spec.partitioned else None
                folder = f"tables/{name}" if rnd is None else f"tables/{name}/round={rnd}"
                rel = f"{folder}/part-{hashlib.sha256(data).hexdigest()[:32]}.parquet"
                (old / folder).mkdir(parents=True, exist_ok=True)
                (old / rel).write_bytes(data)
                files.append({"table": name, "path": rel, "rows": table.num_rows, "bytes": len(data), "round": rnd,
                              "schema_version": spec.version})
        if not files and json.loads(row["tables_json"]):
            continue  # a commit of derived tables only
        (old / "_manifest/commits").mkdir(parents=True, exist_ok=True)
        record = {"format": 1, "id": row["id"], "key": row["key"], "committed_at": row["committed_at"].isoformat(), "files": files}
        (old / f"_manifest/commits/{row['id']}.json").write_text(json.dumps(record, sort_keys=True))
        written += 1
    return written
