"""Fixtures of the model-role tests: one offline embedder per session (torch on 1 thread, since
other test runs share this machine), the QASPER dev papers, and a loopback OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from grace_core.models.config import ModelConfig
from grace_core.models.offline_embedder import OfflineEmbedder
from tests.models.openai_server import OpenAICompatibleServer


@pytest.fixture(scope="session")
def offline_config() -> ModelConfig:
    """Offline settings with torch limited to one thread."""
    return ModelConfig(torch_threads=1)


@pytest.fixture(scope="session")
def embedder(offline_config: ModelConfig) -> OfflineEmbedder:
    """The packaged all-MiniLM-L6-v2, loaded once for the whole session."""
    return OfflineEmbedder.from_config(offline_config)


@pytest.fixture(scope="session")
def qasper_papers(qasper_sample: Path) -> list[dict]:
    """The first three QASPER dev papers."""
    with qasper_sample.open(encoding="utf-8") as fh:
        return [json.loads(next(fh)) for _ in range(3)]


@pytest.fixture(scope="session")
def _server() -> Iterator[OpenAICompatibleServer]:
    srv = OpenAICompatibleServer(slow_s=1.0).start()
    yield srv
    srv.stop()


@pytest.fixture()
def llm_server(_server: OpenAICompatibleServer) -> OpenAICompatibleServer:
    """The loopback server, with its script and request log cleared."""
    _server.reset()
    return _server
