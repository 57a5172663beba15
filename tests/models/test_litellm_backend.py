"""The litellm backend through the real client path: litellm → OpenAI client → HTTP on a
loopback OpenAI-compatible server, and litellm's own ``mock_response``."""

from __future__ import annotations

import functools
import json
import threading
import time
from types import SimpleNamespace
from typing import Any

import litellm
import numpy as np
import pytest

from flows.settings import build_settings
from grace_core.errors import ModelUnavailable, SpendCapReached, UnknownModelPrice
from grace_core.models.cache import CallCache, MemoryCallCache
from grace_core.models.config import ModelConfig
from grace_core.models import litellm_client
from grace_core.models.factory import ModelRoles, build_roles
from grace_core.models.litellm_client import Completion
from grace_core.models.litellm_roles import LiteLLMEmbedder, LiteLLMJudge, parse_judgements
from grace_core.models.offline_decomposer import OfflineDecomposer
from grace_core.models.roles import (
    Answerer,
    AnswerRequest,
    Decomposer,
    Judge,
    JudgeRequest,
    Responder,
    RespondRequest,
    Verifier,
    VerifyRequest,
)
from tests.models.openai_server import EMBED_DIM, MANY_CLAIMS, OpenAICompatibleServer, role_reply

MODEL = "openai/test-model"
IN_COST, OUT_COST = 1e-6, 2e-6
SOURCES = (
    "The tagger is trained for 10 epochs with the Adam optimizer. It reaches an F1 score of 91.2 on the test set.",
    "Pretrained GloVe vectors initialise the word embeddings. The tagger does not use character embeddings.",
    "Larger batch sizes decrease the training time. The corpus has 20,000 annotated sentences.",
)


def server_config(server: OpenAICompatibleServer, **overrides: Any) -> ModelConfig:
    """Every LLM role on the loopback server; quick retries; per-token prices for the unknown model."""
    base: dict[str, Any] = dict(
        backend="litellm", api_base=server.url, api_key="sk-test", responder_model=MODEL, decomposer_model=MODEL,
        judge_model=MODEL, verifier_model=MODEL, answerer_model=MODEL, torch_threads=1, retry_backoff_s=0.01,
        request_timeout_s=0.5, input_cost_per_token=IN_COST, output_cost_per_token=OUT_COST, concurrency=4,
    )
    return ModelConfig(**{**base, **overrides})


def claims_of(body: dict[str, Any]) -> list[str]:
    """The numbered claims of a judge request."""
    listed = body["messages"][1]["content"].split("\n\nClaims:\n", 1)[1]
    return [line.split(". ", 1)[1] for line in listed.splitlines()]


def test_judge_makes_one_call_per_source_with_at_most_k_prefiltered_claims(llm_server: OpenAICompatibleServer) -> None:
    cache = MemoryCallCache()
    roles = build_roles(server_config(llm_server, judge_batch_size=3), cache)
    roles.start_round(2)
    assert isinstance(roles.judge, LiteLLMJudge)
    claims = (
        "It reaches an F1 score of 91.2 on the test set.",
        "The tagger does not use character embeddings.",
        "The corpus has 20,000 annotated sentences.",
        "The tagger is trained for 10 epochs with the Adam optimizer.",
        "Pretrained GloVe vectors initialise the word embeddings.",
        "Larger batch sizes decrease the training time.",
        "Bananas grow in tropical climates near the equator.",
        "The city council approved the new parking rules.",
    )
    rows = roles.judge.judge([JudgeRequest(s, claims) for s in SOURCES])

    bodies = llm_server.chat_requests()
    assert len(bodies) == len(SOURCES)
    for source, row in zip(SOURCES, rows, strict=True):
        [body] = [b for b in bodies if b["messages"][1]["content"].startswith(f"Source:\n{source}\n\nClaims:")]
        sent = claims_of(body)
        assert 1 <= len(sent) <= 3
        assert "Bananas grow in tropical climates near the equator." not in sent
        own = [c for c in claims if c in source]
        assert set(own) <= set(sent), "a source's own sentences are its most similar claims"
        for claim, j in zip(claims, row, strict=True):
            if claim in sent:
                assert j.outcome == "ok" and j.label == ("entails" if claim in source else "neutral")
            else:
                assert j.outcome == "skipped" and j.label == "neutral"
            assert j.score is not None

    records = cache.records
    assert len(records) == 3 and {r.role for r in records} == {"judge"} and {r.round for r in records} == {2}
    by_prompt = {json.loads(r.request)["messages"][1]["content"]: r for r in records}
    for body in bodies:
        r = by_prompt[body["messages"][1]["content"]]
        assert r.outcome == "ok" and r.model == MODEL and r.latency_s > 0
        assert r.prompt_tokens == sum(len(m["content"].split()) for m in body["messages"])
        assert r.cost_usd == pytest.approx(r.prompt_tokens * IN_COST + r.completion_tokens * OUT_COST)
    usage = roles.usage()
    assert usage.calls == 3 and usage.cost_usd == pytest.approx(sum(r.cost_usd for r in records))


