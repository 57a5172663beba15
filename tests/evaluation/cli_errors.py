"""Running ``grace eval …`` on bad input: one error line, exit code 2, nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GRACE = str(Path(sys.executable).parent / "grace")


def assert_refused(args: list[str], message: str, tmp_path: Path) -> None:
    """``grace eval ARGS --out … --lake …`` prints one ``grace: error:`` line holding
    ``message``, exits with 2 and creates neither the report folder nor the lake."""
    res = subprocess.run([GRACE, "eval", *args, "--out", str(tmp_path / "out"), "--lake", str(tmp_path / "lake")],
                         check=False, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("grace: error:") and message in lines[0], res.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "lake").exists()
