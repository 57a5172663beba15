"""The build takes documents through its stages independently (a document is decomposed as soon
as its own responses are back), with the same rows as the stage-by-stage build, and the litellm
concurrency limit holds for the whole process however many threads make calls."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence

import numpy as np
import polars as pl
import pytest

from grace_core.build import build_document, build_documents
from grace_core.errors import ModelUnavailable
from grace_core.models.cache import MemoryCallCache
from grace_core.models.config import ModelConfig
from grace_core.models.factory import ModelRoles, build_roles
from grace_core.models.litellm_client import LiteLLMClient, call_workers
from grace_core.models.offline_answerer import OfflineAnswerer
from grace_core.models.offline_verifier import OfflineVerifier
from grace_core.models.roles import Decomposition, Judgement, JudgeRequest, RespondRequest, Response, VerifyRequest
from tests.models.openai_server import OpenAICompatibleServer
from tests.models.test_failures_and_secrets import DOCS, PASSAGES, QUESTIONS
from tests.models.test_litellm_backend import server_config

WAIT_S = 30.0
"""Most seconds the first document waits (it is released at once when the build pipelines)."""


class _SameVector:
    """An embedder whose every vector is the same (context selection falls back to passage order)."""

    dim = 2

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.tile(np.array([1.0, 0.0], dtype=np.float32), (len(texts), 1))


class _Stages:
    """Responder, decomposer and judge of two documents: the first document's responder waits
    (at most ``wait_s``) until the second document's response is being decomposed."""

    def __init__(self, wait_s: float = WAIT_S) -> None:
        self.wait_s = wait_s
        self.second_decomposed = threading.Event()
        self.first_saw_it: bool | None = None
        self.prepared: list[str] = []

    def respond(self, requests: Sequence[RespondRequest]) -> list[list[Response]]:
        out = []
        for r in requests:
            if r.question.startswith("first"):
                self.first_saw_it = self.second_decomposed.wait(self.wait_s)
            out.append([Response(f"The answer to {r.question.rstrip('?')} is here.", 0)])
        return out

    def decompose(self, texts: Sequence[str]) -> list[Decomposition]:
        if any(t.startswith("The answer to second") for t in texts):
            self.second_decomposed.set()
        return [Decomposition((t,)) for t in texts]

    def judge(self, requests: Sequence[JudgeRequest]) -> list[list[Judgement]]:
        return [[Judgement("entails" if c == r.source else "neutral") for c in r.claims] for r in requests]

    def prepare(self, sources: Sequence[str]) -> None:
        self.prepared.extend(sources)


def _fake_roles(stages: _Stages) -> ModelRoles:
    embedder = _SameVector()
    cfg = ModelConfig(backend="litellm", concurrency=2)
    return ModelRoles(stages, stages, stages, OfflineVerifier(embedder, cfg), OfflineAnswerer(embedder, cfg), embedder,  # type: ignore[arg-type]
                      client=LiteLLMClient(cfg, MemoryCallCache()))


TWO_DOCS = pl.DataFrame({"doc_id": ["a", "b"], "title": ["A", "B"]})
TWO_PASSAGES = pl.DataFrame({"doc_id": ["a", "b"], "source_id": ["pa", "pb"], "source_kind": ["prior", "prior"], "ord": [0, 0],
                             "text": ["Alpha is a model.", "Beta is a corpus."]},
                            schema={"doc_id": pl.Utf8, "source_id": pl.Utf8, "source_kind": pl.Utf8, "ord": pl.Int32, "text": pl.Utf8})
TWO_QUESTIONS = pl.DataFrame({"doc_id": ["a", "b"], "question_id": ["qa", "qb"], "ord": [0, 0], "question": ["first?", "second?"]},
                             schema={"doc_id": pl.Utf8, "question_id": pl.Utf8, "ord": pl.Int32, "question": pl.Utf8})


def _rows(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns)


def test_a_document_is_decomposed_while_another_still_waits_for_its_responses() -> None:
    stages = _Stages()
    result = build_documents(TWO_DOCS, TWO_PASSAGES, TWO_QUESTIONS, _fake_roles(stages), round_id=1, context_passages=1, model="m")
    assert stages.first_saw_it, "document b's response was decomposed while document a's responder was still out"
    assert sorted(stages.prepared) == sorted([*TWO_PASSAGES["text"], *result.responses["text"]]), "the judge heard of every source"
    assert result.responses["doc_id"].to_list() == ["a", "b"], "rows in document order, whichever finished first"
    assert result.failures.height == 0 and set(result.claims["doc_id"]) == {"a", "b"}


def test_the_stage_by_stage_build_waits_for_every_response_first() -> None:
    """The contrast: :func:`build_document` over both documents is the old barrier at each stage."""
    stages = _Stages(wait_s=1.0)
    build_document(TWO_DOCS, TWO_PASSAGES, TWO_QUESTIONS, _fake_roles(stages), round_id=1, context_passages=1, model="m")
    assert stages.first_saw_it is False