def test_rerun_is_answered_from_the_cache_with_zero_calls(llm_server: OpenAICompatibleServer) -> None:
    cache = MemoryCallCache()
    cfg = server_config(llm_server)
    requests = [JudgeRequest(s, tuple(s.split(". "))) for s in SOURCES]
    first = build_roles(cfg, cache).judge.judge(requests)
    calls = len(llm_server.requests)
    roles = build_roles(cfg, cache)
    assert roles.judge.judge(requests) == first
    assert len(llm_server.requests) == calls == 3
    assert roles.usage().calls == 0 and roles.usage().cache_hits == 3


@pytest.mark.parametrize(("script", "outcome"), [(["429"], "rate_limited"), (["slow"], "timeout"), (["500", "500"], "error")])
def test_rate_limits_timeouts_and_server_errors_are_retried(llm_server: OpenAICompatibleServer, script: list[str], outcome: str) -> None:
    cache = MemoryCallCache()
    llm_server.script.extend(script)
    [verdict] = build_roles(server_config(llm_server), cache).verifier.verify([VerifyRequest("It works.", "It works. Really.")])
    assert verdict.verdict == "confirm" and verdict.outcome == "ok"
    assert [r.outcome for r in cache.records] == [outcome] * len(script) + ["ok"]
    assert len({r.key for r in cache.records}) == 1
    assert len(llm_server.chat_requests()) == len(script) + 1


def test_malformed_reply_is_retried_with_a_correction_turn(llm_server: OpenAICompatibleServer) -> None:
    cache = MemoryCallCache()
    llm_server.script.append("malformed")
    [dec] = build_roles(server_config(llm_server), cache).decomposer.decompose(["The tagger is fast. It uses GloVe."])
    assert dec.outcome == "ok" and dec.claims == ("The tagger is fast.", "It uses GloVe.")
    first, second = llm_server.chat_requests()
    assert len(second["messages"]) == len(first["messages"]) + 2
    assert second["messages"][-2] == {"role": "assistant", "content": "this is not JSON at all"}
    assert "not valid" in second["messages"][-1]["content"]
    assert [r.outcome for r in cache.records] == ["malformed", "ok"] and cache.records[0].key == cache.records[1].key


def test_a_reply_that_stays_malformed_fails_its_item_only_and_is_retried_next_run(llm_server: OpenAICompatibleServer) -> None:
    cache = MemoryCallCache()
    cfg = server_config(llm_server, max_retries=2, concurrency=1)
    texts = ["Alpha beta gamma delta.", "The tagger is fast.", "It uses GloVe."]
    llm_server.script.extend(["malformed"] * 3)
    out = build_roles(cfg, cache).decomposer.decompose(texts)
    assert out[0].outcome == "failed" and out[0].claims == () and "malformed" in (out[0].error or "")
    assert [d.outcome for d in out[1:]] == ["ok", "ok"] and out[2].claims == ("It uses GloVe.",)
    assert [r.outcome for r in cache.records] == ["malformed"] * 3 + ["ok", "ok"]

    roles = build_roles(cfg, cache)
    again = roles.decomposer.decompose(texts)
    assert again[0].outcome == "ok" and again[0].claims == ("Alpha beta gamma delta.",)
    assert roles.usage().calls == 1 and roles.usage().cache_hits == 2


def test_an_invalid_judge_reply_must_cover_every_claim_once() -> None:
    assert parse_judgements('```json\n{"judgements": [{"id": 2, "label": "neutral"}, {"id": 1, "label": "entails"}]}\n```', 2) == ["entails", "neutral"]
    for bad in ('{"judgements": [{"id": 1, "label": "entails"}]}', '{"judgements": [{"id": 1, "label": "maybe"}, {"id": 2, "label": "neutral"}]}',
                '{"judgements": [{"id": 1, "label": "entails"}, {"id": 1, "label": "neutral"}]}', "[]"):
        with pytest.raises(Exception) as info:
            parse_judgements(bad, 2)
        assert type(info.value).__name__ == "MalformedReply"


