"""A process using an S3 lake exits with its own status: what still holds Arrow objects at
exit (a refused command's traceback, a cycle) is released while pyarrow's S3 subsystem is up.
Released after its shutdown, an S3 client or a scan's thread can abort the process
(``terminate called without an active exception``, status -6) after it printed its result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from storage.config import LakeConfig
from tests.storage.conftest import make_bucket

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import sys
from storage.config import LakeConfig
from storage.filesystem import open_store

store = open_store(LakeConfig.model_validate_json(sys.argv[1]))

class Late:
    def __del__(self):
        try:
            self.fs.get_file_info(sys.argv[2])
            print("collected while S3 is up", flush=True)
        except OSError as exc:
            print(f"collected after S3 shut down: {exc}", flush=True)

late = Late()
late.me, late.fs = late, store.arrow_fs  # a cycle: only a garbage collection frees it
del late
sys.exit(3)
"""


@pytest.mark.slow
def test_what_a_cycle_holds_of_s3_is_released_before_pyarrow_shuts_s3_down(s3_endpoint: str, tmp_path: Path) -> None:
    bucket = make_bucket(s3_endpoint)
    config = LakeConfig(lake=f"s3://{bucket}/lake", s3_endpoint_url=s3_endpoint, catalog_cache=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", CHILD, config.model_dump_json(), f"{bucket}/lake"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (3, "collected while S3 is up"), done.stderr[-2000:]
