"""Lake writers run as separate processes by the concurrency and kill tests.

``python -m tests.storage.writer_process MODE CONFIG_JSON ARGS...``:

- ``units PREFIX N``: commits the units ``PREFIX/0`` … ``PREFIX/N-1`` (each: claims of rounds 1
  and 2 and their edges, see :func:`unit_rows`), printing ``UNIT i`` after each; units already
  committed are skipped, so a killed run is completed by running it again;
- ``pause KEY AT``: commits one unit under KEY but stops at AT, prints ``READY`` and sleeps
  until killed: ``table-2`` after its first table's Delta commit, before the second;
  ``record`` after every table, before the commit-log record;
- ``ingest FILE GO``: once it has opened the lake, prints ``WAITING`` and waits until the file
  GO exists, then ingests the batch FILE; prints the report, or ``REFUSED: <error>`` and exits 3;
- ``ingest-held FILE GO``: ingests FILE, but once its documents were checked against the stored
  ones (on the snapshot its append must commit on), prints ``READY`` and waits for GO before writing.

The pause points wrap the real functions of :mod:`storage.commit`; nothing of the lake's own
logic is replaced.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import polars as pl

from grace_core.errors import GraceError
from storage import commit as commit_module
from storage import delta_tables
from storage.commit_log import CommitLog
from storage.config import LakeConfig
from storage.ingest import ingest_batch
from storage.lake import Lake
from tests.storage.sample_rows import claims, edges


def unit_rows(prefix: str, i: int) -> dict[str, pl.DataFrame]:
    """The tables of unit ``i``: 400 claims (20 documents × 10, rounds 1 and 2) and 400 edges."""
    rows = pl.concat([claims(20, 10, 1, prefix=f"{prefix}-{i}-a-"), claims(20, 10, 2, prefix=f"{prefix}-{i}-b-")])
    return {"claims": rows, "edges": edges(rows)}


def _wait_for(go: Path) -> None:
    while not go.exists():
        time.sleep(0.01)


def _sleep_forever() -> None:
    print("READY", flush=True)
    time.sleep(600)


def main() -> None:
    mode, config = sys.argv[1], LakeConfig(**json.loads(sys.argv[2]))
    lake = Lake.open(config)
    if mode == "units":
        prefix, n = sys.argv[3], int(sys.argv[4])
        for i in range(n):
            lake.commit(f"{prefix}/{i}", unit_rows(prefix, i))
            print(f"UNIT {i}", flush=True)
    elif mode == "pause":
        key, at = sys.argv[3], sys.argv[4]
        if at == "table-2":
            real_write, calls = commit_module._write_table, []

            def write_then_pause(*args, **kwargs):
                if calls:
                    _sleep_forever()
                calls.append(1)
                return real_write(*args, **kwargs)

            commit_module._write_table = write_then_pause
        else:
            real_add = CommitLog.add

            def pause_then_add(self, record):
                _sleep_forever()
                return real_add(self, record)

            CommitLog.add = pause_then_add  # type: ignore[method-assign]
        lake.commit(key, unit_rows(key, 0))
    elif mode in ("ingest", "ingest-held"):
        batch, go = Path(sys.argv[3]), Path(sys.argv[4])
        if mode == "ingest":
            print("WAITING", flush=True)  # imported and opened the lake
            _wait_for(go)
        else:
            real_refuse, held = delta_tables._refuse_conflicts, []

            def refuse_then_hold(spec, *args, **kwargs):
                real_refuse(spec, *args, **kwargs)
                if spec.name == "documents" and not held:
                    held.append(1)
                    print("READY", flush=True)
                    _wait_for(go)

            delta_tables._refuse_conflicts = refuse_then_hold
        try:
            summary = ingest_batch(lake, batch.read_bytes(), batch.name).summary()
        except GraceError as exc:
            summary = f"REFUSED: {exc}"
        print(summary, flush=True)
        if summary.startswith("REFUSED"):
            sys.exit(3)  # out of the handler, as grace's CLI exits
    else:
        raise SystemExit(f"unknown mode {mode}")
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