def test_a_refused_key_stops_the_batch_with_a_named_error(llm_server: OpenAICompatibleServer) -> None:
    llm_server.script.append("401")
    with pytest.raises(ModelUnavailable, match="verifier model 'openai/test-model'"):
        build_roles(server_config(llm_server)).verifier.verify([VerifyRequest("a b c d", "a b c d")])


def test_concurrency_limit_holds(llm_server: OpenAICompatibleServer) -> None:
    llm_server.delay_s = 0.2
    requests = [VerifyRequest(f"Claim number {i} holds.", f"Claim number {i} holds.") for i in range(6)]
    verdicts = build_roles(server_config(llm_server, concurrency=2)).verifier.verify(requests)
    assert [v.verdict for v in verdicts] == ["confirm"] * 6
    assert llm_server.max_in_flight == 2


def mock_completion(**kwargs: Any) -> Any:
    """``litellm.completion`` with litellm's own ``mock_response``, computed from the prompt."""
    return litellm.completion(**kwargs, mock_response=role_reply({"messages": kwargs["messages"]}))


def test_spend_cap_stops_new_calls_cleanly_and_resets_each_round() -> None:
    cfg = ModelConfig(backend="litellm", verifier_model="gpt-4o-mini", torch_threads=1, concurrency=1, spend_cap_usd=2.5e-5)
    roles = build_roles(cfg, completion=mock_completion)
    roles.start_round(1)
    requests = [VerifyRequest(f"Fact {i} is true.", f"Fact {i} is true.") for i in range(5)]
    verdicts = roles.verifier.verify(requests)
    assert [v.outcome for v in verdicts] == ["ok", "ok", "capped", "capped", "capped"]
    assert [v.verdict for v in verdicts] == ["confirm", "confirm", "abstain", "abstain", "abstain"]
    usage = roles.usage()
    assert usage.spend_cap_reached and roles.spend_cap_reached and usage.calls == 2 and usage.capped_items == 3
    assert roles.client is not None
    costs = [r.cost_usd for r in roles.client.cache.records]
    assert len(costs) == 2 and all(c is not None and c > 0 for c in costs)
    assert usage.cost_usd == pytest.approx(sum(costs)) and usage.cost_usd >= 2.5e-5 > costs[0]
    with pytest.raises(SpendCapReached, match="round 1"):
        roles.client.ensure_within_cap()
    roles.start_round(2)
    assert [v.outcome for v in roles.verifier.verify(requests[2:4])] == ["ok", "ok"]


def test_spend_cap_on_a_model_without_a_price_is_refused_up_front(llm_server: OpenAICompatibleServer) -> None:
    with pytest.raises(UnknownModelPrice, match="openai/test-model"):
        build_roles(server_config(llm_server, spend_cap_usd=1.0, input_cost_per_token=None, output_cost_per_token=None))
    assert llm_server.requests == []


def test_rate_limit_that_never_ends_fails_the_item_after_bounded_retries() -> None:
    cache = MemoryCallCache()
    cfg = ModelConfig(backend="litellm", answerer_model="gpt-4o-mini", torch_threads=1, max_retries=2, retry_backoff_s=0.01)
    roles = build_roles(cfg, cache, completion=functools.partial(litellm.completion, mock_response="litellm.RateLimitError"))
    [answer] = roles.answerer.answer([AnswerRequest("Why?", "Because.")])
    assert answer.abstained and answer.outcome == "failed" and "rate limited" in (answer.error or "")
    assert [r.outcome for r in cache.records] == ["rate_limited"] * 3


def test_mock_responses_drive_every_llm_role() -> None:
    cache = MemoryCallCache()
    model = "gpt-4o-mini"
    cfg = ModelConfig(backend="litellm", responder_model=model, decomposer_model=model, judge_model=model,
                      verifier_model=model, answerer_model=model, torch_threads=1, n_samples=3)
    roles = build_roles(cfg, cache, completion=mock_completion)
    assert isinstance(cache, CallCache)
    for role, protocol in ((roles.responder, Responder), (roles.decomposer, Decomposer), (roles.judge, Judge),
                           (roles.verifier, Verifier), (roles.answerer, Answerer)):
        assert isinstance(role, protocol) and type(role).__name__.startswith("LiteLLM")
    responses = roles.responder.respond([RespondRequest("What is used?", "GloVe vectors are used. Adam trains it.")])
    assert [r.text for r in responses[0]] == ["GloVe vectors are used."] * 3 and [r.sample for r in responses[0]] == [0, 1, 2]
    assert len({r.key for r in cache.records}) == 3, "samples are distinct cache entries"
    [dec] = roles.decomposer.decompose(["GloVe vectors are used. Adam trains it."])
    assert dec.claims == ("GloVe vectors are used.", "Adam trains it.")
    [[j1, j2]] = roles.judge.judge([JudgeRequest("GloVe vectors are used.", ("GloVe vectors are used.", "Adam trains the tagger quickly."))])
    assert j1.label == "entails"
    free, unanswerable, choice = roles.answerer.answer([
        AnswerRequest("What is used?", "GloVe."), AnswerRequest("unanswerable?", "x"), AnswerRequest("Which?", "x", ("a", "b", "c")),
    ])
    assert free.text == "an answer" and unanswerable.abstained and choice.option == 1
    assert all(r.cost_usd and r.cost_usd > 0 and r.model == model for r in cache.records)


