"""Typed settings of the six model roles (values only; the entry point's settings object *is* a
:class:`ModelConfig`, so every field reads ``GRACE_<FIELD>``, e.g. ``GRACE_JUDGE_MODEL``).

A role's model string is any litellm model (``openai/gpt-4o-mini``, ``ollama/llama3.1``, …) or
:data:`OFFLINE`, the embedded default that needs no key and no download. ``backend`` chooses
what the role strings mean: with ``backend=offline`` every role is offline whatever its string.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

OFFLINE = "offline"
EmbedPrecision = Literal["auto", "float32", "bfloat16"]
"""What the offline embedder's forward passes may run in ("auto": bfloat16 where the CPU has it in hardware)."""
MAX_THREADS = 256
"""Most threads a setting may start (torch threads, embedder workers, call workers): a static bound, generous for
any one machine, so that a typo such as 100000 is refused in one line instead of starting 100,000 threads."""


class ModelConfig(BaseModel):
    """Model roles, the litellm client's limits, and the offline heuristics' calibrated thresholds."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    backend: Literal["offline", "litellm"] = Field(
        "offline", description="offline: embedded heuristics for every role; litellm: each role uses its model string."
    )
    responder_model: str = Field("gpt-4o-mini", description="litellm model string of the responder, or 'offline'.")
    decomposer_model: str = Field("gpt-4o-mini", description="litellm model string of the decomposer, or 'offline'.")
    judge_model: str = Field("gpt-4o-mini", description="litellm model string of the judge, or 'offline'.")
    verifier_model: str = Field("gpt-4.1", description="litellm model string of the verifier, or 'offline'.")
    answerer_model: str = Field("gpt-4o-mini", description="litellm model string of the answerer, or 'offline'.")
    embedder_model: str = Field(
        OFFLINE, description="litellm embedding model string, or 'offline' for the packaged all-MiniLM-L6-v2 (any backend)."
    )
    api_base: str | None = Field(None, description="Base URL of an OpenAI-compatible or provider endpoint.")
    api_key: SecretStr | None = Field(None, description="API key; the provider's own env variable when unset.")

    n_samples: int = Field(3, ge=1, le=100, description="Responses sampled per question (at most 100).")
    temperature: float = Field(0.7, ge=0, le=2, description="Sampling temperature of the responder (at most 2, the OpenAI API's limit).")
    max_tokens: int = Field(1024, ge=16, le=1_000_000, description="Reply token limit of every litellm call (at most 1,000,000).")
    json_mode: bool = Field(True, description="Ask litellm for response_format=json_object (dropped where unsupported).")
    judge_batch_size: int = Field(24, ge=1, le=1000, description="K: most candidate claims judged in the one call per source (at most 1,000).")
    judge_prefilter_similarity: float = Field(
        0.25, ge=-1, le=1, description="Candidates need this cosine to some sentence of the source."
    )
    max_retries: int = Field(3, ge=0, le=100, description="Extra attempts after a malformed reply, a 429, a timeout or a 5xx (at most 100).")
    retry_backoff_s: float = Field(1.0, ge=0, le=3600, description="First backoff after a 429/timeout; doubles per attempt (at most an hour).")
    retry_backoff_max_s: float = Field(30.0, ge=0, le=3600, description="Longest backoff (at most an hour).")
    request_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="Deadline of one litellm request, wall clock: connecting, sending and the whole reply "
        "(a server dripping its reply byte by byte is cut off at it); at most an hour."
    )
    max_reply_bytes: int = Field(
        8 * 2**20, ge=2**10, le=256 * 2**20, description="Most bytes of one model reply (headers and body, as received); a "
        "larger reply is refused as malformed while it is read. 8 MiB by default (a 64-text batch of 3,072-dimension "
        "embeddings in JSON is ~4 MB), at most 256 MiB."
    )
    max_claims_per_text: int = Field(
        200, ge=1, le=10_000, description="Most claims the decomposer may return for one text; a reply with more is "
        "malformed (retried with a correction turn saying so, then a failed item). At most 10,000."
    )
    concurrency: int = Field(
        4, ge=1, le=256, description="litellm requests in flight at once in one process (its tasks share them; at most 256 threads)."
    )
    spend_cap_usd: float | None = Field(None, ge=0, le=1e9, description="Per-round USD cap; no new calls once reached.")
    input_cost_per_token: float | None = Field(
        None, ge=0, le=1, description="USD per prompt token for models litellm has no price for (at most $1)."
    )
    output_cost_per_token: float | None = Field(
        None, ge=0, le=1, description="USD per completion token for models litellm has no price for (at most $1)."
    )
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed of every sampled choice (offline responder, hallucinations, litellm seed).")

    embed_batch_size: int = Field(32, ge=1, le=4096, description="Most texts in one forward pass of the offline embedder (at most 4,096).")
    embed_batch_tokens: int = Field(
        512, ge=1, le=65_536, description="Most tokens in one forward pass of the offline embedder (a pass holds texts of one token "
        "count; 512 is fastest on CPU, ~10% over a fixed 8 texts; at most 65,536)."
    )
    embed_cache_size: int = Field(
        200_000, ge=0, le=10_000_000, description="Embeddings kept in memory, keyed by text hash (at most 10 million, ~15 GB of 384-float vectors)."
    )
    torch_threads: int | None = Field(
        1, ge=1, le=MAX_THREADS, description="torch threads of the offline embedder (None: OMP_NUM_THREADS, else every core). "
        "1 by default: flows run chunks in parallel processes, and oversubscribed torch threads run 5x slower here. At most 256."
    )
    embed_workers: int | None = Field(
        None, ge=1, le=MAX_THREADS, description="Forward passes of the offline embedder at once in one process, each on torch_threads threads "
        "(None: one per core). One encode's batches are spread over them, so a large one uses every core; with several "
        "worker processes on the same cores, cores / processes. At most 256."
    )
    embed_precision: EmbedPrecision = Field(
        "auto", description="What the offline embedder's forward passes run in. auto: bfloat16 where the CPU has it in "
        "hardware (AVX512_BF16 or AMX; about twice as fast, vectors within cosine 0.9999 of float32), else float32."
    )
    responder_sentences: int = Field(2, ge=1, le=100, description="Sentences in one offline response (at most 100).")
    responder_pool: int = Field(
        6, ge=1, le=1000, description="Most relevant context sentences the offline responder samples from (at most 1,000)."
    )
    hallucination_rate: float = Field(
        0.0, ge=0, le=1, description="Share of offline response sentences corrupted (number, negation or term), each recorded."
    )
    paraphrase_rate: float = Field(
        0.5, ge=0, le=1, description="Share of offline response sentences reworded (a clause or modifier dropped, clauses "
        "swapped, two sentences merged), each recorded; none at temperature 0."
    )

    # Offline thresholds: calibrated on QASPER dev by benchmarks/calibrate_judge.py (see README).
    judge_entail_similarity: float = Field(0.475, ge=-1, le=1, description="Offline judge: least cosine to the best source unit.")
    judge_entail_overlap: float = Field(0.4, ge=0, le=1, description="Offline judge: least share of the claim's content words near that unit.")
    judge_contradict_similarity: float = Field(
        0.5, ge=-1, le=1, description="Offline judge: a negation/number/antonym/term mismatch with a unit this close contradicts."
    )
    verifier_confirm_similarity: float = Field(0.725, ge=-1, le=1, description="Offline verifier: least cosine to confirm.")
    verifier_confirm_overlap: float = Field(0.85, ge=0, le=1, description="Offline verifier: least content-word overlap to confirm.")
    answer_min_score: float = Field(0.42, ge=-1, le=1, description="Offline answerer: abstain below this question–sentence cosine.")
    option_min_score: float = Field(0.0, ge=-1, le=1, description="Offline answerer: abstain when the best option scores below this.")
