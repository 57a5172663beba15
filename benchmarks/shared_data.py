"""Where the benchmarks find the full QASPER dev data, when the machine has it: the folder
``GRACE_DATA_DIR`` names (not part of the repository; see docs/development.md, Data and
attribution). A benchmark without it says so in one line and exits with 2."""

from __future__ import annotations

import os
import sys
from pathlib import Path

DATA_DIR = Path(os.environ.get("GRACE_DATA_DIR") or "GRACE_DATA_DIR is not set")
"""The full QASPER/QuALITY dev data folder (``qasper/qasper_dev.jsonl``, ``quality/…``)."""
QASPER_DEV = DATA_DIR / "qasper" / "qasper_dev.jsonl"


def require_data(path: Path) -> Path:
    """``path`` when it is a file; otherwise a message on stderr and exit code 2."""
    if not path.is_file():
        print(f"benchmark: the evaluation data {path} is not there (set GRACE_DATA_DIR to the folder holding "
              "qasper/qasper_dev.jsonl, the full QASPER dev file; or give another file with --data where the benchmark takes one)",
              file=sys.stderr)
        sys.exit(2)
    return path
