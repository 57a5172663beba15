"""Honest failures and no secret leaks in the litellm backend, through the real client path on
the loopback server: single-flight de-duplication, wrong-shaped replies, echoed keys, the
spend-cap warning, and builds that commit documents whole (never a partial graph) with prompts
that do not depend on row order."""

from __future__ import annotations

import logging
import threading
from typing import Any

import polars as pl
import pytest

from grace_core.build import build_documents
from grace_core.errors import ModelUnavailable
from grace_core.models.cache import MemoryCallCache
from grace_core.models.factory import build_roles
from grace_core.models.failures import describe_failures
from grace_core.models.redaction import REDACTED, Redactor
from grace_core.models.roles import VerifyRequest
from tests.models.openai_server import OpenAICompatibleServer
from tests.models.test_litellm_backend import server_config

KEY = "sk-test-SECRET-7f3a9c0d5e1b2468"


def keyed_config(server: OpenAICompatibleServer, **overrides: Any):
    return server_config(server, api_key=KEY, **overrides)


def test_identical_requests_in_flight_are_made_once(llm_server: OpenAICompatibleServer) -> None:
    llm_server.delay_s = 0.3
    cache = MemoryCallCache()
    roles = build_roles(server_config(llm_server, concurrency=8), cache)
    same = [VerifyRequest("The tagger is fast.", "The tagger is fast. It uses GloVe.")] * 8
    verdicts = roles.verifier.verify(same)
    assert [v.verdict for v in verdicts] == ["confirm"] * 8
    assert len(llm_server.chat_requests()) == 1
    assert len(cache.records) == 1
    usage = roles.usage()
    assert usage.calls == 1 and usage.deduplicated + usage.cache_hits == 7


def test_followers_of_a_failed_request_fail_with_it_and_share_its_error(llm_server: OpenAICompatibleServer) -> None:
    llm_server.delay_s = 0.2
    llm_server.fallback = "500"
    roles = build_roles(server_config(llm_server, concurrency=4, max_retries=0))
    verdicts = roles.verifier.verify([VerifyRequest("A b c d.", "A b c d.")] * 4)
    assert {v.outcome for v in verdicts} == {"failed"} and len(llm_server.chat_requests()) == 1
    assert all("500" in (v.error or "") for v in verdicts)