def test_api_embedder_is_cached_by_text_and_by_call(llm_server: OpenAICompatibleServer) -> None:
    cache = MemoryCallCache()
    cfg = server_config(llm_server, embedder_model="openai/test-embed")
    roles = build_roles(cfg, cache)
    assert isinstance(roles.embedder, LiteLLMEmbedder)
    vecs = roles.embedder.embed(["alpha", "beta", "alpha"])
    assert vecs.shape == (3, EMBED_DIM) and np.allclose(np.linalg.norm(vecs, axis=1), 1.0)
    assert np.array_equal(vecs[0], vecs[2]) and roles.embedder.dim == EMBED_DIM
    roles.embedder.embed(["beta"])
    assert len(llm_server.requests) == 1 and cache.records[0].role == "embedder"
    again = build_roles(cfg, cache).embedder.embed(["alpha", "beta", "alpha"])
    assert np.allclose(again, vecs) and len(llm_server.requests) == 1


def test_settings_from_the_environment_choose_each_roles_backend(llm_server: OpenAICompatibleServer, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"BACKEND": "litellm", "JUDGE_MODEL": MODEL, "DECOMPOSER_MODEL": "offline", "API_BASE": llm_server.url,
                       "API_KEY": "sk-env", "TORCH_THREADS": "1", "JUDGE_BATCH_SIZE": "2"}.items():
        monkeypatch.setenv(f"GRACE_{key}", value)
    settings = build_settings()
    roles: ModelRoles = build_roles(settings)
    assert isinstance(roles.judge, LiteLLMJudge) and isinstance(roles.decomposer, OfflineDecomposer)
    assert settings.api_key is not None and "sk-env" not in repr(settings)
    roles.judge.judge([JudgeRequest(SOURCES[0], tuple(SOURCES[0].split(". ")) + ("Unrelated words here.",))])
    [body] = llm_server.chat_requests()
    assert len(claims_of(body)) == 2


def test_a_dripping_reply_is_cut_off_at_the_whole_request_deadline(llm_server: OpenAICompatibleServer,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_server, "drip_s", 0.1)  # a byte every 0.1 s: litellm's per-read timeout of 1 s never trips
    llm_server.fallback = "drip"
    cache = MemoryCallCache()
    started = time.monotonic()
    [verdict] = build_roles(server_config(llm_server, request_timeout_s=1.0, max_retries=1), cache).verifier.verify(
        [VerifyRequest("It works.", "It works. Really.")])
    assert time.monotonic() - started < 8, "two attempts of a 1 s deadline (the drip alone takes ~30 s each)"
    assert verdict.outcome == "failed" and "1 s deadline" in (verdict.error or "")
    assert [r.outcome for r in cache.records] == ["timeout", "timeout"]
    assert all(r.latency_s < 3 for r in cache.records)


def test_a_call_on_a_path_without_the_bounded_connection_is_still_not_waited_for_past_its_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(litellm_client, "DEADLINE_SLACK_S", 0.2)
    release = threading.Event()

    def hangs(**_: Any) -> Any:
        release.wait(60)
        raise RuntimeError("released")

    cache = MemoryCallCache()
    cfg = ModelConfig(backend="litellm", verifier_model="gpt-4o-mini", torch_threads=1, max_retries=0, request_timeout_s=0.3)
    started = time.monotonic()
    [verdict] = build_roles(cfg, cache, completion=hangs).verifier.verify([VerifyRequest("It works.", "It works.")])
    release.set()
    assert time.monotonic() - started < 3
    assert verdict.outcome == "failed" and [r.outcome for r in cache.records] == ["timeout"]
    assert "0.3 s deadline" in (cache.records[0].error or "")


