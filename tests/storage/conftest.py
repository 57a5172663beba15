"""Lake fixtures: a local lake in a temporary folder, and an S3 lake on a moto server that the
tests start on 127.0.0.1 (a free port, dummy credentials), reached through the same code path
as real S3."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import boto3
import pytest

from storage.backup import backup_lake, open_location
from storage.config import LakeConfig
from storage.lake import Lake

DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


MOTO_CHILD = (
    "import sys, time; from moto.server import ThreadedMotoServer;"
    "s = ThreadedMotoServer(ip_address='127.0.0.1', port=0, verbose=False); s.start();"
    "print('%s:%d' % s.get_host_and_port(), flush=True); sys.stdin.read()"
)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server (``ThreadedMotoServer``) on a free loopback port, with dummy
    credentials in the environment (inherited by writer subprocesses). It runs in a child
    process: some delta-rs calls hold the GIL while waiting for S3, which would stall a server
    thread of the test process itself."""
    saved = {k: os.environ.get(k) for k in DUMMY_AWS_ENV}
    os.environ.update(DUMMY_AWS_ENV)
    server = subprocess.Popen([sys.executable, "-c", MOTO_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        yield f"http://{server.stdout.readline().strip()}"
    finally:
        server.kill()
        server.wait(timeout=30)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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
