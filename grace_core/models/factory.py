"""Build the six model roles from a :class:`~grace_core.models.config.ModelConfig`.

``build_roles(settings, cache)`` is what flows call: with ``backend=offline`` (the default)
every role is the embedded, deterministic implementation; with ``backend=litellm`` each role
uses its model string (``offline`` keeps that one role offline), all through one
:class:`~grace_core.models.litellm_client.LiteLLMClient` that shares the cache, the concurrency
limit and the round's spend cap. litellm is imported only when some role needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import version
from typing import TYPE_CHECKING

from grace_core.models.cache import CallCache, MemoryCallCache, UsageStats
from grace_core.models.config import OFFLINE, ModelConfig
from grace_core.models.offline_answerer import OfflineAnswerer
from grace_core.models.offline_decomposer import OfflineDecomposer
from grace_core.models.offline_embedder import MODEL_PACKAGE, OfflineEmbedder, embed_precision
from grace_core.models.offline_judge import OfflineJudge
from grace_core.models.offline_responder import OfflineResponder
from grace_core.models.offline_verifier import OfflineVerifier
from grace_core.models.roles import Answerer, Decomposer, Embedder, Judge, Responder, Verifier

if TYPE_CHECKING:
    from grace_core.models.litellm_client import Completion, LiteLLMClient


@dataclass
class ModelRoles:
    """The six roles of one run, and the litellm client behind them (None when all are offline)."""

    responder: Responder
    decomposer: Decomposer
    judge: Judge
    verifier: Verifier
    answerer: Answerer
    embedder: Embedder
    client: LiteLLMClient | None = None

    def start_round(self, round_no: int, spent_usd: float = 0.0) -> None:
        """Tag later model calls with ``round_no``; the round's spend starts at ``spent_usd``
        (what earlier tasks of the round spent)."""
        if self.client is not None:
            self.client.start_round(round_no, spent_usd)

    def failures(self) -> list[tuple[str, str, str | None]]:
        """(role, outcome, error) of the model items that failed or were capped this round."""
        return self.client.failures() if self.client is not None else []

    @property
    def backend(self) -> str:
        """What really answers: ``offline`` when no role calls litellm, else ``litellm``."""
        return "offline" if self.client is None else "litellm"

    def usage(self) -> UsageStats:
        """Calls, cache hits, tokens and USD of the current round (zeros when offline)."""
        return self.client.usage() if self.client is not None else UsageStats()

    @property
    def documents_at_once(self) -> int:
        """Documents a build takes through its stages at once: 1 when every role is offline
        (they compute in Python, threads would only take turns), else 2·concurrency + 2, so
        that while some documents wait for the embedder the others keep every call worker busy."""
        return 1 if self.client is None else 2 * self.client.config.concurrency + 2

    @property
    def spend_cap_reached(self) -> bool:
        """True once the round's spend cap stopped new calls."""
        return self.client is not None and self.client.spend_cap_reached


def _llm(config: ModelConfig, model: str) -> bool:
    return config.backend == "litellm" and model != OFFLINE


def embeds_offline(config: ModelConfig) -> bool:
    """Whether ``config``'s roles embed with the packaged offline embedder (every backend but
    litellm with an embedding model of its own)."""
    return not _llm(config, config.embedder_model)


def embedder_identity(config: ModelConfig) -> str:
    """Which embedder ``config``'s roles embed with, as stored beside what it measured (two
    embedders' distances are not comparable): the litellm embedding model, or the packaged
    offline model with its package version, and its precision when not float32."""
    if embeds_offline(config):
        packaged = f"offline:{MODEL_PACKAGE}=={version(MODEL_PACKAGE.replace('_', '-'))}"
        precision = embed_precision(config.embed_precision)
        return packaged if precision == "float32" else f"{packaged}:{precision}"
    return f"litellm:{config.embedder_model}"


def build_roles(
    config: ModelConfig,
    cache: CallCache | None = None,
    *,
    completion: Completion | None = None,
    embedding: Completion | None = None,
) -> ModelRoles:
    """The six roles for ``config``. ``cache`` (the lake's ``llm_calls`` table in flows; an
    in-memory one when None) answers repeated calls and records every call. ``completion`` /
    ``embedding`` replace ``litellm.completion`` / ``litellm.embedding`` (tests add
    ``mock_response``). Raises :class:`~grace_core.errors.UnknownModelPrice` when a spend cap is
    set for a model litellm cannot price."""
    llm_models = [m for m in (config.responder_model, config.decomposer_model, config.judge_model,
                              config.verifier_model, config.answerer_model, config.embedder_model) if _llm(config, m)]
    client = None
    if llm_models:
        from grace_core.models.litellm_client import LiteLLMClient

        client = LiteLLMClient(config, cache if cache is not None else MemoryCallCache(), completion=completion, embedding=embedding)
        client.check_prices(llm_models)

    if not embeds_offline(config):
        from grace_core.models.litellm_roles import LiteLLMEmbedder

        embedder: Embedder = LiteLLMEmbedder(client, config.embedder_model)
    else:
        embedder = OfflineEmbedder.from_config(config)

    if client is None:
        return ModelRoles(
            OfflineResponder(embedder, config), OfflineDecomposer(), OfflineJudge(embedder, config),
            OfflineVerifier(embedder, config), OfflineAnswerer(embedder, config), embedder,
        )

    from grace_core.models.litellm_roles import (
        LiteLLMAnswerer,
        LiteLLMDecomposer,
        LiteLLMJudge,
        LiteLLMResponder,
        LiteLLMVerifier,
    )

    return ModelRoles(
        responder=LiteLLMResponder(client, config.responder_model, config) if _llm(config, config.responder_model) else OfflineResponder(embedder, config),
        decomposer=LiteLLMDecomposer(client, config.decomposer_model) if _llm(config, config.decomposer_model) else OfflineDecomposer(),
        judge=LiteLLMJudge(client, config.judge_model, config, embedder) if _llm(config, config.judge_model) else OfflineJudge(embedder, config),
        verifier=LiteLLMVerifier(client, config.verifier_model) if _llm(config, config.verifier_model) else OfflineVerifier(embedder, config),
        answerer=LiteLLMAnswerer(client, config.answerer_model) if _llm(config, config.answerer_model) else OfflineAnswerer(embedder, config),
        embedder=embedder,
        client=client,
    )
