"""The offline embedder loads on a thread at the start of a round (flows.runtime.warm_embedder)
when the round's chunk tasks run in the flow's process, and the tasks then use that load."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flows.runtime import warm_embedder
from flows.settings import build_settings

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import sys
from flows.runtime import warm_embedder
from flows.settings import build_settings
from grace_core.models import offline_embedder as oe

settings = build_settings(lake=sys.argv[1])
thread = warm_embedder(settings)
assert thread is not None and thread.name == "grace-embedder-load"
thread.join()
loaded = oe._load_sentence_model.cache_info()
vectors = oe.OfflineEmbedder.from_config(settings).embed(["a claim"])
after = oe._load_sentence_model.cache_info()
print(loaded.currsize, loaded.misses, after.misses, vectors.shape)
"""


@pytest.mark.slow
def test_the_warm_up_loads_the_model_once_and_the_tasks_use_that_load(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "lake")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "1", "1", "(1,", "384)"]


@pytest.mark.parametrize("setting", [
    {"task_runner": "dask"},  # the chunk tasks run in the cluster's worker processes
    {"dask_address": "tcp://127.0.0.1:8786"},
    {"backend": "litellm", "embedder_model": "openai/text-embedding-3-small"},  # embeddings come from the API
])
def test_nothing_is_loaded_where_the_tasks_do_not_embed_offline(tmp_path: Path, setting: dict) -> None:
    assert warm_embedder(build_settings(lake=str(tmp_path / "lake"), **setting)) is None