def test_a_request_after_the_flight_landed_is_answered_from_the_cache(llm_server: OpenAICompatibleServer) -> None:
    cache = MemoryCallCache()
    roles = build_roles(server_config(llm_server), cache)
    req = [VerifyRequest("A b c d.", "A b c d.")]
    roles.verifier.verify(req)
    threads = [threading.Thread(target=roles.verifier.verify, args=(req,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(llm_server.chat_requests()) == 1 and roles.usage().cache_hits == 4


@pytest.mark.parametrize("mode", ["no_choices", "not_json", "wrong_fields", "malformed"])
def test_wrong_shaped_replies_fail_the_item_with_a_clear_error(llm_server: OpenAICompatibleServer, mode: str) -> None:
    llm_server.fallback = mode
    cache = MemoryCallCache()
    [verdict] = build_roles(server_config(llm_server, max_retries=1), cache).verifier.verify([VerifyRequest("A b c d.", "A b c d.")])
    assert verdict.outcome == "failed" and verdict.verdict == "abstain"
    assert verdict.error and "\n" not in verdict.error and "Traceback" not in verdict.error
    assert len(cache.records) == 2 and all(r.outcome != "ok" for r in cache.records)


@pytest.mark.parametrize("mode", ["echo_key", "echo_key_401"])
def test_an_echoed_key_is_redacted_in_records_results_and_errors(llm_server: OpenAICompatibleServer, mode: str) -> None:
    llm_server.fallback = mode
    cache = MemoryCallCache()
    roles = build_roles(keyed_config(llm_server, max_retries=1), cache)
    if mode == "echo_key_401":
        with pytest.raises(ModelUnavailable) as info:
            roles.verifier.verify([VerifyRequest("A b c d.", "A b c d.")])
        errors = [str(info.value)]
    else:
        [verdict] = roles.verifier.verify([VerifyRequest("A b c d.", "A b c d.")])
        assert verdict.outcome == "failed"
        errors = [verdict.error or ""]
    assert llm_server.authorizations[0] == f"Bearer {KEY}", "the key really was sent and echoed"
    errors += [r.error or "" for r in cache.records] + [r.request for r in cache.records]
    assert cache.records and all(KEY not in e and KEY[8:] not in e for e in errors)
    assert all(REDACTED in (r.error or "") for r in cache.records)


def test_redactor_removes_known_values_and_credential_shapes() -> None:
    redact = Redactor.from_environment({"GRACE_API_KEY": "plainsecretvalue", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG", "HOME": "/root"})
    text = ("key plainsecretvalue, aws wJalrXUtnFEMI/K7MDENG, {'Authorization': 'Bearer abc.def-ghi'}, api-key: zz1234, "
            "x-api-key=qq9876 and sk-abcdefghijklmnop AKIAABCDEFGHIJKLMNOP home /root")
    out = redact(text) or ""
    for secret in ("plainsecretvalue", "wJalrXUtnFEMI", "abc.def-ghi", "zz1234", "qq9876", "sk-abcdefghijklmnop", "AKIAABCDEFGHIJKLMNOP"):
        assert secret not in out
    assert "home /root" in out and "Authorization" in out
    line = redact.error_text(RuntimeError("boom Traceback (most recent call last):\n  File x\nplainsecretvalue"))
    assert line == "RuntimeError: boom"


def test_a_reply_holding_a_secret_value_is_used_as_recorded_so_a_replay_from_the_cache_is_the_same(
    llm_server: OpenAICompatibleServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # moto's convention (AWS_SECRET_ACCESS_KEY=testing) is an ordinary word of many papers
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    text = ["The testing set has 200 sentences. The tagger is fast."]
    cache = MemoryCallCache()
    [live] = build_roles(server_config(llm_server), cache).decomposer.decompose(text)
    [replayed] = build_roles(server_config(llm_server), cache).decomposer.decompose(text)
    assert len(llm_server.chat_requests()) == 1, "the second client is answered from the cache"
    assert live == replayed and live.outcome == "ok"
    assert not any("testing" in c for c in live.claims) and any(REDACTED in c for c in live.claims)
    assert all("testing" not in (r.response or "") for r in cache.records)


def test_reaching_the_spend_cap_is_a_warning_with_the_amounts(llm_server: OpenAICompatibleServer, caplog: pytest.LogCaptureFixture) -> None:
    roles = build_roles(server_config(llm_server, concurrency=1, spend_cap_usd=1e-5))
    roles.start_round(3)
    with caplog.at_level(logging.WARNING, logger="grace.models"):
        verdicts = roles.verifier.verify([VerifyRequest(f"Fact {i} holds here.", f"Fact {i} holds here.") for i in range(30)])
    assert "capped" in {v.outcome for v in verdicts}
    [record] = [r for r in caplog.records if r.name == "grace.models"]
    assert record.levelno == logging.WARNING and "round 3: spend cap reached" in record.getMessage() and "$0.000010 cap" in record.getMessage()
    usage = roles.usage()
    assert usage.capped_items == sum(v.outcome == "capped" for v in verdicts) and usage.cost_usd >= 1e-5


def test_the_round_spend_carries_over_between_tasks(llm_server: OpenAICompatibleServer) -> None:
    roles = build_roles(server_config(llm_server, spend_cap_usd=1e-5))
    roles.start_round(1, spent_usd=2e-5)
    [verdict] = roles.verifier.verify([VerifyRequest("A b c d.", "A b c d.")])
    assert verdict.outcome == "capped" and llm_server.requests == []


def test_describe_failures_counts_per_role_and_names_the_first_error() -> None:
    line = describe_failures([("judge", "failed", "E1"), ("responder", "failed", "E2"), ("judge", "failed", "E3"), ("judge", "capped", None)])
    assert line == "3 model items failed (judge 2, responder 1), first error (judge): E1; 1 skipped by the spend cap (judge 1)"


# -- builds ----------------------------------------------------------------------------------

DOCS = pl.DataFrame({"doc_id": ["d1", "d2", "d3"], "title": ["Taggers", "Parsers", "Corpora"]})
PASSAGES = pl.DataFrame({
    "doc_id": ["d1", "d1", "d2", "d2", "d3", "d3"],
    "source_id": ["p1", "p2", "p3", "p4", "p5", "p6"],
    "source_kind": ["prior"] * 6,
    "ord": [0, 1, 0, 1, 0, 1],
    "text": [
        "The tagger is trained for 10 epochs. It reaches an F1 score of 91.2.",
        "The tagger uses GloVe vectors. It does not use character embeddings.",
        "The parser is a transition-based model. It uses a stack LSTM.",
        "The parser reaches 93.1 UAS on the test set. Training takes two hours.",
        "The corpus has 20,000 sentences. It was annotated by three experts.",
        "The annotators agree with a kappa of 0.81. The corpus is in English.",
    ],
}, schema={"doc_id": pl.Utf8, "source_id": pl.Utf8, "source_kind": pl.Utf8, "ord": pl.Int32, "text": pl.Utf8})
QUESTIONS = pl.DataFrame({"doc_id": ["d1", "d2"], "question_id": ["q1", "q2"], "ord": [0, 0],
                          "question": ["How is the tagger trained?", "What does the parser reach?"]},
                         schema={"doc_id": pl.Utf8, "question_id": pl.Utf8, "ord": pl.Int32, "question": pl.Utf8})


def graph_of(result: Any) -> set[tuple]:
    """The built graph without round-dependent ids: (doc, source text, claim, label)."""
    texts = dict(zip(PASSAGES["source_id"], PASSAGES["text"], strict=True)) | dict(zip(result.responses["source_id"], result.responses["text"], strict=True))
    return {(r["doc_id"], texts[r["source_id"]], r["claim_id"], r["label"]) for r in result.edges.iter_rows(named=True)}


def build(roles: Any, passages: pl.DataFrame = PASSAGES, round_id: int = 1) -> Any:
    return build_documents(DOCS, passages, QUESTIONS, roles, round_id=round_id, context_passages=2, model="m")


def test_a_redone_build_hits_the_cache_on_every_call_whatever_the_row_order(llm_server: OpenAICompatibleServer) -> None:
    cache = MemoryCallCache()
    cfg = server_config(llm_server, n_samples=2)
    first = build(build_roles(cfg, cache))
    calls = len(llm_server.chat_requests())
    judge_calls = sum("Claims:" in b["messages"][1]["content"] for b in llm_server.chat_requests())
    assert judge_calls >= 3 and first.failures.height == 0
    roles = build_roles(cfg, cache)
    again = build(roles, PASSAGES.reverse(), round_id=2)  # another round, rows in another order
    assert len(llm_server.chat_requests()) == calls, "every call of the redone build is a cache hit"
    assert roles.usage().calls == 0 and graph_of(again) == graph_of(first)


def test_a_document_with_failed_items_is_left_out_whole_and_only_its_failed_calls_are_made_again(
    llm_server: OpenAICompatibleServer,
) -> None:
    cfg = server_config(llm_server, n_samples=2)
    clean = build(build_roles(cfg, MemoryCallCache()))
    llm_server.reset()

    cache = MemoryCallCache()
    llm_server.fail_every = (4, "500")
    flaky = build(build_roles(server_config(llm_server, n_samples=2, max_retries=0), cache))
    assert flaky.failed.height > 0 and flaky.incomplete
    for frame in (flaky.responses, flaky.claims, flaky.edges):
        assert not set(frame["doc_id"].to_list()) & set(flaky.incomplete), "no row of an incomplete document"
    complete = {d for d in DOCS["doc_id"] if d not in flaky.incomplete}
    assert {g for g in graph_of(flaky)} == {g for g in graph_of(clean) if g[0] in complete}, "complete documents are whole"
    failed_keys = {r.key for r in cache.records} - {r.key for r in cache.records if r.outcome == "ok"}

    llm_server.reset()
    ok_before = {r.key for r in cache.records if r.outcome == "ok"}
    n_before = len(cache.records)
    retry = build(build_roles(server_config(llm_server, n_samples=2, max_retries=0), cache), round_id=2)
    made = {r.key for r in cache.records[n_before:]}
    assert failed_keys <= made, "every failed call is made again"
    assert not made & ok_before, "no call that succeeded is paid twice"
    assert retry.failures.height == 0 and graph_of(retry) == graph_of(clean)


def test_capped_items_leave_their_documents_unbuilt(llm_server: OpenAICompatibleServer) -> None:
    roles = build_roles(server_config(llm_server, n_samples=2, concurrency=1, spend_cap_usd=2e-4), MemoryCallCache())
    roles.start_round(1)
    result = build(roles)
    assert result.capped.height > 0 and result.failed.height == 0
    assert set(result.claims["doc_id"].to_list()).isdisjoint(result.incomplete)

