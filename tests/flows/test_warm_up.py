"""What a stage's chunk tasks load first loads on threads once the stage has chunks to run
(flows.runtime.warm_up) when the tasks run in the flow's process, and the tasks then use those
loads: the offline embedder, and the scoring kernels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flows.runtime import warm_up
from flows.settings import build_settings

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import sys
import polars as pl
from flows.runtime import warm_up
from flows.settings import build_settings
from grace_core.models import offline_embedder as oe
from grace_core.params import ScoringParams

settings = build_settings(lake=sys.argv[1])
threads = warm_up(settings)
print(sorted(t.name for t in threads))
for thread in threads:
    thread.join()
import grace_core.centrality as centrality
import grace_core.graph as graph
from grace_core.scoring import score_edges

def compiled():  # the overloads numba holds, per jitted function of the scoring modules
    return {name: len(f.overloads) for m in (centrality, graph) for name, f in vars(m).items() if hasattr(f, "overloads")}

loaded = oe._load_sentence_model.cache_info()
kernels = compiled()
vectors = oe.OfflineEmbedder.from_config(settings).embed(["a claim"])
edges = pl.DataFrame({"doc_id": ["d1"] * 3, "source_id": ["p", "r", "r"], "source_kind": ["prior", "response", "response"],
                      "claim_id": ["a", "a", "b"], "label": ["entails"] * 3})
scored = score_edges(edges, ScoringParams())
after = compiled()
print(loaded.currsize, loaded.misses, oe._load_sentence_model.cache_info().misses, vectors.shape, scored.height)
print(sum(kernels.values()) >= 2, kernels == after)
"""


@pytest.mark.slow
def test_the_warm_up_loads_the_model_and_the_kernels_once_and_the_tasks_use_those_loads(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "lake")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    names, counts, kernels = done.stdout.strip().splitlines()
    assert names == "['grace-embedder-load', 'grace-scoring-load']"
    assert counts.split() == ["1", "1", "1", "(1,", "384)", "2"]  # one model load, used by the later embed; two claims scored
    assert kernels == "True True"  # the warm-up loaded the kernels scoring calls, and scoring loaded nothing more


@pytest.mark.parametrize("setting", [
    {"task_runner": "dask"},  # the chunk tasks run in the cluster's worker processes
    {"dask_address": "tcp://127.0.0.1:8786"},
])
def test_nothing_is_loaded_where_the_tasks_run_elsewhere(tmp_path: Path, setting: dict) -> None:
    assert warm_up(build_settings(lake=str(tmp_path / "lake"), **setting)) == []


def test_only_the_kernels_are_loaded_where_embeddings_come_from_the_api(tmp_path: Path) -> None:
    settings = build_settings(lake=str(tmp_path / "lake"), backend="litellm", embedder_model="openai/text-embedding-3-small")
    threads = warm_up(settings)
    for thread in threads:
        thread.join()
    assert [t.name for t in threads] == ["grace-scoring-load"]