def test_the_pipelined_build_has_the_rows_and_calls_of_the_stage_by_stage_build(llm_server: OpenAICompatibleServer) -> None:
    cfg = server_config(llm_server, n_samples=2, concurrency=3, request_timeout_s=30.0)  # no timeout retries on a busy machine
    staged_roles = build_roles(cfg, MemoryCallCache())
    staged = build_document(DOCS, PASSAGES, QUESTIONS, staged_roles, round_id=1, context_passages=2, model="m")
    staged_calls = {str(b["messages"]) for b in llm_server.chat_requests()}
    llm_server.reset()
    llm_server.delay_s = 0.05
    roles = build_roles(cfg, MemoryCallCache())
    piped = build_documents(DOCS, PASSAGES, QUESTIONS, roles, round_id=1, context_passages=2, model="m")
    assert roles.documents_at_once == 8
    assert {str(b["messages"]) for b in llm_server.chat_requests()} == staged_calls, "the same prompts"
    assert llm_server.max_in_flight <= 3
    for name in ("responses", "claims", "edges", "corruptions", "failures"):
        assert _rows(getattr(piped, name)).equals(_rows(getattr(staged, name))), name
    assert piped.edges.height > 0 and piped.failures.height == 0


def test_the_offline_build_per_document_equals_the_stage_by_stage_build() -> None:
    roles = build_roles(ModelConfig(torch_threads=1, hallucination_rate=0.3))
    assert roles.documents_at_once == 1
    staged = build_document(DOCS, PASSAGES, QUESTIONS, roles, round_id=1, context_passages=2, model="offline")
    piped = build_documents(DOCS, PASSAGES, QUESTIONS, build_roles(ModelConfig(torch_threads=1, hallucination_rate=0.3)),
                            round_id=1, context_passages=2, model="offline")
    for name in ("responses", "claims", "edges", "corruptions"):
        assert _rows(getattr(piped, name)).equals(_rows(getattr(staged, name))), name
    assert piped.edges.height > piped.claims.height


def test_a_refused_key_stops_a_pipelined_build_with_the_named_error(llm_server: OpenAICompatibleServer) -> None:
    llm_server.fallback = "401"
    with pytest.raises(ModelUnavailable, match="responder model .openai/test-model."):
        build_documents(DOCS, PASSAGES, QUESTIONS, build_roles(server_config(llm_server, concurrency=4), MemoryCallCache()),
                        round_id=1, context_passages=2, model="m")


def test_the_concurrency_limit_holds_for_the_process_across_threads_and_clients(llm_server: OpenAICompatibleServer) -> None:
    # calls an earlier test left queued in the process's call workers (a build that failed at its
    # first error) reach the server for a moment yet: they must not count as this test's
    deadline = time.monotonic() + 60
    while True:
        llm_server.reset()
        time.sleep(0.5)
        if not llm_server.requests:
            break
        assert time.monotonic() < deadline, "the call workers kept sending an earlier test's calls"
    llm_server.delay_s = 0.2
    cfg = server_config(llm_server, concurrency=2)
    verdicts: list[list[str]] = []

    def verify(tag: str) -> None:
        reqs = [VerifyRequest(f"Claim {tag}{i} holds.", f"Claim {tag}{i} holds.") for i in range(4)]
        verdicts.append([v.verdict for v in build_roles(cfg, MemoryCallCache()).verifier.verify(reqs)])

    threads = [threading.Thread(target=verify, args=(t,)) for t in "abc"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert verdicts == [["confirm"] * 4] * 3
    assert llm_server.max_in_flight == 2, "three tasks' clients share the process's two call workers"


def test_a_forked_child_starts_call_workers_of_its_own() -> None:
    assert call_workers(2).submit(lambda: 1).result() == 1  # the parent's workers exist
    pid = os.fork()
    if pid == 0:  # the child has none of the parent's threads; a call must not wait forever
        signal.alarm(10)
        os._exit(0 if call_workers(2).submit(lambda: 7).result() == 7 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_document_whose_content_breaks_a_stage_is_left_out_alone_and_named() -> None:
    """One document must never stop the build of the others (issue "Nothing silently wrong"): a
    document whose passage is not text (a null that got past its checks) breaks the segmenter;
    it is an ``unprocessable`` failure naming the error, and the other documents are built as
    they are without it."""
    roles = build_roles(ModelConfig(torch_threads=1))
    broken = PASSAGES.with_columns(text=pl.when(pl.col("source_id") == "p3").then(None).otherwise(pl.col("text")))
    result = build_documents(DOCS, broken, QUESTIONS, roles, round_id=1, context_passages=2, model="offline")
    assert result.unprocessable.select("doc_id", "role", "outcome").rows() == [("d2", "build", "unprocessable")]
    assert result.unprocessable["error"][0].split(":")[0].endswith("Error") and result.failed.height == 0
    assert result.incomplete == ["d2"] and "d2" not in result.claims["doc_id"].to_list()
    alone = build_documents(DOCS.filter(pl.col("doc_id") != "d2"), PASSAGES, QUESTIONS, build_roles(ModelConfig(torch_threads=1)),
                            round_id=1, context_passages=2, model="offline")
    for name in ("responses", "claims", "edges"):
        assert _rows(getattr(result, name)).equals(_rows(getattr(alone, name))), name