def test_an_oversized_or_compressed_reply_is_refused_as_it_arrives(llm_server: OpenAICompatibleServer) -> None:
    llm_server.script.extend(["huge", "gzip"])  # 50 MB of content; a gzip body (which could unpack to far more)
    cache = MemoryCallCache()
    started = time.monotonic()
    [verdict] = build_roles(server_config(llm_server, max_reply_bytes=2**20, max_retries=2), cache).verifier.verify(
        [VerifyRequest("It works.", "It works. Really.")])
    assert time.monotonic() - started < 10
    assert verdict.outcome == "ok" and [r.outcome for r in cache.records] == ["malformed", "malformed", "ok"]
    assert "larger than 1048576 bytes" in (cache.records[0].error or "") and "compressed (gzip)" in (cache.records[1].error or "")


def fake_reply(prompt_tokens: Any, completion_tokens: Any = 1, cost: Any = None) -> Completion:
    """A completion function whose reply is a valid verdict claiming this usage (and litellm cost)."""
    def complete(**_: Any) -> Any:
        message = SimpleNamespace(content=json.dumps({"verdict": "confirm", "reason": "x"}))
        return SimpleNamespace(choices=[SimpleNamespace(message=message)], _hidden_params={"response_cost": cost},
                               usage=SimpleNamespace(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens))
    return complete


@pytest.mark.parametrize(("prompt", "completion", "cost"), [
    (-1_000_000, 5, None), (float("nan"), 5, None), (5, float("inf"), None), (1e30, 5, None), (2.5, 5, None), ("12", 5, None),
    (5, 5, -420.0), (5, 5, float("nan")), (5, 5, float("inf")),
])
def test_implausible_usage_is_refused_and_charged_the_most_the_call_could_cost(prompt: Any, completion: Any, cost: Any) -> None:
    cache = MemoryCallCache()
    cfg = ModelConfig(backend="litellm", verifier_model=MODEL, torch_threads=1, max_retries=0, spend_cap_usd=1e-3, concurrency=1,
                      input_cost_per_token=IN_COST, output_cost_per_token=OUT_COST)
    roles = build_roles(cfg, cache, completion=fake_reply(prompt, completion, cost))
    roles.start_round(1)
    first, second = roles.verifier.verify([VerifyRequest("It works.", "It works."), VerifyRequest("It holds.", "It holds.")])
    [record] = cache.records
    assert record.outcome == "malformed" and "usage not plausible" in (record.error or "")
    assert record.completion_tokens == cfg.max_tokens and 0 < record.prompt_tokens < 1000
    assert record.cost_usd == pytest.approx(record.prompt_tokens * IN_COST + cfg.max_tokens * OUT_COST)
    usage = roles.usage()
    assert usage.cost_usd == record.cost_usd and usage.spend_cap_reached, "the spend only grows, and the cap still fires"
    assert first.outcome == "failed" and second.outcome == "capped"


def test_negative_or_nan_usage_from_a_server_never_lowers_the_spend(llm_server: OpenAICompatibleServer) -> None:
    llm_server.script.extend(["negative_usage", "nan_usage"])
    cache = MemoryCallCache()
    roles = build_roles(server_config(llm_server, max_retries=2), cache)
    roles.start_round(1)
    [verdict] = roles.verifier.verify([VerifyRequest("It works.", "It works. Really.")])
    assert verdict.outcome == "ok"
    negative, nan, ok = cache.records
    assert negative.outcome == "malformed" and negative.cost_usd is not None and negative.cost_usd > 0
    assert nan.outcome == "error" and nan.cost_usd is None  # litellm refuses the reply itself ("Invalid response object")
    assert ok.outcome == "ok" and roles.usage().cost_usd == pytest.approx(negative.cost_usd + ok.cost_usd)


def test_a_decomposer_reply_over_the_claims_cap_is_malformed_and_the_correction_turn_says_the_cap(
        llm_server: OpenAICompatibleServer) -> None:
    llm_server.script.append("many_claims")
    cache = MemoryCallCache()
    [dec] = build_roles(server_config(llm_server, max_claims_per_text=50), cache).decomposer.decompose(["The tagger is fast."])
    assert dec.outcome == "ok" and dec.claims == ("The tagger is fast.",)
    assert [r.outcome for r in cache.records] == ["malformed", "ok"]
    assert f"{MANY_CLAIMS} claims, more than the 50 allowed" in llm_server.chat_requests()[1]["messages"][-1]["content"]
