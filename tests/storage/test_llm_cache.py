"""The lake's model-call cache reads committed calls by key: one column of key hashes, then
only the rows of a key that is there; never the whole ``llm_calls`` table."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from grace_core.models.cache import CallRecord
from storage.config import LakeConfig
from storage.lake import Lake
from storage.llm_cache import LakeCallCache

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def record(key: str, outcome: str = "ok", response: str = "r", minutes: int = 0) -> CallRecord:
    return CallRecord(key=key, role="judge", round=1, model="m", attempt=0, request="q", response=response, prompt_tokens=3,
                      completion_tokens=2, cost_usd=0.01, latency_s=0.1, outcome=outcome, error=None,
                      created_at=T0 + timedelta(minutes=minutes))


@pytest.fixture
def lake(local_config: LakeConfig) -> Lake:
    lake = Lake.open(local_config)
    writer = LakeCallCache(lake)
    for i in range(200):
        writer.put(record(f"k{i:03d}", response=f"old {i}"))
    writer.put(record("k007", response="newer", minutes=5))
    writer.put(record("failed", outcome="error", response=None))
    lake.commit("calls", {"llm_calls": writer.pending()})
    return lake


def test_a_lookup_reads_the_key_hashes_and_then_only_that_keys_rows(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = []
    original = lake.read

    def spy(table, **kw):
        out = original(table, **kw)
        reads.append((table, kw.get("columns"), str(kw.get("filter")), out.height, out.width))
        return out

    monkeypatch.setattr(lake, "read", spy)
    cache = LakeCallCache(lake)
    hit = cache.get("k007")
    assert hit is not None and hit.response == "newer" and hit.prompt_tokens == 3  # the latest ok record
    assert [r[1] for r in reads] == [["key"], None]
    assert reads[0][4] == 1 and reads[0][3] == 201  # one column, the ok rows only
    assert "k007" in reads[1][2] and reads[1][3] == 2  # the key's own rows, not the table
    assert cache.get("k007") is hit and len(reads) == 2  # looked up once
    assert cache.get("never-called") is None and cache.get("failed") is None
    assert len(reads) == 2  # keys without an ok record cost no read
    assert cache.get("k150").response == "old 150" and len(reads) == 3


def test_a_call_recorded_in_this_run_answers_before_the_lake(lake: Lake) -> None:
    cache = LakeCallCache(lake)
    cache.put(record("k001", response="fresh", minutes=9))
    cache.put(record("new", response="n"))
    cache.put(record("bad", outcome="error", response=None))
    assert cache.get("k001").response == "fresh" and cache.get("new").response == "n" and cache.get("bad") is None
    assert cache.pending().height == 3 and cache.pending().height == 0
