"""Lake fixtures: a local lake in a temporary folder, and an S3 lake on the session's moto server
(``s3_endpoint``, tests/conftest.py: 127.0.0.1, a free port, dummy credentials), reached through
the same code path as real S3."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import boto3
import pytest

from storage.backup import backup_lake, open_location
from storage.config import LakeConfig
from storage.lake import Lake
from tests.conftest import DUMMY_AWS_ENV  # noqa: F401  (here before the moto server fixture moved to tests/conftest.py)


def make_bucket(endpoint: str) -> str:
    """A new empty bucket on the moto server."""
    name = f"lake-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


@pytest.fixture
def local_config(tmp_path: Path) -> LakeConfig:
    return LakeConfig(lake=str(tmp_path / "lake"))


@pytest.fixture
def s3_config(s3_endpoint: str, tmp_path: Path) -> LakeConfig:
    return LakeConfig(
        lake=f"s3://{make_bucket(s3_endpoint)}/grace/lake", s3_endpoint_url=s3_endpoint,
        catalog_cache=str(tmp_path / "catalog-cache"),
    )


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])
def lake_config(request: pytest.FixtureRequest) -> LakeConfig:
    """Each test using it runs once on a local lake and once on the moto S3 lake."""
    return request.getfixturevalue(f"{request.param}_config")


@pytest.fixture
def lake(lake_config: LakeConfig) -> Lake:
    return Lake.open(lake_config)


def back_up_while(process: subprocess.Popen, lake: Lake, folder: Path, *, limit: int, pause: float) -> tuple[list[Path], str]:
    """Back ``lake`` up to ``folder``/backup-N every ``pause`` seconds while ``process`` runs (at
    most ``limit`` backups), then wait for it (killed if the wait fails); returns the backups and
    its stderr."""
    backups: list[Path] = []
    try:
        while process.poll() is None and len(backups) < limit:
            dest = folder / f"backup-{len(backups)}"
            backup_lake(lake, open_location(lake.config, str(dest)))
            backups.append(dest)
            time.sleep(pause)
        _, err = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
    return backups, err
