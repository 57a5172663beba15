"""Where the benchmarks find the full QASPER dev data: ``../shared/data`` beside the
repository (not part of it; a clone may not have it). A benchmark without it says so in one
line and exits with 2."""

from __future__ import annotations

import sys
from pathlib import Path

QASPER_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "qasper" / "qasper_dev.jsonl"


def require_data(path: Path) -> Path:
    """``path`` when it is a file; otherwise a message on stderr and exit code 2."""
    if not path.is_file():
        print(f"benchmark: the evaluation data {path} is not there (the full QASPER dev file lives in ../shared/data "
              "beside the repository; give another file with --data where the benchmark takes one)", file=sys.stderr)
        sys.exit(2)
    return path
