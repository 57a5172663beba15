"""Lake fixtures: a local lake in a temporary folder, and an S3 lake on the session's moto server
(``s3_endpoint``, tests/conftest.py: 127.0.0.1, a free port, dummy credentials), reached through
the same code path as real S3."""

from __future__ import annotations

import os
import shutil
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


@pytest.fixture(scope="session")
def demo_lake_template(demo_run: tuple[Path, subprocess.CompletedProcess]) -> Path:
    """The lake of the README's ``./dev demo`` (tests/conftest.py ``demo_run``: ``grace demo`` on
    the bundled papers, real flows on a temporary Prefect server, the offline models, the
    verifier as reviewer), run once per session: a lake after two rounds. Copy it
    (:func:`copy_lake`), never change it; tests/worker_groups.py keeps its users on one worker."""
    folder, done = demo_run
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "demo-lake"


@pytest.fixture
def after_demo_env(prefect_server: None) -> dict[str, str]:
    """The environment of a ``grace`` command run on a copy of the demo lake: the demo's
    hallucination rate (for the rounds run after it), and this worker's Prefect server (the
    session's ``prefect_server``): no temporary server of its own, whose start is not what these
    tests are about (tests/flows/test_quiet_terminal.py and the README's runs cover it)."""
    from prefect.settings import PREFECT_API_URL

    return {**os.environ, "GRACE_HALLUCINATION_RATE": "0.2", "PREFECT_API_URL": str(PREFECT_API_URL.value())}


def copy_lake(template: Path, dest: Path) -> Path:
    """A lake of the test's own at ``dest``: a copy of ``template`` (its catalog, which names the
    template's files, is rebuilt by the first query that finds it moved)."""
    return Path(shutil.copytree(template, dest, symlinks=True))


def remove_lake(config: LakeConfig, rel: str = "") -> None:
    """Every file of the lake of ``config`` gone (a local folder, or every object under the S3
    prefix), or only those under ``rel`` (a file or folder of it); its cached catalogs (an S3
    lake's, a time-travel one) stay where they are."""
    if not config.lake.startswith("s3://"):
        path = Path(config.lake) / rel
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        return
    bucket, _, prefix = config.lake.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3", endpoint_url=config.s3_endpoint_url, region_name="us-east-1")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/{rel}"):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=obj["Key"])
