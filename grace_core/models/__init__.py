"""The six model roles (responder, decomposer, judge, verifier, answerer, embedder), each with
a litellm implementation (any hosted or local LLM) and an offline one (embedded, deterministic,
no key and no download). Flows call :func:`build_roles` and the roles' batch methods.
"""

from grace_core.models.cache import CallCache, CallRecord, MemoryCallCache, UsageStats
from grace_core.models.config import OFFLINE, ModelConfig
from grace_core.models.factory import ModelRoles, build_roles
from grace_core.models.roles import (
    Answer,
    Answerer,
    AnswerRequest,
    Corruption,
    Decomposer,
    Decomposition,
    Embedder,
    Judge,
    Judgement,
    JudgeRequest,
    Responder,
    RespondRequest,
    Response,
    Verdict,
    Verifier,
    VerifyRequest,
)

__all__ = [
    "OFFLINE", "Answer", "AnswerRequest", "Answerer", "CallCache", "CallRecord", "Corruption", "Decomposer",
    "Decomposition", "Embedder", "Judge", "JudgeRequest", "Judgement", "MemoryCallCache", "ModelConfig",
    "ModelRoles", "RespondRequest", "Responder", "Response", "UsageStats", "Verdict", "Verifier", "VerifyRequest",
    "build_roles",
]
